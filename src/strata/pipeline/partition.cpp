// Balanced stage partition by exhaustive dynamic programming over split points: n_layers and
// stages are small (hundreds at most), so O(stages * n_layers^2) is instant.
#include "strata/pipeline/partition.h"

#include <algorithm>
#include <limits>
#include <numeric>

#include "strata/core/error.h"

namespace strata {

std::vector<int64_t> balanced_partition(int64_t n_layers, int64_t stages, double layer_cost,
                                        double first_extra, double last_extra) {
  STRATA_REQUIRE(stages >= 1 && stages <= n_layers, "cannot split model.n_layers (", n_layers,
                 ") into ", stages,
                 " pipeline stages: each stage needs at least one layer; use "
                 "parallel.pp * parallel.vpp <= ",
                 n_layers);
  const double infinity = std::numeric_limits<double>::infinity();
  auto cost = [&](int64_t stage, int64_t layers) {
    double c = layers * layer_cost;
    if (stage == 0) c += first_extra;
    if (stage == stages - 1) c += last_extra;
    return c;
  };
  // best[s][l]: when stages 0..s-1 hold l layers, the smallest possible maximum stage cost,
  // and among those the smallest sum of squared stage costs (the most even split).
  using Score = std::pair<double, double>;
  std::vector<std::vector<Score>> best(stages + 1,
                                       std::vector<Score>(n_layers + 1, {infinity, infinity}));
  std::vector<std::vector<int64_t>> choice(stages + 1, std::vector<int64_t>(n_layers + 1, 0));
  best[0][0] = {0, 0};
  for (int64_t s = 1; s <= stages; ++s) {
    for (int64_t l = s; l <= n_layers - (stages - s); ++l) {
      // Fewest layers for the later stage first: on ties, earlier stages get more.
      for (int64_t take = 1; take <= l - (s - 1); ++take) {
        const double c = cost(s - 1, take);
        const Score& before = best[s - 1][l - take];
        const Score value{std::max(before.first, c), before.second + c * c};
        if (value < best[s][l]) {
          best[s][l] = value;
          choice[s][l] = take;
        }
      }
    }
  }
  std::vector<int64_t> layers(stages);
  for (int64_t s = stages, l = n_layers; s >= 1; l -= layers[s - 1], --s)
    layers[s - 1] = choice[s][l];
  return layers;
}

void check_partition(const std::vector<int64_t>& layers, int64_t n_layers, int64_t stages) {
  STRATA_REQUIRE(static_cast<int64_t>(layers.size()) == stages, "parallel.pp_layers has ",
                 layers.size(), " entries but the model has ", stages,
                 " pipeline stages (parallel.pp * parallel.vpp): give one layer count per stage");
  for (size_t i = 0; i < layers.size(); ++i) {
    STRATA_REQUIRE(layers[i] >= 1, "parallel.pp_layers[", i, "] = ", layers[i],
                   ": every stage needs at least one layer");
  }
  const int64_t total = std::accumulate(layers.begin(), layers.end(), int64_t{0});
  STRATA_REQUIRE(total == n_layers, "parallel.pp_layers sums to ", total,
                 " layers but model.n_layers is ", n_layers);
}

}  // namespace strata
