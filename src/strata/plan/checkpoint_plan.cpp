#include "strata/plan/checkpoint_plan.h"

#include <algorithm>
#include <cmath>
#include <sstream>

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

nlohmann::json mode_json(const CheckpointMode& mode) {
  return {{"stall_s", mode.stall_s},
          {"write_s", mode.write_s},
          {"interval_s", mode.interval_s},
          {"interval_steps", mode.interval_steps},
          {"lost_fraction", mode.lost_fraction}};
}

std::string fixed(double value, int digits) {
  std::ostringstream out;
  out.setf(std::ios::fixed);
  out.precision(digits);
  out << value;
  return out.str();
}

}  // namespace

CheckpointPlan plan_checkpoints(const Prediction& prediction, const ClusterProfile& cluster,
                                const CheckpointCosts& costs) {
  STRATA_REQUIRE(costs.mtbf_hours_per_node > 0, "--mtbf-hours must be > 0, e.g. --mtbf-hours 5000");
  STRATA_REQUIRE(costs.write_gbs_per_node > 0, "--checkpoint-gbs must be > 0, e.g. 2");
  STRATA_REQUIRE(costs.restart_s >= 0, "--restart-s must be >= 0, e.g. 60");
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

std::string checkpoints_to_text(const CheckpointPlan& plan, const CheckpointCosts& costs) {
  std::ostringstream out;
  out << "checkpoints (MTBF " << costs.mtbf_hours_per_node << " h per node: a failure every "
      << fixed(plan.job_mtbf_s / 3600, 2) << " h; " << costs.write_gbs_per_node
      << " GB/s of storage per node; restart " << costs.restart_s << " s; "
      << fixed(plan.bytes_per_device / 1e9, 2) << " GB per device):\n"
      << "  sync:   stalls " << fixed(plan.sync.stall_s, 2) << " s; every "
      << plan.sync.interval_steps << " steps (" << fixed(plan.sync.interval_s, 0)
      << " s, Young's interval); " << fixed(100 * plan.sync.lost_fraction, 2)
      << "% of throughput lost\n"
      << "  async:  stalls " << fixed(plan.async.stall_s, 3) << " s to snapshot, writes in "
      << fixed(plan.async.write_s, 2) << " s behind training; every " << plan.async.interval_steps
      << " steps (" << fixed(plan.async.interval_s, 0) << " s); "
      << fixed(100 * plan.async.lost_fraction, 2) << "% lost (checkpoint.async = true)\n";
  return out.str();
}

nlohmann::json checkpoints_to_json(const CheckpointPlan& plan) {
  return {{"bytes_per_device", plan.bytes_per_device},
          {"job_mtbf_s", plan.job_mtbf_s},
          {"sync", mode_json(plan.sync)},
          {"async", mode_json(plan.async)}};
}

}  // namespace strata
