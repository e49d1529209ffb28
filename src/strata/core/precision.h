// The dtypes a train.precision means (docs/parallelism.md, "Mixed precision"): what the model
// computes in (its parameters, activations and gradients as autograd produces them), and what
// the optimizer keeps (master weights, moments) and gradients accumulate in.
#pragma once
#include <ATen/ATen.h>

#include "strata/core/config_enums.h"

namespace strata {

at::ScalarType compute_dtype(Precision precision);  // fp32, bf16, fp16 or fp64
at::ScalarType master_dtype(Precision precision);   // fp64 for fp64, else fp32
// Master weights kept apart from the compute parameters (bf16, fp16).
inline bool mixed_precision(Precision precision) {
  return precision == Precision::bf16 || precision == Precision::fp16;
}

// x itself, or x in float32 where ATen has no CPU kernel for x's dtype (float16 activations,
// eager attention's products and softmax on CPU in libtorch 1.13): the caller rounds the
// result back with .to(x.scalar_type()). A CUDA float16 tensor is returned as is. The linear
// layers' products have their own rule (parallel/linear.cpp, multiplies_in_float32).
at::Tensor computable(const at::Tensor& x);

}  // namespace strata
