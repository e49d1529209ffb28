// Blocks of other model families (model/block_spec.h) for the tests, and nonzero biases: a
// model's biases start at zero, which would hide a bias added in the wrong place or twice.
// Header-only: it needs strata_model.
#pragma once
#include <ATen/core/grad_mode.h>

#include <string>

#include "strata/model/gpt.h"

namespace strata::testing {

// Qwen2: Llama's block (RMSNorm, RoPE, SwiGLU) with biases on q, k and v.
inline BlockSpec qwen2_like_block() {
  BlockSpec block;
  block.norm = Norm::rmsnorm;
  block.norm_eps = 1e-6;
  block.position = PositionEncoding::rope;
  block.rope_theta = 1000000.0;
  block.activation = Activation::swiglu;
  block.biases.q = block.biases.k = block.biases.v = true;
  return block;
}

// GPT-2: LayerNorm, learned positions, GELU, a bias on every projection.
inline BlockSpec gpt2_like_block() {
  BlockSpec block;
  block.biases = {true, true, true, true, true, true};
  return block;
}

// Every ".bias" parameter of `model` drawn from N(0, std) by (seed, name), cut to this rank's
// piece: the same global values whatever the layout.
inline void randomize_biases(GPT& model, uint64_t seed, double std = 0.3) {
  at::NoGradGuard no_grad;
  const std::string suffix = ".bias";
  for (Parameter& parameter : model.parameters()) {
    const std::string& name = parameter.name;
    if (name.size() < suffix.size() ||
        name.compare(name.size() - suffix.size(), suffix.size(), suffix) != 0)
      continue;
    parameter.value.copy_(make_parameter(name, parameter.spec, InitKind::Normal, std, seed,
                                         parameter.value.scalar_type(), false)
                              .value);
  }
}

}  // namespace strata::testing
