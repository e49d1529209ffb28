// The products the ranks of a run multiply, and the kernels they take for them: rank 0 times
// the candidates on the run's shapes (kernels/product_probe.h, kept in the cache directory) and
// every rank takes rank 0's choice, so all ranks multiply alike. Training, serving and
// generation call it before their first product. bf16 runs choose their attention tiles
// (kernels/tile_gemm.h) in the same probe.
#pragma once
#include <vector>

#include "strata/core/config.h"
#include "strata/dist/comm.h"
#include "strata/kernels/product_probe.h"

namespace strata {

// What one rank of a run multiplies: its linear layers' distinct products and its attention.
struct RunProducts {
  std::vector<ProductShape> shapes;
  AttentionShape attention;  // no rows under eager attention (model.attention)
};

// A training step of `config`: the products of one rank's linear layers (its tp shard of q, k,
// v, the output projection, the MLP's or each expert's up and down projections and the head, for
// micro_batch * seq_len / cp rows): each forward x W^T, input gradient dy W and weight gradient
// dy^T x; every layer is listed, whatever stage holds it. Its attention: its tp share of the
// heads over seq_len / cp rows.
RunProducts training_products(const Config& config);

// The forwards alone, for a serving step's serve.max_batch_tokens rows (a prefill chunk), and
// the attention of such a chunk: `strata serve` and `strata generate` of one model choose alike.
RunProducts serving_products(const Config& config);

// Rank 0 of `world` probes `run` in the dtype the model computes in (or reads the probe from
// the cache), broadcasts it, and every rank installs it (ProductProbe::use). Collective over
// world; returns the probe.
ProductProbe choose_product_routes(Comm& world, const Config& config, const RunProducts& run);

}  // namespace strata
