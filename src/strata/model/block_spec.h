// What a transformer block is made of, as data: its norm, position encoding, feed-forward
// activation, which projections carry biases, the rotary base and scaling, and the mixture of
// experts. GPT (model/gpt.h) builds and runs its blocks from one BlockSpec, so another model
// family is another spec, not another branch in the model:
//   GPT-2:  LayerNorm, learned positions, GELU, biases on every projection
//   Llama:  RMSNorm, RoPE (Llama 3: `llama3` rope scaling), SwiGLU, no biases
//   Qwen2:  Llama with biases on q, k and v
#pragma once
#include <cstdint>

#include "strata/core/config.h"

namespace strata {

// How the rotary frequencies are stretched for contexts past the one a model was trained on.
enum class RopeScalingType {
  none,
  // Llama 3.1's rope_type "llama3" (Hugging Face transformers' _compute_llama3_parameters):
  // a frequency f of wavelength w = 2 pi / f is kept where w < original / high_freq_factor,
  // divided by `factor` where w > original / low_freq_factor, and in between interpolated:
  // (1 - s) f / factor + s f with s = (original / w - low_freq_factor) /
  // (high_freq_factor - low_freq_factor). The cos and sin are not rescaled.
  llama3,
};

struct RopeScaling {
  RopeScalingType type = RopeScalingType::none;
  double factor = 8.0;
  double low_freq_factor = 1.0;
  double high_freq_factor = 4.0;
  int64_t original_max_position_embeddings = 8192;  // "original" above
};

// Which linear projections add a bias (y = x W^T + b). Column-split projections (q, k, v, the
// MLP's input) split their bias over tp as they split their weight's rows; row-split ones (the
// attention's and the MLP's output) add theirs once, after the tp reduction (Megatron; under
// sequence parallelism after the reduce-scatter, to this rank's tokens).
struct LinearBiases {
  bool q = false, k = false, v = false;
  bool attention_out = false;
  bool mlp_in = false, mlp_out = false;  // the dense MLP's (none with experts: they carry none)
};

struct BlockSpec {
  Norm norm = Norm::layernorm;  // the blocks' two norms and the final norm; LayerNorm has a bias
  double norm_eps = 1e-5;
  PositionEncoding position = PositionEncoding::learned;
  double rope_theta = 10000.0;               // rotary base (position = rope)
  RopeScaling rope_scaling;                  // position = rope only
  Activation activation = Activation::gelu;  // the dense MLP's (the experts': moe.activation)
  LinearBiases biases;
  MoeConfig moe;  // num_experts = 0: every block's feed-forward is the dense MLP

  bool is_moe_layer(int64_t layer) const {
    return moe.num_experts > 0 && (layer + 1) % moe.every == 0;
  }
};

// The block a [model] table describes: its norm, pos, activation, norm_eps, rope_theta and moe;
// no linear biases, no rope scaling (strata's GPT).
BlockSpec block_spec_of(const ModelConfig& config);

// `config` with the fields block_spec_of reads set from `block`, so that a model built from
// config and block reports (ModelConfig) what it runs. Biases and rope scaling have no
// ModelConfig field: they live in the BlockSpec only.
ModelConfig config_with_block(ModelConfig config, const BlockSpec& block);

// Throws a UserError naming the field when `block` cannot run: rope scaling without rotary
// positions, a llama3 scaling whose factors are not 0 < low < high, factor > 0, original > 0,
// or MLP biases in a mixture of experts.
void check_block_spec(const BlockSpec& block);

}  // namespace strata
