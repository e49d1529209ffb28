// Beside the layout rules: which contiguous layers each virtual pipeline stage holds, and the
// FLOPs a token costs. The first virtual stage also runs the embeddings and the last the head
// and loss, so their layer counts are balanced against those extra costs. Training and
// serving both build their stages from stage_layers.
#pragma once
#include <cstdint>
#include <vector>

#include "strata/core/config.h"

namespace strata {

// Splits n_layers into `stages` contiguous groups (each >= 1 layer) minimizing the largest
// stage cost, where a stage costs layer_cost per layer plus first_extra (stage 0) or
// last_extra (the last stage). Returns the layer count of each stage. Ties prefer giving
// layers to earlier stages. Throws UserError if stages > n_layers.
std::vector<int64_t> balanced_partition(int64_t n_layers, int64_t stages, double layer_cost,
                                        double first_extra, double last_extra);

// Checks an explicit split (parallel.pp_layers): one entry per virtual stage, each >= 1,
// summing to n_layers. Throws UserError saying what would work.
void check_partition(const std::vector<int64_t>& layers, int64_t n_layers, int64_t stages);

// Layers of each virtual pipeline stage (pp * vpp of them): parallel.pp_layers when given
// (checked), else balanced_partition by matmul FLOPs per token.
std::vector<int64_t> stage_layers(const ParallelConfig& parallel, const ModelShape& model);

// The first layer of virtual stage `virtual_stage`: the layers of the stages before it.
int64_t first_layer_of(const std::vector<int64_t>& stage_layers, int64_t virtual_stage);

// Matmul FLOPs of one token's forward and backward through the whole model (6 per weight,
// plus the causal attention scores and values, 12 * layers * d_model * seq_len), counting
// only the experts a token is routed to: the MFU convention.
double training_flops_per_token(const ModelShape& model);

}  // namespace strata
