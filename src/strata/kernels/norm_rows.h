// LayerNorm and RMSNorm of bf16 activations over their last dimension, differentiable, computed
// in float32 and rounded to bf16 once, with no float32 copy of the activations on either side.
//
//   LayerNorm: y = (x - mean) rstd w + b,   rstd = 1 / sqrt(mean((x - mean)^2) + eps)
//   RMSNorm:   y = x rstd w,                rstd = 1 / sqrt(mean(x^2) + eps)
//   backward, with xhat = (x - mean) rstd (x rstd for RMSNorm) and g = dy w:
//   dx = rstd (g - mean(g) - xhat mean(g xhat))   (RMSNorm: without the mean(g) term)
//   dw = sum over rows of dy xhat,  db = sum over rows of dy
//
// Each row is two or three passes of 16-lane vectors (vector_lanes.h) in the forward and two
// in the backward while it sits in L1, rows split over ATen's threads. No double backward.
// The model computed these norms in float32 on copies: x widened to float32 before ATen's
// layer_norm and the result rounded back, and the same two copies of the gradient in the
// backward, four passes over the activations per norm besides the norm's own, and a float32
// copy of x held for the backward. dw and db are summed over blocks of kNormRows rows and the
// blocks then in order, so their bits do not depend on the thread count. The weight and bias may be
// any floating dtype (read as float32); their gradients come back in their dtypes.
#pragma once
#include <ATen/ATen.h>

#include <cstdint>

namespace strata {

constexpr int64_t kNormRows = 64;

// x (..., C) bf16 on the CPU; weight (C); bias (C), or undefined for none. centered: LayerNorm
// (subtract the mean), else RMSNorm.
at::Tensor norm_rows(const at::Tensor& x, const at::Tensor& weight, const at::Tensor& bias,
                     double eps, bool centered);

// Whether norm_rows takes x (CPU bf16); the model normalizes anything else in float32 by ATen.
bool norm_rows_takes(const at::Tensor& x);

}  // namespace strata
