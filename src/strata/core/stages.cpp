// Stage boundaries and the FLOP count. The balanced split costs every layer alike, so a
// rank's cost is its layer count times the layer's cost plus the extras of its chunks, and two
// water fillings find the exact optimum: first each rank's layer count (every rank starts with
// one layer per chunk, and each further layer goes to the rank it leaves cheapest), then the
// chunks of each rank the same way, so the chunks a schedule interleaves are even too.
#include "strata/core/stages.h"

#include <algorithm>
#include <numeric>

#include "strata/core/error.h"

namespace strata {
namespace {

// Gives `layers` beyond one per bin to the bins one at a time, each to the bin whose cost
// (layers * layer_cost + extra) it leaves lowest, ties to the first such bin. Returns the
// layers of each bin (>= 1 each). Greedy filling with equal steps minimizes the largest cost.
std::vector<int64_t> fill(int64_t layers, const std::vector<double>& extras, double layer_cost) {
  std::vector<int64_t> counts(extras.size(), 1);
  for (int64_t left = layers - static_cast<int64_t>(extras.size()); left > 0; --left) {
    size_t cheapest = 0;
    for (size_t bin = 1; bin < extras.size(); ++bin) {
      const double cost = static_cast<double>(counts[bin]) * layer_cost + extras[bin];
      const double best = static_cast<double>(counts[cheapest]) * layer_cost + extras[cheapest];
      if (cost < best) cheapest = bin;
    }
    ++counts[cheapest];
  }
  return counts;
}

}  // namespace

std::vector<int64_t> balanced_split(int64_t n_layers, const StagePlacement& placement,
                                    const SplitCosts& costs) {
  const int64_t stages = placement.virtual_stages();
  STRATA_REQUIRE(stages >= 1 && stages <= n_layers, "cannot split model.n_layers (", n_layers,
                 ") into ", stages,
                 " pipeline stages: each stage needs at least one layer; use "
                 "parallel.pp * parallel.vpp <= ",
                 n_layers);
  STRATA_CHECK(costs.layer > 0 && costs.embedding >= 0 && costs.head >= 0, "split costs: layer ",
               costs.layer, ", embedding ", costs.embedding, ", head ", costs.head);
  // The extras of each virtual stage, and of each rank (the sum of its chunks').
  std::vector<double> stage_extra(stages, 0.0);
  stage_extra.front() += costs.embedding;
  stage_extra.back() += costs.head;
  std::vector<double> rank_extra(placement.pp, 0.0);
  for (int64_t stage = 0; stage < stages; ++stage) {
    rank_extra[placement.rank_of(stage)] += stage_extra[stage];
  }
  // A rank needs a layer per chunk: fill counts its layers above vpp - 1, whose cost joins the
  // rank's extra.
  std::vector<double> shifted(placement.pp);
  for (int64_t rank = 0; rank < placement.pp; ++rank) {
    shifted[rank] = rank_extra[rank] + static_cast<double>(placement.vpp - 1) * costs.layer;
  }
  const std::vector<int64_t> rank_layers =
      fill(n_layers - placement.pp * (placement.vpp - 1), shifted, costs.layer);
  std::vector<int64_t> layers(stages);
  for (int64_t rank = 0; rank < placement.pp; ++rank) {
    std::vector<double> chunk_extra(placement.vpp);
    for (int64_t chunk = 0; chunk < placement.vpp; ++chunk) {
      chunk_extra[chunk] = stage_extra[placement.virtual_stage(rank, chunk)];
    }
    const std::vector<int64_t> chunk_layers =
        fill(rank_layers[rank] + placement.vpp - 1, chunk_extra, costs.layer);
    for (int64_t chunk = 0; chunk < placement.vpp; ++chunk) {
      layers[placement.virtual_stage(rank, chunk)] = chunk_layers[chunk];
    }
  }
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

SplitCosts flop_split_costs(const ModelShape& model) {
  ModelShape one_layer = model;
  one_layer.n_layers = 1;
  one_layer.vocab_size = 0;
  SplitCosts costs;
  costs.layer = training_flops_per_token(one_layer);
  costs.head = 6.0 * static_cast<double>(model.vocab_size) * static_cast<double>(model.d_model);
  return costs;
}

std::vector<int64_t> stage_layers(const ParallelConfig& parallel, const ModelShape& model) {
  STRATA_CHECK(!parallel.pp_layers.automatic,
               "parallel.pp_layers = \"auto\" reached the stages unresolved "
               "(resolve_pp_layers, plan/stage_split.h, runs at the start)");
  const int64_t stages = parallel.pp * parallel.vpp;
  if (!parallel.pp_layers.layers.empty()) {
    check_partition(parallel.pp_layers.layers, model.n_layers, stages);
    return parallel.pp_layers.layers;
  }
  return balanced_split(model.n_layers, stage_placement(parallel), flop_split_costs(model));
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
