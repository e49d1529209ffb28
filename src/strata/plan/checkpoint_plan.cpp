#include "strata/plan/checkpoint_plan.h"

#include <algorithm>
#include <cmath>

#include "strata/core/error.h"

namespace strata {
namespace {

// Young's interval for a stall of `stall` seconds, at least the time the checkpoint takes to
// reach storage (an asynchronous write must end before the next begins) and one step; the
// expected loss to first order in interval / MTBF: stall / interval of every interval, half an
// interval redone and the restart after every failure.
CheckpointMode mode(double stall, double write, double mtbf, double restart, double step) {
  CheckpointMode out;
  out.stall_s = stall;
  out.write_s = write;
  const double young = std::sqrt(2 * stall * mtbf);
  out.interval_steps = std::max<int64_t>(1, std::llround(std::max(young, write) / step));
  out.interval_s = static_cast<double>(out.interval_steps) * step;
  out.lost_fraction = stall / (out.interval_s + stall) + (out.interval_s / 2 + restart) / mtbf;
  return out;
}

}  // namespace

void check_checkpoint_costs(const CheckpointCosts& costs) {
  STRATA_REQUIRE(costs.mtbf_hours_per_node > 0, "--mtbf-hours must be > 0, e.g. --mtbf-hours 5000");
  STRATA_REQUIRE(costs.write_gbs_per_node > 0, "--checkpoint-gbs must be > 0, e.g. 2");
  STRATA_REQUIRE(costs.restart_s >= 0, "--restart-s must be >= 0, e.g. 60");
}

CheckpointPlan plan_checkpoints(const Prediction& prediction, const ClusterProfile& cluster,
                                const CheckpointCosts& costs) {
  check_checkpoint_costs(costs);
  CheckpointPlan plan;
  plan.bytes_per_device = prediction.memory.params + prediction.memory.optimizer;
  plan.job_mtbf_s = costs.mtbf_hours_per_node * 3600 / static_cast<double>(cluster.nodes);
  const double node_bytes = plan.bytes_per_device * static_cast<double>(cluster.devices_per_node);
  const double write = node_bytes / (costs.write_gbs_per_node * 1e9);
  const double snapshot = plan.bytes_per_device / (kHostCopyGbs * 1e9);
  plan.sync = mode(write, write, plan.job_mtbf_s, costs.restart_s, prediction.step_time_s);
  plan.async =
      mode(snapshot, snapshot + write, plan.job_mtbf_s, costs.restart_s, prediction.step_time_s);
  return plan;
}

}  // namespace strata
