// What checkpoints cost a training run that fails now and then (`strata plan --mtbf-hours`):
// the checkpoint interval by Young's formula (Young 1974: tau = sqrt(2 * delta * MTBF), delta
// the time a checkpoint stops training) and the expected share of throughput lost to
// checkpointing and to the work redone after a failure, for synchronous and asynchronous
// (`checkpoint.async`) checkpoints.
#pragma once
#include <cstdint>
#include <string>

#include "strata/plan/cost_model.h"

namespace strata {

struct CheckpointCosts {
  double mtbf_hours_per_node = 0;  // mean time between failures of one node
  double write_gbs_per_node = 2;   // a node's write bandwidth to the checkpoint storage
  double restart_s = 60;           // relaunch and load after a failure
};

// Device memory to host memory, per device (PCIe 4.0 x16), for the asynchronous snapshot.
constexpr double kHostCopyGbs = 25;

struct CheckpointMode {
  double stall_s = 0;     // training stops this long per checkpoint
  double write_s = 0;     // until the checkpoint is on storage
  double interval_s = 0;  // between checkpoints
  int64_t interval_steps = 1;
  double lost_fraction = 0;  // expected throughput lost: stalls + redone work + restarts
};

struct CheckpointPlan {
  double bytes_per_device = 0;  // weights and optimizer state (with the fp32 masters), sharded
  double job_mtbf_s = 0;        // the cluster's: a node's MTBF / nodes
  CheckpointMode sync, async;
};

// UserError naming the flag for a non-positive MTBF or bandwidth, or a negative restart time.
void check_checkpoint_costs(const CheckpointCosts& costs);

// For the prediction of a layout on `cluster` (check_checkpoint_costs first).
CheckpointPlan plan_checkpoints(const Prediction& prediction, const ClusterProfile& cluster,
                                const CheckpointCosts& costs);

}  // namespace strata
