// The mixture-of-experts feed-forward layer (Shazeer et al. 2017; GShard; Switch
// Transformer): a router picks top_k of num_experts expert FFNs per token, the tokens travel
// to their experts' ep ranks by all-to-all, and the weighted expert outputs come back.
//
// Every decision is made per sequence, in token-position order, so it is the same whatever
// the layout (dp, ep, tp, pp, microbatching) and causal (generation with a cache reproduces
// training): an expert takes at most capacity = ceil(capacity_factor * top_k * seq_len / E)
// tokens of each sequence, the earliest ones; later tokens routed to a full expert are
// dropped for that expert (their residual stream passes on unchanged). The Switch
// load-balancing loss and the router z-loss are means over sequences of per-sequence values.
#pragma once
#include <ATen/ATen.h>

#include <cstdint>
#include <vector>

#include "strata/core/config.h"

namespace strata {

class Comm;

// What one MoE layer saw in one forward call (this rank's sequences; replicated over tp).
struct MoeLayerStats {
  int64_t layer = 0;                     // global layer index
  std::vector<int64_t> load;             // (E) assignments routed to each expert, before dropping
  int64_t assignments = 0;               // tokens * top_k
  int64_t dropped = 0;                   // assignments over capacity
  int64_t sequences = 0;                 // B
  double aux_loss = 0;                   // mean over the sequences of the Switch loss (unweighted)
  double z_loss = 0;                     // mean over the tokens of logsumexp(router logits)^2
  int64_t rows_sent_to_peers = 0;        // rows this rank sent to other ep ranks (forward)
  int64_t rows_received_from_peers = 0;  // rows other ep ranks sent here (forward)
};

struct MoeWeights {
  at::Tensor router;  // (E, C), replicated
  at::Tensor fc;      // (E_l, F, C) or (E_l, 2F, C) for SwiGLU (gate rows, then value rows)
  at::Tensor out;     // (E_l, C, F)
};

struct MoeOutput {
  at::Tensor y;         // (B, T, C): sum over the kept experts of weight * expert(x)
  at::Tensor aux_loss;  // scalar, mean over sequences (differentiable)
  at::Tensor z_loss;    // scalar, mean over tokens (differentiable)
  MoeLayerStats stats;
};

// x (B, T, C) whole sequences (or, with `expert_counts`, their continuation: the counts hold
// each sequence's assignments per expert so far, (B, E) int64, and are advanced).
// ep: the expert-parallel group (nullptr = all experts here); this rank holds experts
// [ep_rank * E_l, (ep_rank + 1) * E_l). Every rank of the ep group must call it together.
// cp: the context-parallel group (nullptr = none): x is this rank's tokens of each sequence
// (parallel/context_parallel.h), and the load-balancing shares and the capacity positions
// count the whole sequence's assignments (one all-gather of per-chunk counts over cp).
MoeOutput moe_forward(const at::Tensor& x, const MoeWeights& weights, const ModelConfig& config,
                      Comm* ep, at::Tensor* expert_counts = nullptr, Comm* cp = nullptr);

// Returns x unchanged; its backward also sends gradient `scale` into `loss` (a scalar). This
// is how a layer's auxiliary loss reaches the objective from inside a pipeline stage, whose
// output is an activation (Megatron-Core's MoEAuxLossAutoScaler). scale is the factor the
// language-model loss gets (1 / microbatches in training).
at::Tensor attach_auxiliary_loss(const at::Tensor& x, const at::Tensor& loss, double scale);

// Per-sequence capacity of one expert; 0 means unlimited (dropless).
int64_t moe_capacity(const ModelConfig& config);

}  // namespace strata
