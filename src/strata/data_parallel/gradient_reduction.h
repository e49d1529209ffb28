// Gradient reduction over the data-parallel groups, bucket by bucket, started while the
// step's last backward still runs: a bucket launches its non-blocking reduction as soon as
// every layer unit with parameters in it is complete, all-reduce (ZeRO stage 0) or
// reduce-scatter into the own shard (stage >= 1). finish() waits for them all and adds the
// sums the data-parallel average does not cover (tp-partial, tied-embedding and expert
// gradients; docs/parallelism.md). Gradients travel in parallel.grad_reduce_dtype: a bucket in
// another dtype is converted for the reduction and the result converted back.
#pragma once
#include <cstdint>
#include <vector>

#include "strata/data_parallel/buckets.h"

namespace strata {

class GradientReduction {
 public:
  // tied: the first and last pipeline stage (for the tied embedding), or null. wire_dtype: the
  // dtype gradients travel in.
  GradientReduction(FlatBuckets& buckets, Mesh& mesh, Comm* tied, at::ScalarType wire_dtype);

  // Gradients zeroed (stage 2/3: their full buffers allocated for the step).
  void begin_step();
  // The chunk's last backward of the step begins: from now on a unit's gradients are complete
  // when unit_complete says so, and buckets launch as their units complete.
  void arm(int chunk);
  // A unit's gradients are complete (ignored unless the chunk is armed). during_backward:
  // reported from inside autograd's backward (counted as overlapped).
  void unit_complete(int chunk, int64_t unit, bool during_backward);
  // Every unit of the chunk is complete; disarms it.
  void chunk_complete(int chunk);
  // Tests the reductions in flight: MPI advances a non-blocking collective only inside MPI
  // calls, so backward pokes them between layers to overlap them with the compute.
  void progress();
  // Launches what has not started, waits for everything, then the tp-partial, tied and
  // expert sums on the own shards.
  void finish();

  int64_t buckets_overlapped() const { return overlapped_; }

 private:
  struct InFlight {  // per bucket, this step
    int64_t units_pending = 0;
    bool launched = false;
    at::Tensor wire;     // the bucket's gradients converted to the wire dtype, if they differ
    at::Tensor reduced;  // the reduce-scatter's output where it is not the shard itself (stage 1,
                         // or another dtype), copied into the shard after
    Work reduction;
  };
  void launch(size_t bucket, bool during_backward);
  void wait(size_t bucket);
  void sum_partial_gradients();

  FlatBuckets& buckets_;
  Mesh& mesh_;
  Comm* tied_;
  at::ScalarType wire_dtype_;
  std::vector<InFlight> in_flight_;          // [bucket]
  std::vector<std::vector<bool>> complete_;  // [chunk][unit], this step
  std::vector<bool> armed_;                  // [chunk]
  std::vector<size_t> launch_order_;
  int64_t overlapped_ = 0;
};

}  // namespace strata
