// Stage boundaries and the FLOP count. The balanced partition is an exhaustive dynamic
// programme over split points: n_layers and stages are small (hundreds at most), so
// O(stages * n_layers^2) is instant.
#include "strata/core/stages.h"

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

std::vector<int64_t> stage_layers(const ParallelConfig& parallel, const ModelShape& model) {
  const int64_t stages = parallel.pp * parallel.vpp;
  if (!parallel.pp_layers.empty()) {
    check_partition(parallel.pp_layers, model.n_layers, stages);
    return parallel.pp_layers;
  }
  // Balanced against the embedding (first stage) and the head and loss (last stage), costed
  // in matmul FLOPs per token.
  ModelShape one_layer = model;
  one_layer.n_layers = 1;
  one_layer.vocab_size = 0;
  const double per_layer = training_flops_per_token(one_layer);
  const double head = 6.0 * static_cast<double>(model.vocab_size) * model.d_model;
  return balanced_partition(model.n_layers, stages, per_layer, 0.0, head);
}

int64_t first_layer_of(const std::vector<int64_t>& stage_layers, int64_t virtual_stage) {
  STRATA_CHECK(virtual_stage >= 0 && virtual_stage < static_cast<int64_t>(stage_layers.size()),
               "virtual stage ", virtual_stage, " of ", stage_layers.size());
  return std::accumulate(stage_layers.begin(), stage_layers.begin() + virtual_stage, int64_t{0});
}

double training_flops_per_token(const ModelShape& model) {
  const double C = model.d_model, F = model.d_ff, L = model.n_layers;
  const double H = model.n_heads, K = model.n_kv_heads, D = model.head_dim();
  const double mlp_in = model.gated_mlp ? 2 * F : F;
  const double attention = (H + 2 * K) * D * C + C * H * D;
  const double dense_mlp = mlp_in * C + C * F;
  // A MoE layer: the router, and top_k expert FFNs per token.
  const double E = model.moe.num_experts, k = model.moe.top_k;
  const double expert_in = model.moe.gated ? 2 * F : F;
  const double moe_mlp = E * C + k * (expert_in * C + C * F);
  double matmul_params = model.vocab_size * C;  // the head
  for (int64_t layer = 0; layer < model.n_layers; ++layer) {
    matmul_params += attention + (model.is_moe_layer(layer) ? moe_mlp : dense_mlp);
  }
  return 6.0 * matmul_params + 12.0 * L * H * D * model.seq_len;
}

}  // namespace strata
