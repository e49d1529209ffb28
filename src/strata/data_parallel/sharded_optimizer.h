// The update on this rank's shards (ZeRO stage >= 1: the own shard of every bucket; stage 0:
// whole buckets): AdamW moments kept per bucket shard, the global gradient norm with every
// parameter counted once, clipping, and (stages 1 and 2) the all-gather that brings every
// rank's updated shard back into the full parameters.
//
// Mixed precision (bf16, fp16): the parameters are low precision, so the shard also keeps
// float32 master weights. AdamW updates the masters; the parameters are the masters rounded
// after each update (and after a checkpoint load). Without them an update smaller than half a
// unit in the last place of a bf16 weight would be lost (tests/data_parallel).
//
// 1-bit Adam (compression.gradients = "onebit"; Tang et al. 2021, arXiv 2102.02888): the first
// compression.start_step steps are plain AdamW on reduced gradients. From then on the variance
// is frozen and the gradients are not reduced (gradient_reduction.h): each rank folds its own
// gradient into the momentum, m_i = beta1 m + (1 - beta1) g_i, and the momentum is averaged
// by the 1-bit compressed all-reduce (onebit_allreduce.h), which leaves the same m on every
// rank; the update divides it by the frozen variance. Every rank keeps the full momentum and
// the worker error (ZeRO >= 1 shards the variance and the masters only): the momentum is the
// quantity all-reduced. Clipping then uses each rank's own gradient norm (over tp and pp, not
// dp), as DeepSpeed's 1-bit Adam clips local gradients.
#pragma once
#include <ATen/ATen.h>

#include <memory>
#include <utility>
#include <vector>

#include "strata/core/config.h"
#include "strata/data_parallel/buckets.h"
#include "strata/data_parallel/compressed_traffic.h"
#include "strata/data_parallel/onebit_allreduce.h"
#include "strata/optim/adamw.h"

namespace strata {

class ShardedOptimizer {
 public:
  // masters: keep master weights in the gradients' dtype (the parameters are lower precision).
  // The 1-bit exchange's bytes are recorded in `traffic`.
  ShardedOptimizer(FlatBuckets& buckets, Mesh& mesh, const TrainConfig& config, bool masters,
                   const CompressionConfig& compression, CompressedTraffic& traffic);

  // This step's gradients are each rank's own, full and unreduced (1-bit Adam's compressed
  // phase): clipping, the overflow check and the update work on them.
  void set_local_gradients(bool local) { local_ = local; }

  // The global norm of the gradients before clipping (float64 sums over every group), after
  // multiplying them by `unscale` (1 / the loss scale; 1 without one). Clipping and the unscale
  // are one pass over the gradients.
  double clip_gradients(double max_norm, double unscale = 1.0);
  // Whether any gradient on any rank of the world is inf or NaN (collective over the world).
  bool gradients_overflowed();
  // AdamW on the own shards, then the parameters from the masters and (stages 1, 2) the
  // updated shards all-gathered.
  void step(double lr);
  AdamW& adamw() { return *adamw_; }
  int64_t state_bytes() const;  // storage of the master weights and moments this rank holds

  // A bucket's optimizer state: its own shard (shard_numel) or the whole bucket (numel).
  // master: undefined without master weights.
  struct State {
    at::Tensor master, exp_avg, exp_avg_sq;
  };
  // Each bucket's state at full size: gathered from the shards, or (for_load) allocated to be
  // filled. end_full_state copies the own shards out of what was filled (loaded; then the
  // parameters are set from the loaded masters) and drops the full tensors.
  const std::vector<State>& begin_full_state(bool for_load);
  void end_full_state(bool loaded);

 private:
  void parameters_from_masters();  // round the masters into the parameters, then gather
  void onebit_step(double lr);
  // The gradients this rank holds of a bucket: the own shard, or (local gradients) all of them.
  at::Tensor& held_gradients(Bucket& bucket) { return local_ ? bucket.grads : bucket.grad_shard; }

  FlatBuckets& buckets_;
  Mesh& mesh_;
  CompressionConfig compression_;
  CompressedTraffic& traffic_;
  double beta1_;
  bool local_ = false;
  // 1-bit Adam's compressed phase, per bucket: the full momentum (stage 0: exp_avg itself) and
  // the exchange with its error buffers; set up at the first compressed step (and again after
  // a checkpoint load, from the moments loaded).
  std::vector<at::Tensor> momentum_;
  std::vector<std::unique_ptr<OneBitAllReduce>> exchange_;
  bool momentum_ready_ = false;
  std::vector<State> shards_;  // [bucket], the own shards (shard_numel)
  std::vector<State> full_;    // [bucket] (numel), between begin_ and end_full_state
  std::unique_ptr<AdamW> adamw_;
};

}  // namespace strata
