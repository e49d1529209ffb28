// The update on this rank's shards (ZeRO stage >= 1: the own shard of every bucket; stage 0:
// whole buckets): AdamW moments kept per bucket shard, the global gradient norm with every
// parameter counted once, clipping, and (stages 1 and 2) the all-gather that brings every
// rank's updated shard back into the full parameters.
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
  ShardedOptimizer(FlatBuckets& buckets, Mesh& mesh, const TrainConfig& config);

  // The global norm of the gradients before clipping (float64 sums over every group).
  double clip_gradients(double max_norm);
  // AdamW on the own shards, then (stages 1, 2) the updated shards all-gathered.
  void step(double lr);
  AdamW& adamw() { return *adamw_; }
  int64_t state_bytes() const;  // storage of the moments this rank holds

  // A bucket's two AdamW moments: its own shard (shard_numel) or the whole bucket (numel).
  struct Moments {
    at::Tensor exp_avg, exp_avg_sq;
  };
  // Each bucket's moments at full size: gathered from the shards, or (for_load) allocated
  // to be filled. end_full_moments copies the own shards out of what was filled (loaded)
  // and drops the full tensors.
  const std::vector<Moments>& begin_full_moments(bool for_load);
  void end_full_moments(bool loaded);

 private:
  FlatBuckets& buckets_;
  Mesh& mesh_;
  std::vector<Moments> shards_;  // [bucket], the own shards (shard_numel)
  std::vector<Moments> full_;    // [bucket] (numel), between begin_ and end_full_moments
  std::unique_ptr<AdamW> adamw_;
};

}  // namespace strata
