// Prometheus text format 0.0.4: one "# HELP" and "# TYPE" per metric, then its samples.
#include "strata/serve/metrics.h"

#include <sstream>

#include "strata/core/config_keys.h"
#include "strata/core/error.h"

namespace strata {
namespace {

std::string number(double value) { return config_detail::format_double(value); }

void scalar(std::ostringstream& out, const std::string& name, const char* type, const char* help,
            const std::string& value) {
  out << "# HELP " << name << " " << help << "\n# TYPE " << name << " " << type << "\n"
      << name << " " << value << "\n";
}
void scalar(std::ostringstream& out, const std::string& name, const char* type, const char* help,
            int64_t value) {
  scalar(out, name, type, help, std::to_string(value));
}

}  // namespace

Histogram::Histogram(double first, double factor, int count) {
  STRATA_CHECK(first > 0 && factor > 1 && count >= 1, "histogram bounds");
  double bound = first;
  for (int i = 0; i < count; ++i, bound *= factor) bounds_.push_back(bound);
  counts_.assign(bounds_.size() + 1, 0);
}

void Histogram::observe(double value) {
  size_t bucket = 0;
  while (bucket < bounds_.size() && value > bounds_[bucket]) ++bucket;
  ++counts_[bucket];
  sum_ += value;
  ++count_;
}

std::string Histogram::prometheus(const std::string& name, const std::string& help) const {
  std::ostringstream out;
  out << "# HELP " << name << " " << help << "\n# TYPE " << name << " histogram\n";
  int64_t cumulative = 0;
  for (size_t i = 0; i < bounds_.size(); ++i) {
    cumulative += counts_[i];
    out << name << "_bucket{le=\"" << number(bounds_[i]) << "\"} " << cumulative << "\n";
  }
  out << name << "_bucket{le=\"+Inf\"} " << count_ << "\n";
  out << name << "_sum " << number(sum_) << "\n" << name << "_count " << count_ << "\n";
  return out.str();
}

std::string ServeMetrics::prometheus() const {
  std::ostringstream out;
  out << "# HELP strata_requests_total Completion requests answered, by HTTP status.\n"
      << "# TYPE strata_requests_total counter\n";
  for (const auto& [status, count] : requests_by_status) {
    out << "strata_requests_total{status=\"" << status << "\"} " << count << "\n";
  }
  scalar(out, "strata_prompt_tokens_total", "counter", "Prompt tokens of admitted sequences.",
         prompt_tokens);
  scalar(out, "strata_generation_tokens_total", "counter", "Tokens generated.", generation_tokens);
  scalar(out, "strata_preemptions_total", "counter",
         "Sequences preempted (KV blocks freed, recomputed later).", preemptions);
  scalar(out, "strata_queue_depth", "gauge", "Sequences waiting to be admitted.", queue_depth);
  scalar(out, "strata_running_sequences", "gauge", "Sequences holding KV cache blocks.", running);
  scalar(out, "strata_kv_blocks_used", "gauge", "KV cache blocks in use.", kv_blocks_used);
  scalar(out, "strata_kv_blocks_free", "gauge", "KV cache blocks free.", kv_blocks_free);
  scalar(out, "strata_kv_tokens_stored", "gauge", "Positions cached in the used KV blocks.",
         kv_tokens_stored);
  scalar(out, "strata_kv_blocks_cached", "gauge",
         "Free KV blocks whose contents are kept for prefix caching.", kv_blocks_cached);
  scalar(out, "strata_prefix_cache_queries_total", "counter",
         "Tokens of admitted sequences looked up in the prefix cache.", prefix_cache_queries);
  scalar(out, "strata_prefix_cache_hits_total", "counter",
         "Tokens of admitted sequences found in the prefix cache.", prefix_cache_hits);
  scalar(out, "strata_prefix_cache_hit_rate", "gauge",
         "Prefix cache hits over queries (0 before any).",
         number(prefix_cache_queries > 0 ? static_cast<double>(prefix_cache_hits) /
                                               static_cast<double>(prefix_cache_queries)
                                         : 0.0));
  out << time_to_first_token.prometheus("strata_time_to_first_token_seconds",
                                        "Seconds from a request's arrival to its first token.");
  out << time_per_output_token.prometheus("strata_time_per_output_token_seconds",
                                          "Seconds between consecutive tokens of a sequence.");
  return out.str();
}

}  // namespace strata
