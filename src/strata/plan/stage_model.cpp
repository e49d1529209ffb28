// The rank models of the cost model (stage_model.h): per pipeline rank, the parameters,
// activations and per-microbatch times of the layers it holds, its share of the embedding and
// the head, and its activation message to the next rank. docs/planner.md states every term.
#include "strata/plan/stage_model.h"

#include <algorithm>
#include <cmath>

#include "strata/plan/collectives.h"
#include "strata/plan/context_parallel.h"

namespace strata {
namespace {

// Elementwise passes over the data (a read and a write each unless noted), by the rate they
// run at: plain data movement at memory_bandwidth_gbs (M), kernels with arithmetic at
// elementwise_gbs (E; the same on GPUs, slower on CPUs).
constexpr double kResidualAddPasses = 6;     // M: 2 residual adds, 2 reads + 1 write each
constexpr double kNormPasses = 4;            // E: 2 norms
constexpr double kScoreScaleMaskPasses = 4;  // M: scale and causal mask of a*s*s scores
constexpr double kSoftmaxPasses = 2;         // E: softmax of the scores
constexpr double kDropoutPasses = 3;         // M: mask generation and apply, per dropout site
constexpr double kHeadCopyPasses = 2;        // M: q, k, v made contiguous per head; the merge
constexpr double kRopePasses = 8;            // M: rotate q and k: two products, a sum, a concat
constexpr double kGeluPasses = 2;            // E
constexpr double kSwigluPasses = 5;          // E: silu (read+write), the product (2 reads+write)
constexpr double kFinalNormPasses = 2;       // E
constexpr double kEmbeddingPasses = 3;       // M: lookup, position add
constexpr double kCrossEntropyForwardPasses = 8;   // E: max, shift, exp, sum, pick the target...
constexpr double kCrossEntropyBackwardPasses = 4;  // E: softmax minus one-hot, scaled
constexpr double kBackwardElementwiseFactor = 2;  // a backward op reads input and grad, writes grad
constexpr double kGradAccumulatePasses = 3;       // M: .grad += dW, two reads and one write

// Kernels of one layer and microbatch, each charged device.kernel_overhead_us. Forward: 2 norms,
// the 4 weight multiplies (q/k/v, out projection, MLP up and down), the attention core's 2
// batched multiplies and its fused scale-mask-softmax, 2 bias-dropout-residual adds, the
// activation function, and the copies that split and merge heads. The input gradient runs the
// backward of each (the core's multiplies twice over), the weight gradient one multiply per
// weight; selective recomputation repeats the core's 3.
constexpr double kLayerKernelsForward = 14;
constexpr double kLayerKernelsInputGrad = 20;
constexpr double kLayerKernelsWeightGrad = 4;
// Of those, the attention core's, forward and input gradient: eager 3 and 5 (its multiplies
// and softmax), blockwise 1 and 2 (one fused kernel; the backward's row sums of dO * O first).
struct CoreKernels {
  double forward, input_grad;
};
CoreKernels attention_core_kernels(AttentionKernel kernel) {
  return kernel == AttentionKernel::eager ? CoreKernels{3, 5} : CoreKernels{1, 2};
}

// What every layer of a layout shares on one rank: its sizes and the rates it runs at.
struct RankTerms {
  StateBytesPerParameter bytes_per;
  double element_bytes = 0;          // of an activation element
  double tp = 1, cp = 1, split = 1;  // split = tp * cp: the ways a layer's matrix work divides
  double tokens = 0;                 // b * s / cp, the tokens a rank computes
  double replicated_tokens = 0;      // tokens, or tokens / tp under sequence parallelism
  double hidden = 0;                 // d_model
  double vocab_per_rank = 0;
  double peak_flops = 0;        // per second
  double attention_rate = 0;    // FLOP/s of the attention core's kernel
  double kernel_seconds = 0;    // the fixed cost of one kernel
  double memory_rate = 0;       // bytes per second of plain data movement
  double elementwise_rate = 0;  // bytes per second of elementwise kernels with arithmetic
  ActivationOptions activation, no_recompute;
};

RankTerms rank_terms(const PlanInputs& inputs, const PlanLayout& layout) {
  const TransformerSpec& spec = inputs.model;
  const DeviceProfile& device = inputs.cluster.device;
  RankTerms terms;
  terms.bytes_per = state_bytes_per_parameter(inputs.precision);
  terms.element_bytes = terms.bytes_per.activation_element;
  terms.tp = static_cast<double>(layout.tp);
  terms.cp = static_cast<double>(layout.cp);
  terms.split = terms.tp * terms.cp;
  terms.tokens = static_cast<double>(layout.micro_batch * spec.seq_len) / terms.cp;
  terms.replicated_tokens = layout.sequence_parallel ? terms.tokens / terms.tp : terms.tokens;
  terms.hidden = static_cast<double>(spec.d_model);
  terms.vocab_per_rank = std::ceil(static_cast<double>(spec.vocab_size) / terms.tp);
  terms.peak_flops = device.peak_tflops * 1e12;
  terms.attention_rate = terms.peak_flops * (spec.attention == AttentionKernel::eager
                                                 ? device.attention_matmul_efficiency()
                                                 : device.blockwise_attention_rate());
  terms.kernel_seconds = device.kernel_overhead_us * 1e-6;
  terms.memory_rate = device.memory_bandwidth_gbs * 1e9;
  terms.elementwise_rate = device.elementwise_rate_gbs() * 1e9;
  terms.activation.tp = layout.tp;
  terms.activation.cp = layout.cp;
  terms.activation.sequence_parallel = layout.sequence_parallel;
  terms.activation.recompute = layout.recompute;
  terms.activation.element_bytes = static_cast<int64_t>(terms.element_bytes);
  terms.no_recompute = terms.activation;
  terms.no_recompute.recompute = Recompute::none;
  return terms;
}

// Collectives of one layer for one microbatch: the tp all-reduce (or all-gather +
// reduce-scatter) of the b*s*h activations and the expert dispatch (or combine) all-to-all.
struct LayerCollectives {
  GroupSpan tp_group;
  double tp_all_gather = 0, tp_reduce_scatter = 0;
  double tp_block = 0;  // around each block: all-reduce, or all-gather + reduce-scatter under sp
  double ep_all_to_all = 0;
};

LayerCollectives layer_collectives(const PlanInputs& inputs, const PlanLayout& layout,
                                   const RankTerms& terms) {
  const NetworkProfile& network = inputs.cluster.network;
  const int64_t devices_per_node = inputs.cluster.devices_per_node;
  const double hidden_bytes = terms.element_bytes * terms.tokens * terms.hidden;
  LayerCollectives collectives;
  collectives.tp_group = group_span(1, layout.tp, devices_per_node);
  collectives.tp_all_gather = all_gather_seconds(network, collectives.tp_group, hidden_bytes);
  collectives.tp_reduce_scatter =
      reduce_scatter_seconds(network, collectives.tp_group, hidden_bytes);
  collectives.tp_block = layout.sequence_parallel
                             ? collectives.tp_all_gather + collectives.tp_reduce_scatter
                             : all_reduce_seconds(network, collectives.tp_group, hidden_bytes);
  const GroupSpan ep_group = group_span(layout.tp, layout.ep, devices_per_node);
  const double expert_tokens = terms.replicated_tokens * expert_token_factor(inputs.model.moe);
  collectives.ep_all_to_all =
      all_to_all_seconds(network, ep_group, terms.element_bytes * expert_tokens * terms.hidden);
  return collectives;
}

// The attention core as its kernel executes it (transformer.h, attention_core_flops), the same
// in every layer, at its own rate; the cp exchange of K and V (context_parallel.h) hides behind
// it as far as it can.
struct AttentionCore {
  double forward = 0, input_grad = 0;  // seconds
  CoreKernels kernels{};
  // The layer's kernels with this core in place of the eager one.
  double layer_forward_kernels = 0, layer_input_grad_kernels = 0;
  ContextParallelExchange cp_exchange;
};

AttentionCore attention_core(const PlanInputs& inputs, const PlanLayout& layout,
                             const RankTerms& terms) {
  const TransformerSpec& spec = inputs.model;
  const AttentionCoreFlops flops = attention_core_flops(spec, layout.micro_batch);
  AttentionCore core;
  core.forward = flops.forward / terms.split / terms.attention_rate;
  core.input_grad = flops.input_grad / terms.split / terms.attention_rate;
  core.kernels = attention_core_kernels(spec.attention);
  const CoreKernels eager_kernels = attention_core_kernels(AttentionKernel::eager);
  core.layer_forward_kernels = kLayerKernelsForward - eager_kernels.forward + core.kernels.forward;
  core.layer_input_grad_kernels =
      kLayerKernelsInputGrad - eager_kernels.input_grad + core.kernels.input_grad;
  core.cp_exchange = context_parallel_exchange(spec, layout, inputs.cluster, terms.element_bytes,
                                               core.forward, core.input_grad);
  return core;
}

// Seconds of one layer's elementwise forward for one microbatch on one rank, and of its
// attention-score part (what selective recomputation repeats).
struct ElementwiseSeconds {
  double layer = 0, scores = 0;
};
ElementwiseSeconds layer_elementwise_forward(const TransformerSpec& spec, const PlanLayout& layout,
                                             const RankTerms& terms, bool moe_layer) {
  const double element = terms.element_bytes, hidden = terms.hidden, tp = terms.tp;
  const double tokens = terms.tokens, replicated_tokens = terms.replicated_tokens;
  const double kv_width = static_cast<double>(spec.kv_width());
  const double seq = static_cast<double>(spec.seq_len);
  // The eager kernel's scores pass through memory; the blockwise kernel's tiles stay in cache
  // (in SRAM on a GPU), their softmax priced in its rate (blockwise_attention_efficiency).
  const double scores = spec.attention == AttentionKernel::eager
                            ? static_cast<double>(spec.n_heads) / tp * seq * (seq / terms.cp) *
                                  static_cast<double>(layout.micro_batch)
                            : 0.0;
  // Bytes through plain data movement (at the memory rate) and through kernels with arithmetic
  // (at the elementwise rate).
  double moved = kResidualAddPasses * element * replicated_tokens * hidden;
  const double q_width = static_cast<double>(spec.q_width());
  moved += kHeadCopyPasses * element * tokens * (2 * q_width + 2 * kv_width) / tp;
  if (spec.dropout) moved += 2 * kDropoutPasses * element * replicated_tokens * hidden;
  if (!spec.learned_positions) moved += kRopePasses * element * tokens * (q_width + kv_width) / tp;
  double computed = kNormPasses * element * replicated_tokens * hidden;
  const double width =
      moe_layer ? static_cast<double>(spec.expert_width()) : static_cast<double>(spec.d_ff);
  const double mlp_tokens = moe_layer ? tokens * expert_token_factor(spec.moe) : tokens;
  computed +=
      (spec.mlp_gated(moe_layer) ? kSwigluPasses : kGeluPasses) * element * mlp_tokens * width / tp;
  ElementwiseSeconds seconds;
  seconds.scores = (kScoreScaleMaskPasses + (spec.dropout ? kDropoutPasses : 0)) * element *
                       scores / terms.memory_rate +
                   kSoftmaxPasses * element * scores / terms.elementwise_rate;
  seconds.layer = moved / terms.memory_rate + computed / terms.elementwise_rate + seconds.scores;
  return seconds;
}

// One layer's weight multiplies on a rank (q/k/v, out projection, MLP up, MLP down): the rows
// (tokens) each multiplies, its in and out widths (the split one divided by tp), and how many
// such matrices the rank holds. An expert layer's rank holds experts / ep of them, each
// multiplying the tokens the ep group routes to it: b s / cp x top_k x ep / experts in
// expectation.
struct WeightMultiply {
  double rows, in, out, count;
  double flops() const { return 2 * rows * in * out * count; }
};
std::vector<WeightMultiply> layer_weight_multiplies(const TransformerSpec& spec,
                                                    const PlanLayout& layout, bool moe_layer) {
  const double tp = static_cast<double>(layout.tp);
  const double hidden = static_cast<double>(spec.d_model);
  const double kv_width = static_cast<double>(spec.kv_width());
  const double tokens =
      static_cast<double>(layout.micro_batch * spec.seq_len) / static_cast<double>(layout.cp);
  const double width =
      moe_layer ? static_cast<double>(spec.expert_width()) : static_cast<double>(spec.d_ff);
  const double up = spec.mlp_gated(moe_layer) ? 2 * width : width;
  double experts = 1, mlp_rows = tokens;
  if (moe_layer) {
    const double ep = static_cast<double>(layout.ep);
    experts = static_cast<double>(spec.moe.num_experts) / ep;
    mlp_rows = tokens * expert_token_factor(spec.moe) / experts;
  }
  const double q_width = static_cast<double>(spec.q_width());
  return {{tokens, hidden, (q_width + 2 * kv_width) / tp, 1.0},
          {tokens, q_width / tp, hidden, 1.0},
          {mlp_rows, hidden, up / tp, experts},
          {mlp_rows, width / tp, hidden, experts}};
}

// The fraction of peak one layer's weight multiplies reach on a rank: each at the shape
// efficiency of its smallest side (its rows, in or out width), weighted by its FLOPs.
double layer_matmul_efficiency(const TransformerSpec& spec, const PlanLayout& layout,
                               bool moe_layer, const DeviceProfile& device) {
  double flops = 0, at_peak = 0;
  for (const WeightMultiply& multiply : layer_weight_multiplies(spec, layout, moe_layer)) {
    flops += multiply.flops();
    at_peak += multiply.flops() /
               device.matmul_shape_efficiency(std::min({multiply.rows, multiply.in, multiply.out}));
  }
  return flops / at_peak;
}

// Everything the per-layer steps below read.
struct LayerContext {
  const TransformerSpec& spec;
  const PlanLayout& layout;
  const DeviceProfile& device;
  const RankTerms& terms;
  const LayerCollectives& collectives;
  const AttentionCore& core;

