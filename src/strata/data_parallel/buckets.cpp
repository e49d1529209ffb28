// Building the flat buckets: which parameters share a bucket, and their views.
#include "strata/data_parallel/buckets.h"

#include <ATen/core/grad_mode.h>
#include <ATen/native/Resize.h>

#include <algorithm>
#include <map>

namespace strata {

Comm& data_parallel_group(const Parameter& parameter, Mesh& mesh) {
  return parameter.spec.split_axis == ShardAxis::Ep ? mesh.expert_dp() : mesh.dp_cp();
}

void free_storage(const at::Tensor& flat) {
  at::native::resize_bytes_cpu(flat.storage().unsafeGetStorageImpl(), 0);
}
void allocate_storage(const at::Tensor& flat) {
  at::native::resize_bytes_cpu(flat.storage().unsafeGetStorageImpl(), flat.nbytes());
}
bool has_storage(const at::Tensor& flat) { return flat.storage().nbytes() > 0; }
int64_t storage_bytes(const at::Tensor& flat) {
  return flat.defined() ? static_cast<int64_t>(flat.storage().nbytes()) : 0;
}

FlatBuckets::FlatBuckets(const std::vector<GPT*>& chunks, Mesh& mesh, int64_t zero_stage,
                         double bucket_mb, at::ScalarType grad_dtype)
    : zero_stage_(zero_stage) {
  const double bucket_bytes = bucket_mb * 1024.0 * 1024.0;
  std::vector<double> filled;  // bytes per bucket so far
  for (size_t c = 0; c < chunks.size(); ++c) {
    GPT& chunk = *chunks[c];
    unit_orders_.push_back(chunk.unit_order());
    std::map<Comm*, size_t> open;  // the bucket being filled, per group
    auto new_bucket = [&](Comm* group, bool pp_tied) {
      Bucket bucket;
      bucket.group = group;
      bucket.chunk = static_cast<int>(c);
      bucket.pp_tied = pp_tied;
      buckets_.push_back(std::move(bucket));
      filled.push_back(0);
      return buckets_.size() - 1;
    };
    auto add = [&](size_t b, Parameter& parameter, int64_t unit) {
      Bucket& bucket = buckets_[b];
      bucket.parameters.push_back(&parameter);
      bucket.offsets.push_back(bucket.numel);
      bucket.numel += parameter.value.numel();
      if (std::find(bucket.units.begin(), bucket.units.end(), unit) == bucket.units.end())
        bucket.units.push_back(unit);
      filled[b] += static_cast<double>(parameter.value.nbytes());
    };
    for (int64_t unit : unit_orders_.back().gradients_complete) {
      auto& parameters = chunk.parameters();
      for (size_t i = parameters.size(); i-- > 0;) {
        if (chunk.unit_of(i) != unit) continue;
        Parameter& parameter = parameters[i];
        Comm* group = &data_parallel_group(parameter, mesh);
        if (std::find(groups_.begin(), groups_.end(), group) == groups_.end())
          groups_.push_back(group);
        if (parameter.pp_tied) {
          add(new_bucket(group, true), parameter, unit);
          continue;
        }
        auto found = open.find(group);
        const size_t b = found != open.end() ? found->second : new_bucket(group, false);
        open[group] = b;
        add(b, parameter, unit);
        if (filled[b] >= bucket_bytes) open.erase(group);
      }
      if (zero_stage_ == 3) open.clear();  // stage 3 gathers unit by unit: one per bucket
    }
  }

  // Flat buffers, parameter views, shards.
  at::NoGradGuard no_grad;
  unit_buckets_.resize(chunks.size());
  for (size_t c = 0; c < chunks.size(); ++c) unit_buckets_[c].resize(chunks[c]->num_units());
  for (size_t b = 0; b < buckets_.size(); ++b) {
    Bucket& bucket = buckets_[b];
    for (int64_t unit : bucket.units) unit_buckets_[bucket.chunk][unit].push_back(b);
    bucket.shards = zero_stage_ >= 1 ? bucket.group->size() : 1;
    bucket.shard_index = zero_stage_ >= 1 ? bucket.group->rank() : 0;
    bucket.numel = (bucket.numel + bucket.shards - 1) / bucket.shards * bucket.shards;
    const at::TensorOptions options = bucket.parameters.front()->value.options();
    bucket.params = at::zeros({bucket.numel}, options.requires_grad(false));
    bucket.grads = at::zeros({bucket.numel}, options.dtype(grad_dtype).requires_grad(false));
    for (size_t i = 0; i < bucket.parameters.size(); ++i) {
      Parameter& parameter = *bucket.parameters[i];
      const int64_t n = parameter.value.numel();
      const auto shape = parameter.value.sizes().vec();
      bucket.params.narrow(0, bucket.offsets[i], n).copy_(parameter.value.reshape(-1));
      // A fresh leaf sharing the bucket's storage (variable_data: its own version counter).
      parameter.value = bucket.params.narrow(0, bucket.offsets[i], n).view(shape).variable_data();
      parameter.value.set_requires_grad(true);
      parameter.value.mutable_grad() = bucket.grads.narrow(0, bucket.offsets[i], n).view(shape);
    }
    const int64_t start = bucket.shard_start(), length = bucket.shard_numel();
    bucket.param_shard = zero_stage_ == 3 ? bucket.params.narrow(0, start, length).clone()
                                          : bucket.params.narrow(0, start, length);
    bucket.grad_shard = zero_stage_ >= 2 ? at::zeros({length}, bucket.grads.options())
                                         : bucket.grads.narrow(0, start, length);
    if (zero_stage_ >= 2) free_storage(bucket.grads);
    if (zero_stage_ == 3) free_storage(bucket.params);
    for (size_t i = 0; i < bucket.parameters.size(); ++i) {
      const int64_t begin = std::max(bucket.offsets[i], start);
      const int64_t end =
          std::min(bucket.offsets[i] + bucket.parameters[i]->value.numel(), start + length);
      if (begin < end) segments_.push_back({bucket.parameters[i], b, begin - start, end - begin});
    }
  }
}

int64_t FlatBuckets::parameter_bytes() const {
  int64_t bytes = 0;
  for (const Bucket& bucket : buckets_) {
    bytes += storage_bytes(bucket.params);
    if (zero_stage_ == 3) bytes += storage_bytes(bucket.param_shard);
  }
  return bytes;
}

int64_t FlatBuckets::gradient_bytes() const {
  int64_t bytes = 0;
  for (const Bucket& bucket : buckets_) {
    bytes += storage_bytes(bucket.grads);
    if (zero_stage_ >= 2) bytes += storage_bytes(bucket.grad_shard);
  }
  return bytes;
}

}  // namespace strata
