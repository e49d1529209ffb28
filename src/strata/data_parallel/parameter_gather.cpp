// ZeRO-3 gathers of a unit's parameters before use, freed after.
#include "strata/data_parallel/parameter_gather.h"

#include <ATen/core/grad_mode.h>

namespace strata {

ParameterGather::ParameterGather(FlatBuckets& buckets)
    : buckets_(buckets), active_(buckets.zero_stage() == 3) {
  gathers_.resize(buckets_.buckets().size());
}

void ParameterGather::prefetch(int chunk, int64_t unit) {
  if (!active_) return;
  for (size_t b : buckets_.buckets_of_unit(chunk, unit)) {
    Bucket& bucket = buckets_.buckets()[b];
    if (has_storage(bucket.params)) continue;  // resident or on its way
    allocate_storage(bucket.params);
    gathers_[b] = bucket.group->iall_gather(bucket.params, bucket.param_shard);
  }
}

void ParameterGather::require(int chunk, int64_t unit) {
  if (!active_) return;
  prefetch(chunk, unit);
  for (size_t b : buckets_.buckets_of_unit(chunk, unit)) {
    if (gathers_[b].valid()) gathers_[b].wait();
    gathers_[b] = Work();
  }
}

void ParameterGather::release(int chunk, int64_t unit) {
  if (!active_) return;
  for (size_t b : buckets_.buckets_of_unit(chunk, unit)) {
    Bucket& bucket = buckets_.buckets()[b];
    if (gathers_[b].valid()) gathers_[b].wait();
    gathers_[b] = Work();
    if (has_storage(bucket.params)) free_storage(bucket.params);
  }
}

void ParameterGather::release_all() {
  for (int chunk = 0; chunk < buckets_.chunks(); ++chunk) {
    for (int64_t unit = 0; unit < buckets_.units(chunk); ++unit) release(chunk, unit);
  }
}

void ParameterGather::begin_full_values(bool for_load) {
  if (!active_) return;
  at::NoGradGuard no_grad;
  release_all();
  for (Bucket& bucket : buckets_.buckets()) {
    allocate_storage(bucket.params);
    if (!for_load) bucket.group->all_gather(bucket.params, bucket.param_shard);
  }
}

void ParameterGather::end_full_values(bool loaded) {
  if (!active_) return;
  at::NoGradGuard no_grad;
  for (Bucket& bucket : buckets_.buckets()) {
    if (loaded) {
      bucket.param_shard.copy_(bucket.params.narrow(0, bucket.shard_start(), bucket.shard_numel()));
    }
    free_storage(bucket.params);
  }
}

}  // namespace strata
