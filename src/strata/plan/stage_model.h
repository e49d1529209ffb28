// The cost model's view of one pipeline rank (cost_model.h), internal to plan/: what the rank
// holds and what one microbatch costs it (stage_model.cpp builds these), and its memory
// (cost_model.cpp prices the step from both).
#pragma once
#include <cstdint>
#include <vector>

#include "strata/core/stages.h"
#include "strata/plan/cost_model.h"

namespace strata {

// One pipeline rank: what it holds and what one microbatch costs it.
struct StageModel {
  int64_t layers = 0;
  double dense_params = 0;   // replicated over dp * cp
  double expert_params = 0;  // replicated over dp * cp / ep
  double largest_layer_params = 0;
  // PowerSGD: the elements its layers' weight matrices travel as ((m + n) r where that is under
  // m n / 2, else m n) and the parameters of those matrices (the rest travels uncompressed).
  double powersgd_elements = 0, powersgd_matrix_params = 0;
  double powersgd_flops = 0;    // the two factor products per matrix and step, 4 m n r
  double activation_bytes = 0;  // one microbatch through all its layers
  double working_set = 0;       // what recomputing one layer holds on top
  double forward_compute = 0, input_compute = 0, weight_compute = 0;
  ComputeBreakdown parts;  // the three above by kind
  double forward_tp = 0, backward_tp = 0;
  double forward_cp = 0, backward_cp = 0;  // exposed cp exchange, recomputation's included
  double cp_bytes = 0;                     // what the cp exchanges send, all passes
  double forward_ep = 0, backward_ep = 0;
  double transfer = 0;             // one activation (or gradient) message to the neighbour stage
  double tied_embedding_sync = 0;  // last stage: all-reduce of the tied embedding's gradient

  double forward() const { return forward_compute + forward_tp + forward_cp + forward_ep; }
  double backward_input() const { return input_compute + backward_tp + backward_cp + backward_ep; }
  double per_microbatch() const { return forward() + backward_input() + weight_compute; }
};

// The memory of one device of a pipeline rank, and the activation sets it holds at its peak.
struct StageMemory {
  MemoryBreakdown memory;
  double inflight = 1;
};

// The rank models of a resolved, valid layout whose p * v virtual stages hold `chunk_layers`
// layers each (virtual stage c on rank c % p), one per pipeline rank.
std::vector<StageModel> stage_models(const PlanInputs& inputs, const PlanLayout& layout,
                                     const std::vector<int64_t>& chunk_layers);

// What parallel.pp_layers = "auto" balances (stage_split.h), priced for one rank of the layout:
// seconds of one microbatch's forward, input gradient and weight gradient (with the exposed
// collectives) of a layer (the mean of the model's layers), of the embedding and of the head
// and loss.
SplitCosts split_costs(const PlanInputs& inputs, const PlanLayout& layout);

}  // namespace strata
