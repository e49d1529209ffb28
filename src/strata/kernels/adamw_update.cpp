// The AdamW update (adamw_update.h): a plain loop, which the compiler vectorizes in each
// variant of STRATA_VECTOR_PATHS. It may: this file is compiled with -fno-math-errno (sqrt of
// a second moment, never negative, sets no errno anyway), so sqrt becomes one vector
// instruction, and with -ffp-contract=off, so no variant fuses a multiply into an add and
// every path rounds as the scalar loop does (src/CMakeLists.txt).
#include "strata/kernels/adamw_update.h"

#include <cmath>

#include "strata/kernels/vector_lanes.h"

namespace strata {
namespace {

template <typename T>
[[gnu::always_inline]] inline void update_body(T* __restrict w, T* __restrict m, T* __restrict v,
                                               const T* __restrict g, int64_t n,
                                               const AdamWScalars& s) {
  const T decay = static_cast<T>(s.decay), b1 = static_cast<T>(s.beta1),
          b2 = static_cast<T>(s.beta2), one_b1 = static_cast<T>(1.0 - s.beta1),
          one_b2 = static_cast<T>(1.0 - s.beta2), step = static_cast<T>(s.step_size),
          inv_bc2 = static_cast<T>(s.inv_sqrt_bias_correction2), eps = static_cast<T>(s.eps);
  if (g != nullptr) {
    for (int64_t i = 0; i < n; ++i) {
      m[i] = m[i] * b1 + one_b1 * g[i];
      v[i] = v[i] * b2 + one_b2 * g[i] * g[i];
      w[i] = w[i] * decay - step * m[i] / (std::sqrt(v[i]) * inv_bc2 + eps);
    }
  } else {
    for (int64_t i = 0; i < n; ++i) {
      w[i] = w[i] * decay - step * m[i] / (std::sqrt(v[i]) * inv_bc2 + eps);
    }
  }
}

[[gnu::always_inline]] inline void adamw_update_float_body(float* w, float* m, float* v,
                                                           const float* g, int64_t n,
                                                           const AdamWScalars& s) {
  update_body<float>(w, m, v, g, n, s);
}
[[gnu::always_inline]] inline void adamw_update_double_body(double* w, double* m, double* v,
                                                            const double* g, int64_t n,
                                                            const AdamWScalars& s) {
  update_body<double>(w, m, v, g, n, s);
}

}  // namespace

STRATA_VECTOR_PATHS(void, adamw_update_float,
                    (float* w, float* m, float* v, const float* g, int64_t n,
                     const AdamWScalars& s),
                    (w, m, v, g, n, s))
STRATA_VECTOR_PATHS(void, adamw_update_double,
                    (double* w, double* m, double* v, const double* g, int64_t n,
                     const AdamWScalars& s),
                    (w, m, v, g, n, s))

void adamw_update(float* value, float* exp_avg, float* exp_avg_sq, const float* grad, int64_t n,
                  const AdamWScalars& scalars) {
  adamw_update_float(value, exp_avg, exp_avg_sq, grad, n, scalars);
}
void adamw_update(double* value, double* exp_avg, double* exp_avg_sq, const double* grad, int64_t n,
                  const AdamWScalars& scalars) {
  adamw_update_double(value, exp_avg, exp_avg_sq, grad, n, scalars);
}

}  // namespace strata
