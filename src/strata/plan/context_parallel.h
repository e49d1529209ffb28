// What context parallelism costs one rank per layer and microbatch: the bytes its attention
// exchange sends (parallel.cp_comm: ring, all-gather or all-to-all, as parallel/context_parallel.h
// runs them), the part of their time the step sees, and the activations the exchange keeps.
// docs/planner.md has the formulas; cost_model.cpp adds these to each pipeline stage.
#pragma once

#include "strata/plan/cluster.h"
#include "strata/plan/layout.h"
#include "strata/plan/transformer.h"

namespace strata {

struct ContextParallelExchange {
  double forward_bytes = 0;    // sent by one rank in the forward
  double backward_bytes = 0;   // sent by one rank in the backward (input gradient)
  double recompute_bytes = 0;  // sent again when recomputation (layout.recompute) repeats it
  // Seconds the step sees: what the attention blocks of the rank do not hide.
  double forward_seconds = 0;
  double backward_seconds = 0;
  double recompute_seconds = 0;
  // Held for the backward on top of transformer.h's layer activations (all-gather: the
  // gathered keys and values of the whole sequence); under full recomputation only while the
  // layer is recomputed, in its working set.
  double activation_bytes = 0;
};

// Per rank of the tp-strided cp group, for one layer and a microbatch of layout.micro_batch
// sequences. `element_bytes` is e, the bytes of an activation element; `core_forward_seconds`
// and `core_input_grad_seconds` the rank's attention core forward and backward over its s / cp
// queries, as the cost model charges them (the blockwise kernel's causal tiles), which the
// ring's blocks split n ways. Zero at cp = 1.
ContextParallelExchange context_parallel_exchange(const TransformerSpec& spec,
                                                  const PlanLayout& layout,
                                                  const ClusterProfile& cluster,
                                                  double element_bytes, double core_forward_seconds,
                                                  double core_input_grad_seconds);

// Key/value heads of one tp rank as the attention sees them: kv_heads / tp, or the query heads
// heads / tp when tp does not divide kv_heads (they are expanded to the query heads).
int64_t kv_heads_per_tp_rank(const TransformerSpec& spec, int64_t tp);

}  // namespace strata
