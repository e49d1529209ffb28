// The p-quantile of a sample (nearest rank, p in [0, 1]; 0 for none), as the serving load
// generators report their latencies.
#pragma once
#include <algorithm>
#include <vector>

inline double percentile(std::vector<double> values, double p) {
  if (values.empty()) return 0;
  std::sort(values.begin(), values.end());
  const size_t index = std::min(values.size() - 1, static_cast<size_t>(p * values.size()));
  return values[index];
}
