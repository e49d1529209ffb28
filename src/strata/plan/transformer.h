// The arithmetic of a GPT decoder that the planner's cost model is built from: parameter
// counts, matrix-multiply FLOPs per layer split into forward, input gradient and weight
// gradient, and the bytes of activations a layer keeps for its backward (Korthikanti et al.
// 2022, generalised to grouped-query attention, SwiGLU, fp32 and models without dropout).
// Pure functions of the model shape: no device, no layout beyond the tensor-parallel split.
#pragma once
#include <cstdint>

#include "strata/core/config.h"
#include "strata/core/layout.h"

namespace strata {

// The model's shape (core/layout.h, in ModelConfig's words: d_model, n_heads, d_ff, ...) plus
// what only the planner's formulas read. transformer_of reads a training config's [model].
struct TransformerSpec : ModelShape {
  bool norm_bias = true;          // LayerNorm (weight and bias) rather than RMSNorm (weight)
  bool linear_biases = false;     // biases on every linear layer (Megatron's GPT; not strata's)
  bool learned_positions = true;  // a learned (seq, hidden) position table
  bool tied_embeddings = true;    // the output head reuses the token embedding
  bool dropout = false;           // dropout after attention and MLP (its masks are kept)
  // The attention core's kernel (model.attention): eager materializes the s x s scores
  // (Megatron-LM's fused softmax, what the published runs used); blockwise computes tiles with
  // an online softmax and keeps no scores (FlashAttention-2; strata's default).
  AttentionKernel attention = AttentionKernel::eager;
};

// strata's GPT as model/gpt.h builds it: no linear biases, no dropout.
TransformerSpec transformer_of(const ModelConfig& model);

// The GPT of Narayanan et al. 2021 (Megatron-LM): 4h MLP, GELU, LayerNorm, biases on every
// linear, learned positions, tied embeddings, dropout.
TransformerSpec megatron_gpt(int64_t layers, int64_t hidden, int64_t heads, int64_t vocab = 51200,
                             int64_t seq = 2048);

struct ParameterCounts {
  double dense_layer = 0;    // one layer with a dense MLP
  double moe_layer = 0;      // one MoE layer, all experts (0 for a dense model)
  double expert_params = 0;  // of moe_layer: the experts' weights (split over ep)
  double embedding = 0;      // token embedding (V x h)
  double positions = 0;      // learned position table (s x h)
  double head = 0;           // output head when not tied
  double final_norm = 0;
  double layers_total = 0;  // all layers
  double total = 0;
};
ParameterCounts parameter_counts(const TransformerSpec& spec);

// Matrix-multiply FLOPs of one microbatch of `micro_batch` sequences through one layer (or the
// head), for the whole layer (divide by tp for one rank). Counting 2 FLOPs per multiply-add:
// forward = weight matmuls + attention core (QK^T and attention x V, full s x s as computed);
// the input gradient repeats the weight matmuls and twice the attention core (both operands
// of QK^T and attention x V are activations); the weight gradient repeats the weight matmuls.
struct PassFlops {
  double forward = 0;
  double input_grad = 0;
  double weight_grad = 0;
  // Forward work that selective recomputation repeats in the backward: the attention core.
  double attention_core_forward = 0;

  double total() const { return forward + input_grad + weight_grad; }
};
PassFlops layer_flops(const TransformerSpec& spec, int64_t micro_batch, bool moe_layer);
PassFlops head_flops(const TransformerSpec& spec, int64_t micro_batch);  // the logits matmul

// The attention core's FLOPs as its kernel executes them, for one microbatch through one
// layer (divide by tp and cp for one rank). Eager: layer_flops' full s x s core forward and
// twice it for the input gradient. Blockwise (kernels/attention.h): only the tiles at or below
// the causal diagonal, cut into 64-row blocks where it crosses them, a fraction
// (s + 64) / (2 s) of the full core; and the backward recomputes QK^T from the saved
// log-sum-exp, 5 tile products to the forward's 2 (FlashAttention-2's count).
struct AttentionCoreFlops {
  double forward = 0;
  double input_grad = 0;
};
constexpr int64_t kBlockwiseDiagonalBlock = 64;  // rows of the diagonal's blocks
constexpr double kBlockwiseBackwardProducts = 5;
AttentionCoreFlops attention_core_flops(const TransformerSpec& spec, int64_t micro_batch);

// Recompute: core/config_enums.h (train.recompute).

// FLOPs of one training step over `sequences` sequences: model FLOPs count forward and backward
// once (the MFU convention); hardware FLOPs add what recomputation repeats.
double model_flops_per_step(const TransformerSpec& spec, int64_t sequences);
double hardware_flops_per_step(const TransformerSpec& spec, int64_t sequences, Recompute recompute,
                               int64_t cp = 1);

struct ActivationOptions {
  int64_t tp = 1;
  int64_t cp = 1;  // context parallel: each rank keeps s / cp of the tokens
  bool sequence_parallel = false;
  Recompute recompute = Recompute::none;
  int64_t element_bytes = 2;  // 2 for 16-bit activations, 4 for fp32
};

// Bytes of activations one layer keeps between its forward and backward for one microbatch,
// on one tensor-parallel rank. With 16-bit activations and dropout on a plain GPT this is
// exactly Korthikanti et al.'s s*b*h*(34 + 5*a*s/h) and its tensor/sequence-parallel and
// recompute variants. Items (e = element bytes, d = 1 byte of dropout mask if dropout):
//   kept whole under tp, split by t with sequence parallelism:
//     both norm inputs and both matmul inputs after them 4e*sbh, two dropout masks 2d*sbh
//   split by t: Q e*sbh, K and V 2e*sb*kv_width, the out-projection input e*sbh,
//     MLP: up-projection output and activation output 2e*sb*ffn (SwiGLU: 4e*sb*ffn)
//   attention core, split by t, dropped by selective recompute where it recomputes the core
//   (selective_recomputes_attention):
//     eager: softmax output e*a*s*s*b, with dropout also its mask d and output e per element;
//     blockwise: one float32 log-sum-exp per row and head, 4*a*sb (its output is the
//     out-projection's input), and with cp > 1 the pieces' own copy of the output e*sbh
// Full recomputation keeps only the layer input e*sbh (split by t with sequence parallelism).
// MoE layers keep top_k * capacity-factor copies of the MLP items of their expert width.
double layer_activation_bytes(const TransformerSpec& spec, int64_t micro_batch, bool moe_layer,
                              const ActivationOptions& options);

// The attention-core part of the above (what selective recomputation drops where it repeats the
// core).
double attention_core_activation_bytes(const TransformerSpec& spec, int64_t micro_batch,
                                       const ActivationOptions& options);

// Expert computations per token of the batch: top_k, the factor by which MoE multiplies the
// MLP's work. strata's experts run only the tokens routed to them (no padding to capacity; a
// capacity factor only drops tokens), so the capacity factor does not raise it.
double expert_token_factor(const ModelShape::Moe& moe);

}  // namespace strata
