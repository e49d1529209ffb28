// GELU (gelu.h): the forward and the backward each one vectorized pass, in chunks on ATen's
// threads, inside an autograd function that saves the input as ATen's gelu does.
//   u = k (x + c x^3), t = tanh(u), y = x/2 (1 + t),
//   dy/dx = (1 + t) / 2 + x/2 (1 - t^2) k (1 + 3 c x^2),   k = sqrt(2 / pi), c = 0.044715,
// computed through s = (1 + t) / 2, the logistic function of 2u (halves_of_tanh).
#include "strata/kernels/gelu.h"

#include <ATen/record_function.h>
#include <torch/csrc/autograd/custom_function.h>

#include <algorithm>
#include <cstring>

#include "strata/core/error.h"
#include "strata/kernels/thread_team.h"
#include "strata/kernels/vector_lanes.h"

namespace strata {
namespace {

using namespace lanes;

constexpr float kSqrtTwoOverPi = 0.7978845608028654f;
constexpr float kCubic = 0.044715f;

// s = (1 + tanh(u)) / 2 = e / (e + 1) with e = exp(2u), u = k (x + c x^3), and 1 - s = 1 / (e + 1):
// both without the cancellation of 1 +- tanh(u) near -+1, so GELU and its gradient stay exact to
// float rounding where they are tiny (x far below 0) and where tanh's error would be multiplied
// by a large x (the gradient's second term).
[[gnu::always_inline]] inline void halves_of_tanh(const Floats& x, Floats& s, Floats& one_minus_s) {
  Floats e = 2.0f * kSqrtTwoOverPi * x * (1.0f + kCubic * x * x);
  // From 2u = 30 on (x above 7.5) s is 1 in float and 1 - s under 1e-13: there they are set to
  // exactly 1 and 0, so the gradient's x^3-sized factor (inf once x^2 overflows) meets a true 0.
  const Ints saturated = e > 30.0f;
  e = saturated ? Floats{} + 30.0f : e;
  exp_lanes(e);
  one_minus_s = 1.0f / (e + 1.0f);
  s = e * one_minus_s;
  s = saturated ? Floats{} + 1.0f : s;
  one_minus_s = saturated ? Floats{} : one_minus_s;
}

// x becomes GELU(x) = x s.
[[gnu::always_inline]] inline void gelu_lanes(Floats& x) {
  Floats s, one_minus_s;
  halves_of_tanh(x, s, one_minus_s);
  x *= s;
}

// dy becomes dy GELU'(x) = dy (s + 2 x s (1 - s) k (1 + 3 c x^2)), as (1 - t^2) / 2 = 2 s (1 - s).
[[gnu::always_inline]] inline void gelu_grad_lanes(const Floats& x, Floats& dy) {
  Floats s, one_minus_s;
  halves_of_tanh(x, s, one_minus_s);
  const Floats inner_grad = kSqrtTwoOverPi * (1.0f + 3.0f * kCubic * x * x);
  const Floats both = s * one_minus_s;  // 0 where either side saturated: no 0 * inf
  const Floats term = both == 0.0f ? Floats{} : 2.0f * x * both * inner_grad;
  dy *= s + term;
}

// Element access by dtype: float32 as it is; bfloat16 widened to float32 and rounded back to
// nearest even (a NaN stays a quiet NaN).
struct Float32 {
  using type = float;
  [[gnu::always_inline]] static void read(Floats& lanes, const float* in, int64_t n) {
    load(lanes, in, n, 0.0f);
  }
  [[gnu::always_inline]] static void write(float* out, const Floats& lanes, int64_t n) {
    std::memcpy(out, &lanes, n * sizeof(float));
  }
};

struct BFloat16 {
  using type = uint16_t;
  [[gnu::always_inline]] static void read(Floats& lanes, const uint16_t* in, int64_t n) {
    load(lanes, reinterpret_cast<const c10::BFloat16*>(in), n);
  }
  [[gnu::always_inline]] static void write(uint16_t* out, const Floats& lanes, int64_t n) {
    store(reinterpret_cast<c10::BFloat16*>(out), lanes, n);
  }
};

template <typename Access>
[[gnu::always_inline]] inline void forward_lanes(const typename Access::type* x,
                                                 typename Access::type* y, int64_t count) {
  Floats lanes;
  Access::read(lanes, x, count);
  gelu_lanes(lanes);
  Access::write(y, lanes, count);
}

template <typename Access>
[[gnu::always_inline]] inline void backward_lanes(const typename Access::type* x,
                                                  const typename Access::type* dy,
                                                  typename Access::type* dx, int64_t count) {
  Floats x_lanes, grad;
  Access::read(x_lanes, x, count);
  Access::read(grad, dy, count);
  gelu_grad_lanes(x_lanes, grad);
  Access::write(dx, grad, count);
}

// Whole vectors first, their copies of a constant size (one vector load or store each), then
// the tail, whose copies of a run-time size would cost a call per vector in the loop.
template <typename Access>
[[gnu::always_inline]] inline void forward_pass(const typename Access::type* x,
                                                typename Access::type* y, int64_t n) {
  int64_t i = 0;
  for (; i + kLanes <= n; i += kLanes) forward_lanes<Access>(x + i, y + i, kLanes);
  if (i < n) forward_lanes<Access>(x + i, y + i, n - i);
}

template <typename Access>
[[gnu::always_inline]] inline void backward_pass(const typename Access::type* x,
                                                 const typename Access::type* dy,
                                                 typename Access::type* dx, int64_t n) {
  int64_t i = 0;
  for (; i + kLanes <= n; i += kLanes) backward_lanes<Access>(x + i, dy + i, dx + i, kLanes);
  if (i < n) backward_lanes<Access>(x + i, dy + i, dx + i, n - i);
}

[[gnu::always_inline]] inline void forward_float_body(const float* x, float* y, int64_t n) {
  forward_pass<Float32>(x, y, n);
}
[[gnu::always_inline]] inline void forward_bfloat16_body(const uint16_t* x, uint16_t* y,
                                                         int64_t n) {
  forward_pass<BFloat16>(x, y, n);
}
[[gnu::always_inline]] inline void backward_float_body(const float* x, const float* dy, float* dx,
                                                       int64_t n) {
  backward_pass<Float32>(x, dy, dx, n);
}
[[gnu::always_inline]] inline void backward_bfloat16_body(const uint16_t* x, const uint16_t* dy,
                                                          uint16_t* dx, int64_t n) {
  backward_pass<BFloat16>(x, dy, dx, n);
}

STRATA_VECTOR_PATHS(void, forward_float, (const float* x, float* y, int64_t n), (x, y, n))
STRATA_VECTOR_PATHS(void, forward_bfloat16, (const uint16_t* x, uint16_t* y, int64_t n), (x, y, n))
STRATA_VECTOR_PATHS(void, backward_float, (const float* x, const float* dy, float* dx, int64_t n),
                    (x, dy, dx, n))
STRATA_VECTOR_PATHS(void, backward_bfloat16,
                    (const uint16_t* x, const uint16_t* dy, uint16_t* dx, int64_t n),
                    (x, dy, dx, n))

bool vectorized(const at::Tensor& x) {
  return x.scalar_type() == at::kFloat || x.scalar_type() == at::kBFloat16;
}

at::Tensor gelu_tanh_forward(const at::Tensor& input) {
  RECORD_FUNCTION("strata::gelu_forward", std::vector<c10::IValue>({input}));
  const at::Tensor x = input.contiguous();
  at::Tensor y = at::empty_like(x);
  const bool bf16 = x.scalar_type() == at::kBFloat16;
  for_each_chunk(x.numel(), kGeluChunk, [&](int64_t, int64_t first, int64_t count) {
    if (bf16) {
      const auto* in = reinterpret_cast<const uint16_t*>(x.data_ptr<at::BFloat16>());
      auto* out = reinterpret_cast<uint16_t*>(y.data_ptr<at::BFloat16>());
      forward_bfloat16(in + first, out + first, count);
    } else {
      forward_float(x.data_ptr<float>() + first, y.data_ptr<float>() + first, count);
    }
  });
  return y;
}

at::Tensor gelu_tanh_backward(const at::Tensor& grad, const at::Tensor& input) {
  const at::Tensor x = input.contiguous(), dy = grad.contiguous().to(x.scalar_type());
  at::Tensor dx = at::empty_like(x);
  const bool bf16 = x.scalar_type() == at::kBFloat16;
  for_each_chunk(x.numel(), kGeluChunk, [&](int64_t, int64_t first, int64_t count) {
    if (bf16) {
      const auto* in = reinterpret_cast<const uint16_t*>(x.data_ptr<at::BFloat16>());
      const auto* g = reinterpret_cast<const uint16_t*>(dy.data_ptr<at::BFloat16>());
      auto* out = reinterpret_cast<uint16_t*>(dx.data_ptr<at::BFloat16>());
      backward_bfloat16(in + first, g + first, out + first, count);
    } else {
      backward_float(x.data_ptr<float>() + first, dy.data_ptr<float>() + first,
                     dx.data_ptr<float>() + first, count);
    }
  });
  return dx;
}

struct GeluFunction : torch::autograd::Function<GeluFunction> {
  static at::Tensor forward(torch::autograd::AutogradContext* ctx, const at::Tensor& x) {
    ctx->save_for_backward({x});
    return gelu_tanh_forward(x);
  }
  static torch::autograd::variable_list backward(torch::autograd::AutogradContext* ctx,
                                                 torch::autograd::variable_list grads) {
    return {gelu_tanh_backward(grads[0], ctx->get_saved_variables()[0])};
  }
};

}  // namespace

at::Tensor gelu_tanh(const at::Tensor& x) {
  if (!x.is_cpu() || !vectorized(x)) return at::gelu(x, "tanh");
  return GeluFunction::apply(x);
}

}  // namespace strata
