// GELU with the tanh approximation, y = x/2 (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3))), the
// form GPT-2 and Megatron-LM use, differentiable. float32 and bfloat16 run in one pass of
// 16-lane vectors (vector_lanes.h), written through e = exp(2u): x/2 (1 + tanh u) =
// x e / (e + 1), within a few float roundings of the exact value (and its gradient too) over
// the whole float range, where ATen calls Sleef's 1-ulp tanhf per 8 lanes (9% of a bf16
// training step of the d_model 768 model was that call). bfloat16 is read into float32 and
// rounded to nearest even once at the end, as ATen rounds. Other dtypes (float64 for the
// exact tests) go to ATen's gelu. Work is split over ATen's threads in chunks of kGeluChunk
// elements; a smaller tensor runs on the calling thread.
#pragma once
#include <ATen/ATen.h>

#include <cstdint>

namespace strata {

constexpr int64_t kGeluChunk = 32768;

at::Tensor gelu_tanh(const at::Tensor& x);

}  // namespace strata
