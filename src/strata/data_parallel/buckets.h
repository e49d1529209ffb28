// Flat buckets: the memory layout data parallelism keeps a rank's parameters and gradients
// in, shared by the gradient reduction, the ZeRO-3 gathers and the sharded optimizer.
//
// A bucket is a run of layer units (GPT::unit_order) of one model chunk whose parameters
// share a data-parallel group, about parallel.bucket_mb large (ZeRO stage 3: exactly one
// unit), laid out in the order backward completes their gradients. Its buffers are flat,
// padded to a multiple of the group size n; rank r owns elements [r*S, (r+1)*S) with
// S = padded size / n (ZeRO stage 0: the whole bucket, S = size).
//
//   ZeRO stage  parameters                  gradients                     AdamW moments
//   0           full                        full, all-reduced (average)   full
//   1           full, all-gathered after    full, reduce-scattered        own shard
//               the update
//   2           full, all-gathered after    own shard (full only from the own shard
//               the update                  step's start to its reduction)
//   3           own shard; a unit gathered  as 2                          own shard
//               before its forward and its
//               backward, freed after
//
// Parameter values are in the compute dtype (train.precision); gradients, their shards and the
// optimizer's state in the master dtype (core/precision.h): under bf16 and fp16 autograd adds
// each microbatch's low-precision gradient into the float32 .grad, so accumulation over
// microbatches and the reduction's sums are float32.
//
// Parameter values and .grad are views into the flat buffers; freeing resizes a buffer's
// storage to 0 bytes, so the views (and autograd's saved references to them) stay valid and
// see the data again once it is written back.
#pragma once
#include <ATen/ATen.h>

#include <cstdint>
#include <vector>

#include "strata/dist/mesh.h"
#include "strata/model/gpt.h"

namespace strata {

// The group a parameter's gradient is averaged over and its training state sharded over:
// expert weights (split over ep) over expert_dp, every other parameter over dp x cp (the cp
// ranks hold the same parameters and see different tokens).
Comm& data_parallel_group(const Parameter& parameter, Mesh& mesh);

// A flat buffer's storage comes and goes; tensors viewing it keep their sizes throughout.
void free_storage(const at::Tensor& flat);
void allocate_storage(const at::Tensor& flat);  // contents undefined until written
bool has_storage(const at::Tensor& flat);
int64_t storage_bytes(const at::Tensor& flat);  // 0 for an undefined tensor

struct Bucket {
  Comm* group = nullptr;  // the parameters' data-parallel group
  int chunk = 0;
  bool pp_tied = false;  // holds the tied embedding alone (shards line up on both stages)
  std::vector<Parameter*> parameters;
  std::vector<int64_t> offsets;  // of each parameter in the flat buffers
  std::vector<int64_t> units;    // the chunk's layer units with parameters here
  int64_t numel = 0;             // padded to a multiple of shards
  int64_t shards = 1, shard_index = 0;
  int64_t shard_numel() const { return numel / shards; }
  int64_t shard_start() const { return shard_index * shard_numel(); }

  at::Tensor params;       // (numel) the parameter values view it (stage 3: only while gathered)
  at::Tensor param_shard;  // (shard_numel) stage 3: its own storage; else a view of params
  at::Tensor grads;        // (numel) the parameters' .grad view it (stage 2/3: only in a step),
                           // in the gradient dtype
  at::Tensor grad_shard;   // (shard_numel) stage 2/3: its own storage; else a view of grads
};

// One parameter's piece inside its bucket's own shard.
struct Segment {
  Parameter* parameter;
  size_t bucket;
  int64_t start, length;  // in the shard
};

class FlatBuckets {
 public:
  // Takes over the parameters of `chunks`: their values and gradients become views of the
  // buckets' buffers (the values keep their contents and dtype; gradients are grad_dtype).
  FlatBuckets(const std::vector<GPT*>& chunks, Mesh& mesh, int64_t zero_stage, double bucket_mb,
              at::ScalarType grad_dtype);

  int64_t zero_stage() const { return zero_stage_; }
  std::vector<Bucket>& buckets() { return buckets_; }
  const std::vector<Bucket>& buckets() const { return buckets_; }
  const std::vector<Segment>& segments() const { return segments_; }
  // The buckets holding parameters of a chunk's unit.
  const std::vector<size_t>& buckets_of_unit(int chunk, int64_t unit) const {
    return unit_buckets_[chunk][unit];
  }
  int64_t units(int chunk) const { return static_cast<int64_t>(unit_buckets_[chunk].size()); }
  int chunks() const { return static_cast<int>(unit_buckets_.size()); }
  const std::vector<UnitOrder>& unit_orders() const { return unit_orders_; }
  // The data-parallel groups, in first-use order.
  const std::vector<Comm*>& groups() const { return groups_; }

  // Bytes this rank holds now (storage actually allocated).
  int64_t parameter_bytes() const;
  int64_t gradient_bytes() const;

 private:
  int64_t zero_stage_;
  std::vector<Bucket> buckets_;
  std::vector<Segment> segments_;
  std::vector<std::vector<std::vector<size_t>>> unit_buckets_;  // [chunk][unit] -> buckets
  std::vector<UnitOrder> unit_orders_;                          // [chunk]
  std::vector<Comm*> groups_;
};

}  // namespace strata
