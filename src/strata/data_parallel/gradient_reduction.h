// Gradient reduction over the data-parallel groups, bucket by bucket, started while the
// step's last backward still runs: a bucket launches its non-blocking reduction as soon as
// every layer unit with parameters in it is complete, all-reduce (ZeRO stage 0) or
// reduce-scatter into the own shard (stage >= 1). finish() waits for them all and adds the
// sums the data-parallel average does not cover (tp-partial, tied-embedding and expert
// gradients; docs/parallelism.md).
//
// compression.gradients (from compression.start_step on; docs/communication.md): "bf16" converts
// a bucket to bf16 for the reduction and the result back; "powersgd" all-reduces it through
// low-rank factors (powersgd.h), each rank then keeping its shard; "onebit" does not reduce at
// all: 1-bit Adam's optimizer exchanges the momentum instead (sharded_optimizer.h), so the
// buckets keep this rank's own full gradients and the sums below run on them.
#pragma once
#include <cstdint>
#include <memory>
#include <vector>

#include "strata/core/config.h"
#include "strata/data_parallel/buckets.h"
#include "strata/data_parallel/compressed_traffic.h"
#include "strata/data_parallel/powersgd.h"

namespace strata {

class GradientReduction {
 public:
  // tied: the ranks of the first and last virtual pipeline stage (for the tied embedding), or
  // null where one rank holds both or this rank holds neither. The bytes the
  // compressed reductions send, and those they stand for, go to `traffic`.
  GradientReduction(FlatBuckets& buckets, Mesh& mesh, Comm* tied,
                    const CompressionConfig& compression, CompressedTraffic& traffic);

  // Gradients zeroed (stage 2/3: their full buffers allocated for the step); `step` (0-based)
  // decides whether this step compresses.
  void begin_step(int64_t step);
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
  // This step leaves the gradients unreduced, each rank's own (1-bit Adam's compressed phase).
  bool local_gradients() const { return local_; }

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
  // The gradient tensors this rank holds of the parameters `select` picks: the pieces in the own
  // shards, or (local gradients) the whole parameters.
  template <typename Select>
  std::vector<at::Tensor> held_gradients(Select select);
  // What the uncompressed reduction of a bucket sends, in the gradients' own dtype.
  void add_uncompressed(const Bucket& bucket);

  FlatBuckets& buckets_;
  Mesh& mesh_;
  Comm* tied_;
  CompressionConfig compression_;
  CompressedTraffic& traffic_;
  at::ScalarType wire_dtype_;  // this step's
  bool local_ = false;         // this step's: 1-bit Adam's compressed phase
  bool powersgd_ = false;      // this step's
  std::vector<std::unique_ptr<PowerSgd>>
      powersgd_of_;                          // [bucket], compression.gradients = powersgd
  std::vector<InFlight> in_flight_;          // [bucket]
  std::vector<std::vector<bool>> complete_;  // [chunk][unit], this step
  std::vector<bool> armed_;                  // [chunk]
  std::vector<size_t> launch_order_;
  int64_t overlapped_ = 0;
};

}  // namespace strata
