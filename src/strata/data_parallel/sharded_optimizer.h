// The update on this rank's shards (ZeRO stage >= 1: the own shard of every bucket; stage 0:
// whole buckets): AdamW moments kept per bucket shard, the global gradient norm with every
// parameter counted once, clipping, and (stages 1 and 2) the all-gather that brings every
// rank's updated shard back into the full parameters.
//
// Mixed precision (bf16, fp16): the parameters are low precision, so the shard also keeps
// float32 master weights. AdamW updates the masters; the parameters are the masters rounded
// after each update (and after a checkpoint load). Without them an update smaller than half a
// unit in the last place of a bf16 weight would be lost (tests/data_parallel).
#pragma once
#include <ATen/ATen.h>

#include <memory>
#include <utility>
#include <vector>

#include "strata/core/config.h"
#include "strata/data_parallel/buckets.h"
#include "strata/optim/adamw.h"

namespace strata {

class ShardedOptimizer {
 public:
  // masters: keep master weights in the gradients' dtype (the parameters are lower precision).
  ShardedOptimizer(FlatBuckets& buckets, Mesh& mesh, const TrainConfig& config, bool masters);

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

  FlatBuckets& buckets_;
  Mesh& mesh_;
  std::vector<State> shards_;  // [bucket], the own shards (shard_numel)
  std::vector<State> full_;    // [bucket] (numel), between begin_ and end_full_state
  std::unique_ptr<AdamW> adamw_;
};

}  // namespace strata