  // Selective recomputation that repeats the attention core (not under the blockwise kernel
  // without cp: selective_recomputes_attention).
  bool recomputes_core() const {
    return layout.recompute == Recompute::selective &&
           selective_recomputes_attention(spec.attention, layout.cp > 1);
  }
};

// The parameters one layer puts on a rank: replicated over dp * cp, and its experts' share
// (replicated over dp * cp / ep).
struct LayerParams {
  double dense = 0, expert = 0;
};
LayerParams layer_params(const LayerContext& context, const ParameterCounts& counts,
                         bool moe_layer) {
  const double tp = context.terms.tp;
  LayerParams params;
  params.dense = (moe_layer ? counts.moe_layer - counts.expert_params : counts.dense_layer) / tp;
  params.expert =
      moe_layer ? counts.expert_params / (tp * static_cast<double>(context.layout.ep)) : 0.0;
  return params;
}

// PowerSGD's factors of the layer's weight matrices (where they are smaller than the matrix).
void add_powersgd_matrices(StageModel& stage, const LayerContext& context, bool moe_layer) {
  const double rank = static_cast<double>(context.layout.powersgd_rank);
  for (const WeightMultiply& matrix :
       layer_weight_multiplies(context.spec, context.layout, moe_layer)) {
    const double elements = matrix.in * matrix.out;
    const bool pays = (matrix.in + matrix.out) * rank < elements / 2;
    stage.powersgd_matrix_params += matrix.count * elements;
    stage.powersgd_elements += matrix.count * (pays ? (matrix.in + matrix.out) * rank : elements);
    if (pays) stage.powersgd_flops += matrix.count * 4 * elements * rank;
  }
}

// The layer's parameters and activations on the rank, and what recomputing it holds.
void add_layer_memory(StageModel& stage, const LayerContext& context, const LayerParams& params,
                      bool moe_layer) {
  const PlanLayout& layout = context.layout;
  const RankTerms& terms = context.terms;
  const double cp_activations = context.core.cp_exchange.activation_bytes;
  ++stage.layers;
  stage.dense_params += params.dense;
  stage.expert_params += params.expert;
  stage.largest_layer_params = std::max(stage.largest_layer_params, params.dense + params.expert);
  if (layout.compression == GradientCompression::powersgd) {
    add_powersgd_matrices(stage, context, moe_layer);
  }
  stage.activation_bytes +=
      layer_activation_bytes(context.spec, layout.micro_batch, moe_layer, terms.activation);
  if (layout.recompute == Recompute::full) {
    stage.working_set = std::max(
        stage.working_set,
        layer_activation_bytes(context.spec, layout.micro_batch, moe_layer, terms.no_recompute) +
            cp_activations);
  } else {
    stage.activation_bytes += cp_activations;
  }
  if (context.recomputes_core()) {
    stage.working_set = std::max(
        stage.working_set,
        attention_core_activation_bytes(context.spec, layout.micro_batch, terms.activation));
  }
}

// The layer's matrix and elementwise work for one microbatch, and what recomputation repeats.
void add_layer_compute(StageModel& stage, const LayerContext& context, const LayerParams& params,
                       bool moe_layer) {
  const RankTerms& terms = context.terms;
  const AttentionCore& core = context.core;
  const PassFlops flops = layer_flops(context.spec, context.layout.micro_batch, moe_layer);
  const double matmul_rate =
      terms.peak_flops *
      layer_matmul_efficiency(context.spec, context.layout, moe_layer, context.device);
  const double kernel = terms.kernel_seconds;
  // The model's full s x s core (layer_flops) is what the weight multiplies are not.
  const double core_flops = flops.attention_core_forward;
  const double forward_matmul = (flops.forward - core_flops) / terms.split / matmul_rate +
                                core.forward + core.layer_forward_kernels * kernel;
  const double input_grad_matmul = (flops.input_grad - 2 * core_flops) / terms.split / matmul_rate +
                                   core.input_grad + core.layer_input_grad_kernels * kernel;
  const ElementwiseSeconds elementwise =
      layer_elementwise_forward(context.spec, context.layout, terms, moe_layer);
  const double forward_elementwise = elementwise.layer;
  const double accumulate = kGradAccumulatePasses * terms.bytes_per.grads *
                            (params.dense + params.expert) / terms.memory_rate;

  stage.forward_compute += forward_matmul + forward_elementwise;
  stage.input_compute += input_grad_matmul + kBackwardElementwiseFactor * forward_elementwise;
  stage.weight_compute +=
      flops.weight_grad / terms.split / matmul_rate + kLayerKernelsWeightGrad * kernel + accumulate;
  stage.parts.matmul += (flops.forward - 3 * core_flops + flops.input_grad + flops.weight_grad) /
                        terms.split / matmul_rate;
  stage.parts.attention += core.forward + core.input_grad;
  stage.parts.elementwise += (1 + kBackwardElementwiseFactor) * forward_elementwise + accumulate;
  stage.parts.kernels +=
      (core.layer_forward_kernels + core.layer_input_grad_kernels + kLayerKernelsWeightGrad) *
      kernel;
  if (context.layout.recompute == Recompute::full) {
    stage.input_compute += forward_matmul + forward_elementwise;
    stage.parts.recompute += forward_matmul + forward_elementwise;
  } else if (context.recomputes_core()) {
    const double repeated = core.forward + elementwise.scores + core.kernels.forward * kernel;
    stage.input_compute += repeated;
    stage.parts.recompute += repeated;
  }
}

// The layer's exposed collectives for one microbatch: two tp blocks each way, the cp
// exchange, two expert all-to-alls each way; full recomputation repeats the forward's.
void add_layer_communication(StageModel& stage, const LayerContext& context, bool moe_layer) {
  const LayerCollectives& collectives = context.collectives;
  const ContextParallelExchange& exchange = context.core.cp_exchange;
  stage.forward_tp += 2 * collectives.tp_block;
  stage.backward_tp += 2 * collectives.tp_block;
  stage.forward_cp += exchange.forward_seconds;
  stage.backward_cp += exchange.backward_seconds + exchange.recompute_seconds;
  stage.cp_bytes += exchange.forward_bytes + exchange.backward_bytes + exchange.recompute_bytes;
  if (moe_layer) {
    stage.forward_ep += 2 * collectives.ep_all_to_all;
    stage.backward_ep += 2 * collectives.ep_all_to_all;
  }
  if (context.layout.recompute == Recompute::full) {
    stage.backward_tp += 2 * collectives.tp_block;
    if (moe_layer) stage.backward_ep += 2 * collectives.ep_all_to_all;
  }
}

// Embedding on the first stage: vocab-parallel lookup whose partial rows are all-reduced
// (reduce-scattered under sequence parallelism), plus learned positions.
void add_embedding(StageModel& first, const LayerContext& context) {
  const TransformerSpec& spec = context.spec;
  const RankTerms& terms = context.terms;
  const LayerCollectives& collectives = context.collectives;
  const double embedding_params = terms.vocab_per_rank * terms.hidden;
  const double position_params =
      spec.learned_positions ? static_cast<double>(spec.seq_len) * terms.hidden : 0.0;
  first.dense_params += embedding_params + position_params;
  const double embedding_pass =
      kEmbeddingPasses * terms.element_bytes * terms.tokens * terms.hidden / terms.memory_rate;
  const double embedding_accumulate = kGradAccumulatePasses * terms.bytes_per.grads *
                                      (embedding_params + position_params) / terms.memory_rate;
  first.forward_compute += embedding_pass;
  first.input_compute += embedding_pass;
  first.weight_compute += embedding_accumulate;
  first.parts.elementwise += 2 * embedding_pass + embedding_accumulate;
  const bool sequence_parallel = context.layout.sequence_parallel;
  first.forward_tp += sequence_parallel ? collectives.tp_reduce_scatter : collectives.tp_block;
  if (sequence_parallel) first.backward_tp += collectives.tp_all_gather;
}

// The head's parameters on the last stage: the output layer (unless tied on one stage) and the
// final norm.
double head_params(const LayerContext& context) {
  return context.spec.tied_embeddings && context.layout.pp == 1
             ? 0.0
             : context.terms.vocab_per_rank * context.terms.hidden;
}

// Head on the last stage: final norm, (gather,) logits matmul, vocab-parallel cross-entropy,
// which keeps the logits and their softmax in at least fp32.
void add_head_compute(StageModel& last, const LayerContext& context) {
  const RankTerms& terms = context.terms;
  const double element = terms.element_bytes, tokens = terms.tokens, hidden = terms.hidden;
  const double output_params = head_params(context);
  const double final_norm_params = context.spec.norm_bias ? 2 * hidden : hidden;
  last.dense_params += output_params + final_norm_params;
  const PassFlops head = head_flops(context.spec, context.layout.micro_batch);
  const double logits = tokens * terms.vocab_per_rank;
  const double matmul_rate =
      terms.peak_flops *
      context.device.matmul_shape_efficiency(std::min({tokens, hidden, terms.vocab_per_rank}));
  const double loss_element = std::max(4.0, element);
  last.activation_bytes += element * terms.replicated_tokens * hidden + element * tokens * hidden +
                           2 * loss_element * logits;
  const double head_forward = head.forward / terms.split / matmul_rate;
  const double head_input = head.input_grad / terms.split / matmul_rate;
  const double head_weight = head.weight_grad / terms.split / matmul_rate;
  const double replicated_tokens = terms.replicated_tokens, rate = terms.elementwise_rate;
  const double head_forward_elementwise =
      kFinalNormPasses * element * replicated_tokens * hidden / rate +
      kCrossEntropyForwardPasses * loss_element * logits / rate;
  const double head_input_elementwise =
      kBackwardElementwiseFactor * kFinalNormPasses * element * replicated_tokens * hidden / rate +
      kCrossEntropyBackwardPasses * loss_element * logits / rate;
  const double head_accumulate =
      kGradAccumulatePasses * terms.bytes_per.grads * output_params / terms.memory_rate;
  last.forward_compute += head_forward + head_forward_elementwise;
  last.input_compute += head_input + head_input_elementwise;
  last.weight_compute += head_weight + head_accumulate;
  last.parts.matmul += head_forward + head_input + head_weight;
  last.parts.elementwise += head_forward_elementwise + head_input_elementwise + head_accumulate;
}

// The head's collectives: the cross-entropy's three all-reduces of one number per token, the
// gather before the logits under sequence parallelism, and the tied embedding's gradient sum.
void add_head_communication(StageModel& last, const PlanInputs& inputs,
                            const LayerContext& context) {
  const NetworkProfile& network = inputs.cluster.network;
  const PlanLayout& layout = context.layout;
  const LayerCollectives& collectives = context.collectives;
  last.forward_tp +=
      3 * all_reduce_seconds(network, collectives.tp_group, 4 * context.terms.tokens);
  last.forward_tp += layout.sequence_parallel ? collectives.tp_all_gather : 0.0;
  last.backward_tp +=
      layout.sequence_parallel ? collectives.tp_reduce_scatter : collectives.tp_block;
  const StagePlacement placement = stage_placement(layout);
  if (context.spec.tied_embeddings &&
      placement.rank_of(0) != placement.rank_of(placement.virtual_stages() - 1)) {
    // The last stage's copy of the tied embedding and the first stage's are kept equal by
    // all-reducing their gradients once per step (Megatron's embedding group); under zb-v
    // both copies are on rank 0, which adds them without communication.
    const GroupSpan end_stages = group_span(layout.tp * layout.cp * layout.dp * (layout.pp - 1), 2,
                                            inputs.cluster.devices_per_node);
    last.tied_embedding_sync = all_reduce_seconds(
        network, end_stages, context.terms.bytes_per.grads * head_params(context));
  }
}

// One activation (or gradient) message to the neighbour stage, on every stage.
void add_transfers(std::vector<StageModel>& stages, const PlanInputs& inputs,
                   const LayerContext& context) {
  const PlanLayout& layout = context.layout;
  const RankTerms& terms = context.terms;
  const GroupSpan pp_group =
      group_span(layout.tp * layout.cp * layout.dp, layout.pp, inputs.cluster.devices_per_node);
  const double message = terms.element_bytes *
                         (layout.sequence_parallel ? terms.tokens / terms.tp : terms.tokens) *
                         terms.hidden;
  for (StageModel& stage : stages) {
    stage.transfer = layout.pp > 1
                         ? p2p_seconds(inputs.cluster.network, pp_group.crosses_nodes(), message)
                         : 0.0;
  }
}

// What every rank of a layout shares: the terms, collectives and attention core the per-layer
// steps read (LayerContext points into it).
struct RankShared {
  RankTerms terms;
  LayerCollectives collectives;
  AttentionCore core;
  RankShared(const PlanInputs& inputs, const PlanLayout& layout)
      : terms(rank_terms(inputs, layout)),
        collectives(layer_collectives(inputs, layout, terms)),
        core(attention_core(inputs, layout, terms)) {}
};

}  // namespace

std::vector<StageModel> stage_models(const PlanInputs& inputs, const PlanLayout& layout,
                                     const std::vector<int64_t>& chunk_layers) {
  const TransformerSpec& spec = inputs.model;
  const RankShared shared(inputs, layout);
  const LayerContext context{
      spec, layout, inputs.cluster.device, shared.terms, shared.collectives, shared.core};
  const ParameterCounts counts = parameter_counts(spec);

  // chunk_layers has one entry per virtual stage; the placement says which rank runs it.
  const StagePlacement placement = stage_placement(layout);
  std::vector<StageModel> out(layout.pp);
  int64_t first_layer = 0;
  for (size_t chunk = 0; chunk < chunk_layers.size(); ++chunk) {
    StageModel& stage = out[placement.rank_of(static_cast<int64_t>(chunk))];
    const int64_t end_layer = first_layer + chunk_layers[chunk];
    for (int64_t layer = first_layer; layer < end_layer; ++layer) {
      const bool moe_layer = spec.is_moe_layer(layer);
      const LayerParams params = layer_params(context, counts, moe_layer);
      add_layer_memory(stage, context, params, moe_layer);
      add_layer_compute(stage, context, params, moe_layer);
      add_layer_communication(stage, context, moe_layer);
    }
    first_layer = end_layer;
  }
  const int64_t last_stage = placement.virtual_stages() - 1;
  add_embedding(out[placement.rank_of(0)], context);
  add_head_compute(out[placement.rank_of(last_stage)], context);
  add_head_communication(out[placement.rank_of(last_stage)], inputs, context);
  add_transfers(out, inputs, context);
  return out;
}

SplitCosts split_costs(const PlanInputs& inputs, const PlanLayout& layout) {
  const TransformerSpec& spec = inputs.model;
  const RankShared shared(inputs, layout);
  const LayerContext context{
      spec, layout, inputs.cluster.device, shared.terms, shared.collectives, shared.core};
  const ParameterCounts counts = parameter_counts(spec);
  // A dense layer and an MoE layer, weighted by how many of each the model has (a search
  // prices this for every candidate: one of each, not every layer).
  auto layer_seconds = [&](bool moe_layer) {
    StageModel layer;
    add_layer_compute(layer, context, layer_params(context, counts, moe_layer), moe_layer);
    add_layer_communication(layer, context, moe_layer);
    return layer.per_microbatch();
  };
  const int64_t moe_layers = spec.moe_layers();
  double layers = static_cast<double>(spec.n_layers - moe_layers) * layer_seconds(false);
  if (moe_layers > 0) layers += static_cast<double>(moe_layers) * layer_seconds(true);
  StageModel embedding, head;
  add_embedding(embedding, context);
  add_head_compute(head, context);
  add_head_communication(head, inputs, context);
  SplitCosts costs;
  costs.layer = layers / static_cast<double>(spec.n_layers);
  costs.embedding = embedding.per_microbatch();
  costs.head = head.per_microbatch();
  return costs;
}

}  // namespace strata
