// Data parallelism with ZeRO (Rajbhandari et al. 2020, arXiv 1910.02054): this rank's
// parameters, gradients and AdamW moments kept in flat buckets, each sharded over its
// parameters' data-parallel group as the stage asks, and the gradient reduction started
// bucket by bucket while the last microbatch's backward still runs.
//
// A bucket is a run of layers (LayerHooks units) of one model chunk whose parameters share a
// data-parallel group, about parallel.bucket_mb large (zero 3: exactly one layer). Its
// buffers are flat, padded to a multiple of the group size n; rank r owns elements
// [r*S, (r+1)*S) with S = padded size / n (zero 0: the whole bucket, S = size).
//
//   stage  parameters                   gradients                     AdamW moments
//   0      full                         full, all-reduced (average)   full
//   1      full, all-gathered after     full, reduce-scattered        own shard
//          the update
//   2      full, all-gathered after     own shard (full only from the own shard
//          the update                   step's start to its reduction)
//   3      own shard; a layer gathered  as 2                          own shard
//          before its forward and its
//          backward, freed after
//
// Parameter values and .grad are views into the flat buffers; freeing resizes a buffer's
// storage to 0 bytes, so the views (and autograd's saved references to them) stay valid and
// see the data again once it is gathered back.
#pragma once
#include <ATen/ATen.h>

#include <memory>
#include <vector>

#include "strata/ckpt/checkpoint.h"
#include "strata/core/config.h"
#include "strata/dist/mesh.h"
#include "strata/model/gpt.h"
#include "strata/optim/adamw.h"
#include "strata/train/pipeline_executor.h"

namespace strata {

// The group a parameter's gradient is averaged over and its training state sharded over:
// expert weights (split over ep) over expert_dp, every other parameter over dp.
Comm& data_parallel_group(const Parameter& parameter, Mesh& mesh);

class DataParallel final : public BackwardListener {
 public:
  // Takes over the parameters of `chunks` (rebinding their values and gradients to views of
  // its buffers) and installs itself as the chunks' LayerHooks; pass it to the training
  // executor as its BackwardListener. tied: the first and last pipeline stage (for the tied
  // embedding), or null.
  DataParallel(const std::vector<GPT*>& chunks, Mesh& mesh, const Config& config, Comm* tied);
  ~DataParallel() override;
  DataParallel(const DataParallel&) = delete;
  DataParallel& operator=(const DataParallel&) = delete;

  // One step: begin_step -> microbatches through the executor (buckets reduce as their layers
  // finish the last backward) -> reduce_gradients -> clip_gradients -> step.
  void begin_step();                       // gradients zeroed (zero 2/3: allocated)
  void reduce_gradients();                 // the rest launched, all waited; tp and tied sums
  double clip_gradients(double max_norm);  // returns the global norm before clipping
  void step(double lr);                    // AdamW on the own shards, then (zero 1/2) gather
  AdamW& optimizer() { return *optimizer_; }

  // Of this step's gradient buckets, how many started their reduction while autograd was
  // still running the last backward (the rest start when their chunk's last action ends).
  int64_t buckets() const;
  int64_t buckets_overlapped() const { return buckets_overlapped_; }

  // Bytes this rank holds now (storage actually allocated).
  int64_t parameter_bytes() const;
  int64_t gradient_bytes() const;
  int64_t optimizer_bytes() const;

  // Checkpoints hold each parameter and both moments as slices of the global tensors, the
  // same for every stage and dp size: these tensors are full local pieces (moments gathered
  // over dp, zero 3 parameters too), written by rank 0 of the data-parallel group. Collective
  // over the data-parallel groups. `for_load`: buffers to fill, not gathered. Call
  // checkpoint_done afterwards (loaded: copies the own shards out of the filled buffers).
  std::vector<ShardedTensor> checkpoint_tensors(bool for_load);
  void checkpoint_done(bool loaded);

  // BackwardListener
  void last_backward_begins(int chunk) override;
  void gradients_complete(int chunk) override;

 private:
  struct Bucket;
  struct Segment;
  class ChunkHooks;
  friend class ChunkHooks;

  void unit_backward_done(int chunk, int64_t unit);
  void launch_reduction(Bucket& bucket);
  // Tests the reductions in flight: MPI advances a non-blocking collective only inside MPI
  // calls, so backward pokes it between layers to overlap it with the compute.
  void progress_reductions();
  void finish_reduction(Bucket& bucket);
  // zero 3: make a layer's parameters resident (gather; prefetch does not wait), or free them.
  void prefetch_unit(int chunk, int64_t unit);
  void require_unit(int chunk, int64_t unit);
  void release_unit(int chunk, int64_t unit);
  void release_all_units();

  Mesh& mesh_;
  int64_t zero_;
  Comm* tied_;
  std::vector<GPT*> chunks_;
  std::vector<Bucket> buckets_;
  std::vector<std::vector<std::vector<size_t>>> unit_buckets_;  // [chunk][unit] -> buckets
  std::vector<std::vector<bool>> unit_done_;                    // [chunk][unit], this step
  std::vector<bool> chunk_armed_;  // the chunk's last backward runs: layers complete as done
  bool in_backward_ = false;       // inside that backward (not yet at gradients_complete)
  int64_t buckets_overlapped_ = 0;
  std::vector<size_t> launch_order_;
  std::vector<Segment> segments_;  // the parameters' pieces inside the own shards
  std::vector<Comm*> groups_;      // the data-parallel groups, in first-use order
  std::vector<std::unique_ptr<ChunkHooks>> hooks_;
  std::unique_ptr<AdamW> optimizer_;
};

}  // namespace strata
