// `strata plan calibrate`: measures this machine the way the cost model describes a cluster
// (matrix-multiply rate, memory bandwidth, MPI latency and bandwidth between local ranks) and
// makes the `local` cluster profile, so the planner's predictions for local runs can be checked
// against real `strata train` step times. Every rank measures at the same time, as ranks of a
// training run compute at the same time; a trial's median is kept, not its best, because
// training runs at the typical rate of a shared machine.
#pragma once
#include <string>

#include "strata/plan/cluster.h"

namespace strata {

class Comm;

struct CalibrationReport {
  ClusterProfile profile;       // one node of world-size "devices"; fp32, as the runtime
  double matmul_tflops = 0;     // per rank, the slowest rank
  double attention_tflops = 0;  // per rank: batched head_dim-sized matmuls (QK^T, attention x V)
  // per rank: the blockwise kernel forward + backward, its executed FLOPs (attention_core_flops)
  double blockwise_attention_tflops = 0;
  double memory_bandwidth_gbs = 0;     // per rank: c = a + b on 4 MB tensors
  double elementwise_gbs = 0;          // per rank: LayerNorm, softmax, GELU on 4 MB tensors
  double allreduce_latency_us = 0;     // per ring step, from an 8-byte all-reduce
  double allreduce_bandwidth_gbs = 0;  // from a 16 MB all-reduce with the latency taken off
  double p2p_latency_us = 0;           // half a ping-pong of one float between ranks 0 and 1
  double p2p_bandwidth_gbs = 0;        // a 16 MB message from rank 0 to 1
  int threads_per_rank = 1;
};

// Collective over `world` (MPI initialized, threads configured). Every rank gets the report.
// With one rank there is no network to measure: the links are set to the memory bandwidth and
// a latency of 1 us, and the report says so.
CalibrationReport calibrate_local(Comm& world);

// Human-readable lines: what was measured, and how it became the profile.
std::string calibration_to_text(const CalibrationReport& report);

// Writes `profile` to `path` atomically (temporary file, then rename), creating directories,
// with a first line saying it was measured here.
void save_local_profile(const std::string& path, const ClusterProfile& profile);

// The `local` profile for a run on `world` (what parallel.auto plans with): read from
// local_profile_path() when rank 0 finds it, else measured now by calibrate_local on these
// ranks and saved there for later runs. Collective; every rank gets the same profile. `note`
// says which happened.
ClusterProfile local_profile_on_ranks(Comm& world, std::string* note);

}  // namespace strata
