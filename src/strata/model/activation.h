// The feed-forward nonlinearity, shared by the dense MLP and the experts: GELU (tanh
// approximation) on h, or SwiGLU on h = [gate | value] (last dim 2F) -> silu(gate) * value.
#pragma once
#include <ATen/ATen.h>

#include "strata/core/config_enums.h"

namespace strata {

at::Tensor ffn_activation(const at::Tensor& h, Activation activation);

}  // namespace strata
