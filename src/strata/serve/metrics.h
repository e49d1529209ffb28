// What the server counts, and its Prometheus text exposition (GET /metrics).
#pragma once
#include <cstdint>
#include <map>
#include <string>
#include <vector>

namespace strata {

// Cumulative-bucket histogram in Prometheus' sense: counts[i] observations <= bounds[i], the
// last bucket (+Inf) all of them.
class Histogram {
 public:
  // Bounds first, first * factor, ..., count of them.
  Histogram(double first, double factor, int count);
  void observe(double value);
  // "# TYPE name histogram" and its _bucket, _sum and _count lines.
  std::string prometheus(const std::string& name, const std::string& help) const;

 private:
  std::vector<double> bounds_;
  std::vector<int64_t> counts_;  // per bound, not cumulative; the last entry is above them all
  double sum_ = 0;
  int64_t count_ = 0;
};

struct ServeMetrics {
  std::map<int, int64_t> requests_by_status;  // POST /v1/completions answers by HTTP status
  int64_t prompt_tokens = 0;                  // of every admitted sequence
  int64_t generation_tokens = 0;              // sampled
  int64_t preemptions = 0;
  int64_t queue_depth = 0;  // sequences waiting to be admitted (or re-admitted)
  int64_t running = 0;      // sequences holding KV blocks
  int64_t kv_blocks_used = 0, kv_blocks_free = 0;
  int64_t kv_tokens_stored = 0;  // positions cached in the used blocks (or being written)
  int64_t kv_blocks_cached = 0;  // free blocks kept for prefix caching (counted in kv_blocks_free)
  // Prefix caching: tokens of admitted sequences, and those found in cached blocks.
  int64_t prefix_cache_queries = 0, prefix_cache_hits = 0;
  // Seconds from a request's arrival to its first token; between consecutive tokens. Buckets
  // from 1 ms doubling to about 33 s.
  Histogram time_to_first_token{0.001, 2.0, 16};
  Histogram time_per_output_token{0.001, 2.0, 16};

  std::string prometheus() const;
};

}  // namespace strata
