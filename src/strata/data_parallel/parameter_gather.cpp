// ZeRO-3 gathers of a unit's parameters before use, freed after; optionally quantized.
#include "strata/data_parallel/parameter_gather.h"

#include <ATen/core/grad_mode.h>

#include "strata/data_parallel/quantize.h"

namespace strata {

ParameterGather::ParameterGather(FlatBuckets& buckets, GatherCompression compression,
                                 CompressedTraffic& traffic)
    : buckets_(buckets),
      active_(buckets.zero_stage() == 3),
      compression_(compression),
      traffic_(traffic) {
  in_flight_.resize(buckets_.buckets().size());
}

void ParameterGather::prefetch(int chunk, int64_t unit) {
  if (!active_) return;
  at::NoGradGuard no_grad;
  for (size_t b : buckets_.buckets_of_unit(chunk, unit)) {
    Bucket& bucket = buckets_.buckets()[b];
    if (has_storage(bucket.params)) continue;  // resident or on its way
    allocate_storage(bucket.params);
    InFlight& flight = in_flight_[b];
    Comm& group = *bucket.group;
    // bf16 parameters already travel in bf16.
    const bool bf16 =
        compression_ == GatherCompression::bf16 && bucket.params.scalar_type() != at::kBFloat16;
    if (group.size() == 1 || !(bf16 || compression_ == GatherCompression::int8)) {
      flight.gathers.push_back(group.iall_gather(bucket.params, bucket.param_shard));
      continue;
    }
    traffic_.add_uncompressed(CommKind::AllGather,
                              bucket.params.nbytes() - bucket.param_shard.nbytes());
    traffic_.count_sent(group, [&] {
      if (bf16) {
        flight.shard_values = bucket.param_shard.to(at::kBFloat16);
        flight.values = at::empty({bucket.numel}, flight.shard_values.options());
        flight.gathers.push_back(group.iall_gather(flight.values, flight.shard_values));
        return;
      }
      const int64_t shard = bucket.shard_numel(), blocks = quant_blocks(shard);
      flight.shard_values = at::empty({shard}, at::kChar);
      flight.shard_scales = at::empty({blocks}, at::kFloat);
      quantize_int8(bucket.param_shard, flight.shard_values, flight.shard_scales);
      flight.values = at::empty({bucket.numel}, at::kChar);
      flight.scales = at::empty({blocks * group.size()}, at::kFloat);
      flight.gathers.push_back(group.iall_gather(flight.values, flight.shard_values));
      flight.gathers.push_back(group.iall_gather(flight.scales, flight.shard_scales));
    });
  }
}

void ParameterGather::wait(size_t b) {
  InFlight& flight = in_flight_[b];
  for (Work& gather : flight.gathers) gather.wait();
  flight.gathers.clear();
  if (!flight.values.defined()) return;
  at::NoGradGuard no_grad;
  Bucket& bucket = buckets_.buckets()[b];
  if (flight.scales.defined()) {  // int8: each rank's shard with its own blocks
    const int64_t shard = bucket.shard_numel(), blocks = quant_blocks(shard);
    for (int64_t r = 0; r < bucket.shards; ++r) {
      at::Tensor out = bucket.params.narrow(0, r * shard, shard);
      dequantize_int8(flight.values.narrow(0, r * shard, shard),
                      flight.scales.narrow(0, r * blocks, blocks), out);
    }
  } else {
    bucket.params.copy_(flight.values);
  }
  flight = InFlight();
}

void ParameterGather::require(int chunk, int64_t unit) {
  if (!active_) return;
  prefetch(chunk, unit);
  for (size_t b : buckets_.buckets_of_unit(chunk, unit)) wait(b);
}

void ParameterGather::release(int chunk, int64_t unit) {
  if (!active_) return;
  for (size_t b : buckets_.buckets_of_unit(chunk, unit)) {
    Bucket& bucket = buckets_.buckets()[b];
    wait(b);
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
