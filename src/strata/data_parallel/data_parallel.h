// Data parallelism with ZeRO (Rajbhandari et al. 2020, arXiv 1910.02054), attached to the
// model chunks from outside. The shared buffers and three parts, each in its own file:
//   buckets.h             the flat, sharded buffers the parameters and gradients live in
//   gradient_reduction.h  bucket reductions started during the last backward, and the sums
//                         the data-parallel average does not cover
//   parameter_gather.h    ZeRO stage 3: a unit's parameters gathered before use, freed after
//   sharded_optimizer.h   AdamW moments on the own shards, norm, clipping, the update
// DataParallel wires them to a training step: it wraps every chunk's layer units
// (GPT::wrap_units) to gather before a unit runs and to learn, through identity autograd
// nodes at the units' inputs and outputs, when backward reaches and leaves each unit; and
// it listens to the pipeline executor for the step's structure (BackwardListener).
#pragma once
#include <memory>
#include <vector>

#include "strata/ckpt/checkpoint.h"
#include "strata/core/config.h"
#include "strata/data_parallel/buckets.h"
#include "strata/data_parallel/gradient_reduction.h"
#include "strata/data_parallel/parameter_gather.h"
#include "strata/data_parallel/sharded_optimizer.h"
#include "strata/pipeline/backward_listener.h"

namespace strata {

class DataParallel final : public BackwardListener {
 public:
  // Takes over the parameters of `chunks` (their values and gradients become views of the
  // buckets) and wraps the chunks' units; pass it to the training executor as its
  // BackwardListener. tied: the ranks of the first and last virtual pipeline stage (for the
  // tied embedding), or null where one rank holds both or this rank holds neither.
  DataParallel(const std::vector<GPT*>& chunks, Mesh& mesh, const Config& config, Comm* tied);
  ~DataParallel() override;
  DataParallel(const DataParallel&) = delete;
  DataParallel& operator=(const DataParallel&) = delete;

  // One step: begin_step -> microbatches through the executor (buckets reduce as their units
  // finish the last backward) -> finish_gradients -> clip_gradients -> step.
  void begin_step(int64_t step);  // gradients zeroed (stage 2/3: allocated); step is 0-based
  void finish_gradients();        // every reduction done; tp, tied and expert sums
  // The global norm before clipping, of the gradients multiplied by `unscale` (1 / the loss
  // scale), which clipping applies in the same pass.
  double clip_gradients(double max_norm, double unscale = 1.0);
  bool gradients_overflowed();  // an inf or NaN on any rank (collective over the world)
  void step(double lr);         // AdamW on the own shards, then (stage 1/2) gather
  AdamW& optimizer() { return optimizer_.adamw(); }

  // Of this step's gradient buckets, how many started their reduction while autograd was
  // still running the last backward (the rest start when their chunk's last action ends).
  int64_t buckets() const { return static_cast<int64_t>(buckets_.buckets().size()); }
  int64_t buckets_overlapped() const { return reduction_.buckets_overlapped(); }

  // Bytes this rank holds now (storage actually allocated).
  int64_t parameter_bytes() const { return buckets_.parameter_bytes(); }
  int64_t gradient_bytes() const { return buckets_.gradient_bytes(); }
  int64_t optimizer_bytes() const { return optimizer_.state_bytes(); }
  // Since begin_step: what the compressed exchanges sent and what they stand for.
  const CompressedTraffic& compressed_traffic() const { return traffic_; }

  // Checkpoints hold each parameter and both moments as slices of the global tensors, the
  // same for every stage and dp size: these tensors are full local pieces (moments gathered
  // over dp, stage 3 parameters too), written by rank 0 of the data-parallel group. Under
  // mixed precision the parameters are the float32 master weights. Collective
  // over the data-parallel groups. `for_load`: buffers to fill, not gathered. Call
  // checkpoint_done afterwards (loaded: copies the own shards out of the filled buffers).
  std::vector<ShardedTensor> checkpoint_tensors(bool for_load);
  void checkpoint_done(bool loaded);

  // BackwardListener
  void last_backward_begins(int chunk) override;
  void backward_done(int chunk) override;
  void gradients_complete(int chunk) override;

 private:
  class ChunkWrapper;

  Mesh& mesh_;
  std::vector<GPT*> chunks_;
  CompressedTraffic traffic_;
  FlatBuckets buckets_;
  GradientReduction reduction_;
  ParameterGather gather_;
  ShardedOptimizer optimizer_;
  bool masters_;  // mixed precision: the optimizer keeps master weights
  std::vector<std::unique_ptr<ChunkWrapper>> wrappers_;
};

}  // namespace strata
