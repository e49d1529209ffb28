// ZeRO stage 3's parameters: each rank keeps only its shard of a bucket's values; a layer
// unit's buckets are all-gathered just before the unit runs (forward, and again backward)
// and freed right after. The next unit in the running order is prefetched (gather started,
// not waited for) while the current one computes.
//
// compression.zero_gather (ZeRO++'s quantized weights, Wang et al. 2023): "bf16" sends the
// shards in bf16, "int8" as int8 with a float32 scale per 256 values (quantize.h); every rank,
// the own shard's too, then computes with the decoded values, so all ranks agree. The exact
// values stay in the shards the optimizer updates, and checkpoints gather them exactly.
#pragma once
#include <cstdint>
#include <vector>

#include "strata/core/config_enums.h"
#include "strata/data_parallel/buckets.h"
#include "strata/data_parallel/compressed_traffic.h"

namespace strata {

class ParameterGather {
 public:
  // Active only at ZeRO stage 3; every call is a no-op otherwise. Compressed gathers record
  // their bytes in `traffic`.
  ParameterGather(FlatBuckets& buckets, GatherCompression compression, CompressedTraffic& traffic);

  void prefetch(int chunk, int64_t unit);  // start gathering; does not wait
  void require(int chunk, int64_t unit);   // resident when it returns
  void release(int chunk, int64_t unit);   // storage freed
  void release_all();

  // Every bucket's full values: gathered from the shards, or (for_load) allocated to be
  // filled by the caller. After use, end_full_values copies the own shards out of what the
  // caller filled (loaded) and frees the buffers again.
  void begin_full_values(bool for_load);
  void end_full_values(bool loaded);

 private:
  struct InFlight {  // per bucket
    std::vector<Work> gathers;
    // Compressed gathers: the encoded own shard and everyone's, decoded into params on arrival.
    at::Tensor shard_values, shard_scales, values, scales;
  };
  void wait(size_t bucket);  // completes (and decodes) a gather in flight

  FlatBuckets& buckets_;
  bool active_;
  GatherCompression compression_;
  CompressedTraffic& traffic_;
  std::vector<InFlight> in_flight_;  // [bucket]
};

}  // namespace strata
