// The products the ranks of a run multiply, and the kernels they take for them: rank 0 times
// the candidates on the run's shapes (kernels/product_probe.h, kept in the cache directory) and
// every rank takes rank 0's choice, so all ranks multiply alike. Training, serving and
// generation call it before their first product.
#pragma once
#include <vector>

#include "strata/core/config.h"
#include "strata/dist/comm.h"
#include "strata/kernels/product_probe.h"

namespace strata {

// The distinct products of one rank's linear layers in a training step of `config` (its tp
// shard of q, k, v, the output projection, the MLP's or each expert's up and down projections
// and the head, for micro_batch * seq_len / cp rows): each forward x W^T, input gradient dy W
// and weight gradient dy^T x. Every layer is listed, whatever stage holds it.
std::vector<ProductShape> training_products(const Config& config);

// The forwards alone, for a serving step's serve.max_batch_tokens rows (a prefill chunk):
// `strata serve` and `strata generate` of one model choose alike.
std::vector<ProductShape> serving_products(const Config& config);

// Rank 0 of `world` probes `shapes` in the dtype the model computes in (or reads the probe from
// the cache), broadcasts it, and every rank installs it (ProductProbe::use). Collective over
// world; returns the probe.
ProductProbe choose_product_routes(Comm& world, const Config& config,
                                   const std::vector<ProductShape>& shapes);

}  // namespace strata
