// Beside the layout rules: which contiguous layers each virtual pipeline stage holds, and the
// FLOPs a token costs. The first virtual stage also runs the embeddings and the last the head
// and loss, so their layer counts are balanced against those extra costs. Training and
// serving both build their stages from stage_layers.
#pragma once
#include <cstdint>
#include <vector>

#include "strata/core/config.h"

namespace strata {

// What a split weighs, in any one unit (FLOPs, seconds): a layer's work, the embedding's on
// the first virtual stage and the head and loss's on the last.
struct SplitCosts {
  double layer = 1;
  double embedding = 0;
  double head = 0;
};

// Splits n_layers into the placement's virtual stages (each >= 1 layer) so that the busiest
// pipeline rank, costed as the sum of its chunks, costs as little as possible. Returns the
// layer count of each virtual stage. Deterministic: ties go to the lower rank, then the
// earlier chunk. Throws UserError if there are more stages than layers.
std::vector<int64_t> balanced_split(int64_t n_layers, const StagePlacement& placement,
                                    const SplitCosts& costs);

// Checks an explicit split (parallel.pp_layers): one entry per virtual stage, each >= 1,
// summing to n_layers. Throws UserError saying what would work.
void check_partition(const std::vector<int64_t>& layers, int64_t n_layers, int64_t stages);

// The costs of the default split: matmul FLOPs per token of a layer and of the head.
SplitCosts flop_split_costs(const ModelShape& model);

// Layers of each virtual pipeline stage (pp * vpp of them): parallel.pp_layers when given
// (checked; "auto" must have been resolved into its list, plan/stage_split.h), else
// balanced_split by flop_split_costs.
std::vector<int64_t> stage_layers(const ParallelConfig& parallel, const ModelShape& model);

// The first layer of virtual stage `virtual_stage`: the layers of the stages before it.
int64_t first_layer_of(const std::vector<int64_t>& stage_layers, int64_t virtual_stage);

// Matmul FLOPs of one token's forward and backward through the whole model (6 per weight,
// plus the causal attention scores and values, 12 * layers * d_model * seq_len), counting
// only the experts a token is routed to: the MFU convention.
double training_flops_per_token(const ModelShape& model);

}  // namespace strata
