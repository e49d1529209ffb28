// Parameter counts, FLOPs and activation bytes of a GPT decoder, term by term as the header
// lists them. Notation: n tokens of a microbatch (b * s), h hidden, F MLP width, t tp size.
#include "strata/plan/transformer.h"

#include <algorithm>

#include "strata/core/error.h"

namespace strata {
namespace {

// Width multiplier of the up-projection: SwiGLU has a gate and a value projection.
double up_projections(bool gated) { return gated ? 2.0 : 1.0; }

// One MLP (the dense one, or one expert) of the given width, SwiGLU when `gated`.
double mlp_parameters(const TransformerSpec& spec, double width, bool gated) {
  const double h = static_cast<double>(spec.d_model);
  const double up =
      up_projections(gated) * width * h + (spec.linear_biases ? up_projections(gated) * width : 0);
  const double down = width * h + (spec.linear_biases ? h : 0);
  return up + down;
}

double attention_and_norm_parameters(const TransformerSpec& spec) {
  const double h = static_cast<double>(spec.d_model), kv = static_cast<double>(spec.kv_width());
  const double q = static_cast<double>(spec.q_width());
  const double norms = 2 * (spec.norm_bias ? 2 * h : h);
  const double bias = spec.linear_biases ? 1.0 : 0.0;
  const double qkv = (q + 2 * kv) * h + bias * (q + 2 * kv);
  const double out = q * h + bias * h;
  return norms + qkv + out;
}

// Forward FLOPs of the MLP's weight matmuls for n tokens at the given width.
double mlp_forward_flops(const TransformerSpec& spec, double tokens, double width, bool gated) {
  const double h = static_cast<double>(spec.d_model);
  return 2 * tokens * (up_projections(gated) * width * h + width * h);
}

// MLP activation items of n tokens at width F: the up-projection output and the activation
// output (GELU); SwiGLU keeps the gate/value pair, silu(gate) and the product.
double mlp_activation_elements(double tokens, double width, bool gated) {
  return tokens * width * (gated ? 4.0 : 2.0);
}

}  // namespace

TransformerSpec transformer_of(const ModelConfig& model) {
  TransformerSpec spec;
  static_cast<ModelShape&>(spec) = model.shape();
  // A dense model keeps the planner's MoE defaults; the runtime's experts have the dense
  // MLP's width and their own activation (ModelConfig::shape).
  if (!spec.moe.enabled()) spec.moe = ModelShape::Moe{};
  spec.norm_bias = model.norm == Norm::layernorm;
  spec.linear_biases = false;
  spec.learned_positions = model.pos == PositionEncoding::learned;
  spec.tied_embeddings = model.tie_embeddings;
  spec.dropout = false;
  spec.attention = model.attention;
  return spec;
}

TransformerSpec megatron_gpt(int64_t layers, int64_t hidden, int64_t heads, int64_t vocab,
                             int64_t seq) {
  TransformerSpec spec;
  spec.n_layers = layers;
  spec.d_model = hidden;
  spec.n_heads = heads;
  spec.n_kv_heads = heads;
  spec.d_ff = 4 * hidden;
  spec.vocab_size = vocab;
  spec.seq_len = seq;
  spec.linear_biases = true;
  spec.dropout = true;
  return spec;
}

ParameterCounts parameter_counts(const TransformerSpec& spec) {
  const double h = static_cast<double>(spec.d_model);
  ParameterCounts counts;
  counts.dense_layer = attention_and_norm_parameters(spec) +
                       mlp_parameters(spec, static_cast<double>(spec.d_ff), spec.mlp_gated(false));
  if (spec.moe.enabled()) {
    const double experts = static_cast<double>(spec.moe.num_experts);
    counts.expert_params = experts * mlp_parameters(spec, static_cast<double>(spec.expert_width()),
                                                    spec.mlp_gated(true));
    const double router = h * experts;
    counts.moe_layer = attention_and_norm_parameters(spec) + router + counts.expert_params;
  }
  const double moe_layers = static_cast<double>(spec.moe_layers());
  counts.layers_total = (static_cast<double>(spec.n_layers) - moe_layers) * counts.dense_layer +
                        moe_layers * counts.moe_layer;
  counts.embedding = static_cast<double>(spec.vocab_size) * h;
  counts.positions = spec.learned_positions ? static_cast<double>(spec.seq_len) * h : 0.0;
  counts.head = spec.tied_embeddings ? 0.0 : static_cast<double>(spec.vocab_size) * h;
  counts.final_norm = spec.norm_bias ? 2 * h : h;
  counts.total =
      counts.layers_total + counts.embedding + counts.positions + counts.head + counts.final_norm;
  return counts;
}

double expert_token_factor(const ModelShape::Moe& moe) { return static_cast<double>(moe.top_k); }

PassFlops layer_flops(const TransformerSpec& spec, int64_t micro_batch, bool moe_layer) {
  STRATA_CHECK(!moe_layer || spec.moe.enabled(), "an MoE layer in a dense model");
  const double n = static_cast<double>(micro_batch * spec.seq_len);
  const double h = static_cast<double>(spec.d_model), kv = static_cast<double>(spec.kv_width());
  const double s = static_cast<double>(spec.seq_len), q = static_cast<double>(spec.q_width());
  double weight_matmuls = 2 * n * ((q + 2 * kv) * h + q * h);  // QKV and out-projection
  if (moe_layer) {
    const double router = 2 * n * h * static_cast<double>(spec.moe.num_experts);
    weight_matmuls +=
        router + mlp_forward_flops(spec, n * expert_token_factor(spec.moe),
                                   static_cast<double>(spec.expert_width()), spec.mlp_gated(true));
  } else {
    weight_matmuls +=
        mlp_forward_flops(spec, n, static_cast<double>(spec.d_ff), spec.mlp_gated(false));
  }
  // QK^T and attention x V: 2 * s * head_dim per query token and head, for each of the two.
  const double core = 4 * n * s * q;
  PassFlops flops;
  flops.forward = weight_matmuls + core;
  flops.input_grad = weight_matmuls + 2 * core;
  flops.weight_grad = weight_matmuls;
  flops.attention_core_forward = core;
  return flops;
}

AttentionCoreFlops attention_core_flops(const TransformerSpec& spec, int64_t micro_batch) {
  const double core = layer_flops(spec, micro_batch, false).attention_core_forward;
  if (spec.attention == AttentionKernel::eager) return {core, 2 * core};
  const double s = static_cast<double>(spec.seq_len);
  const double causal = std::min(1.0, (s + static_cast<double>(kBlockwiseDiagonalBlock)) / (2 * s));
  return {causal * core, kBlockwiseBackwardProducts / 2 * causal * core};
}

PassFlops head_flops(const TransformerSpec& spec, int64_t micro_batch) {
  const double n = static_cast<double>(micro_batch * spec.seq_len);
  const double logits =
      2 * n * static_cast<double>(spec.d_model) * static_cast<double>(spec.vocab_size);
  PassFlops flops;
  flops.forward = logits;
  flops.input_grad = logits;
  flops.weight_grad = logits;
  return flops;
}

double model_flops_per_step(const TransformerSpec& spec, int64_t sequences) {
  double total = head_flops(spec, sequences).total();
  for (int64_t layer = 0; layer < spec.n_layers; ++layer) {
    total += layer_flops(spec, sequences, spec.is_moe_layer(layer)).total();
  }
  return total;
}

double hardware_flops_per_step(const TransformerSpec& spec, int64_t sequences, Recompute recompute,
                               int64_t cp) {
  double total = model_flops_per_step(spec, sequences);
  if (recompute == Recompute::none) return total;
  if (recompute == Recompute::selective && !selective_recomputes_attention(spec.attention, cp > 1))
    return total;
  for (int64_t layer = 0; layer < spec.n_layers; ++layer) {
    const PassFlops flops = layer_flops(spec, sequences, spec.is_moe_layer(layer));
    total += recompute == Recompute::full ? flops.forward : flops.attention_core_forward;
  }
  return total;
}

double attention_core_activation_bytes(const TransformerSpec& spec, int64_t micro_batch,
                                       const ActivationOptions& options) {
  const double e = static_cast<double>(options.element_bytes);
  const double mask = spec.dropout ? 1.0 : 0.0;
  const double s = static_cast<double>(spec.seq_len);
  if (spec.attention == AttentionKernel::blockwise) {
    // The kernel's output is the out-projection's input (counted there); context parallelism's
    // pieces keep a copy of their own.
    const double rows = static_cast<double>(micro_batch) * s / static_cast<double>(options.cp);
    const double output = options.cp > 1 ? e * rows * static_cast<double>(spec.q_width()) : 0.0;
    return (output + 4 * static_cast<double>(spec.n_heads) * rows) /
           static_cast<double>(options.tp);
  }
  // Each rank keeps its s / cp queries against all s keys.
  const double scores = static_cast<double>(spec.n_heads) * s *
                        (s / static_cast<double>(options.cp)) * static_cast<double>(micro_batch);
  const double per_element = e + (spec.dropout ? mask + e : 0.0);
  return per_element * scores / static_cast<double>(options.tp);
}

double layer_activation_bytes(const TransformerSpec& spec, int64_t micro_batch, bool moe_layer,
                              const ActivationOptions& options) {
  STRATA_CHECK(options.tp >= 1 && options.cp >= 1 && options.element_bytes >= 1, "bad options");
  const double e = static_cast<double>(options.element_bytes);
  const double mask = spec.dropout ? 1.0 : 0.0;
  const double t = static_cast<double>(options.tp);
  const double n =
      static_cast<double>(micro_batch * spec.seq_len) / static_cast<double>(options.cp);
  const double h = static_cast<double>(spec.d_model), kv = static_cast<double>(spec.kv_width());
  const double replicated_divisor = options.sequence_parallel ? t : 1.0;

  if (options.recompute == Recompute::full) return e * n * h / replicated_divisor;

  const double replicated = (4 * e + 2 * mask) * n * h;
  double mlp;
  if (moe_layer) {
    mlp = mlp_activation_elements(n * expert_token_factor(spec.moe),
                                  static_cast<double>(spec.expert_width()), spec.mlp_gated(true));
  } else {
    mlp = mlp_activation_elements(n, static_cast<double>(spec.d_ff), spec.mlp_gated(false));
  }
  const double q = static_cast<double>(spec.q_width());
  const double split = e * (n * q + 2 * n * kv + n * q + mlp);
  double bytes = replicated / replicated_divisor + split / t;
  if (options.recompute == Recompute::none ||
      !selective_recomputes_attention(spec.attention, options.cp > 1)) {
    bytes += attention_core_activation_bytes(spec, micro_batch, options);
  }
  return bytes;
}

}  // namespace strata
