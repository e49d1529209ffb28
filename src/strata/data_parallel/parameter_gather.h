// ZeRO stage 3's parameters: each rank keeps only its shard of a bucket's values; a layer
// unit's buckets are all-gathered just before the unit runs (forward, and again backward)
// and freed right after. The next unit in the running order is prefetched (gather started,
// not waited for) while the current one computes.
#pragma once
#include <cstdint>
#include <vector>

#include "strata/data_parallel/buckets.h"

namespace strata {

class ParameterGather {
 public:
  // Active only at ZeRO stage 3; every call is a no-op otherwise.
  explicit ParameterGather(FlatBuckets& buckets);

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
  FlatBuckets& buckets_;
  bool active_;
  std::vector<Work> gathers_;  // [bucket] in flight
};

}  // namespace strata
