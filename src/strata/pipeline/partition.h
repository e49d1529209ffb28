// Stage partition: which contiguous layers each virtual pipeline stage holds. The first
// virtual stage also runs the embeddings and the last the head and loss, so their layer
// counts are balanced against those extra costs.
#pragma once
#include <cstdint>
#include <vector>

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

}  // namespace strata
