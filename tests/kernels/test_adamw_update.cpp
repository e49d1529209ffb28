// The vectorized AdamW update against the plain scalar loop, bit for bit, on the vector path
// this process runs (kernels.unit, kernels.unit.avx2 and kernels.unit.generic run all three).
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <random>
#include <vector>

#include "strata/kernels/adamw_update.h"

namespace strata {
namespace {

template <typename T>
struct State {
  std::vector<T> w, m, v, g;
};

template <typename T>
State<T> random_state(int64_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<double> normal;
  State<T> s{std::vector<T>(n), std::vector<T>(n), std::vector<T>(n), std::vector<T>(n)};
  for (int64_t i = 0; i < n; ++i) {
    s.w[i] = static_cast<T>(normal(rng));
    s.m[i] = static_cast<T>(0.1 * normal(rng));
    s.v[i] = static_cast<T>(0.01 * std::abs(normal(rng)) * (i % 7 == 0 ? 0.0 : 1.0));
    s.g[i] = static_cast<T>(normal(rng) * (i % 5 == 0 ? 1e-20 : 1.0));
  }
  return s;
}

// The loop as it was before it was vectorized. Like the kernel, this file is built with
// -ffp-contract=off (tests/kernels/CMakeLists.txt): no fused multiply-adds on any target.
template <typename T>
void scalar_update(State<T>& s, bool with_gradient, const AdamWScalars& u) {
  const T decay = static_cast<T>(u.decay), b1 = static_cast<T>(u.beta1),
          b2 = static_cast<T>(u.beta2), one_b1 = static_cast<T>(1.0 - u.beta1),
          one_b2 = static_cast<T>(1.0 - u.beta2), step = static_cast<T>(u.step_size),
          inv_bc2 = static_cast<T>(u.inv_sqrt_bias_correction2), eps = static_cast<T>(u.eps);
  for (size_t i = 0; i < s.w.size(); ++i) {
    if (with_gradient) {
      s.m[i] = s.m[i] * b1 + one_b1 * s.g[i];
      s.v[i] = s.v[i] * b2 + one_b2 * s.g[i] * s.g[i];
    }
    s.w[i] = s.w[i] * decay - step * s.m[i] / (std::sqrt(s.v[i]) * inv_bc2 + eps);
  }
}

template <typename T>
bool same_bits(const std::vector<T>& a, const std::vector<T>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(T)) == 0;
}

template <typename T>
void expect_equal_to_the_scalar_loop() {
  const AdamWScalars scalars{1.0 - 3e-4 * 0.1,        0.9, 0.95, 3e-4 / (1 - 0.9),
                             1 / std::sqrt(1 - 0.95), 1e-8};
  for (const int64_t n : {1, 15, 16, 17, 1000, 4099}) {
    for (const bool with_gradient : {true, false}) {
      State<T> expected = random_state<T>(n, static_cast<uint32_t>(n));
      State<T> got = expected;
      for (int step = 0; step < 3; ++step) {
        scalar_update(expected, with_gradient, scalars);
        adamw_update(got.w.data(), got.m.data(), got.v.data(),
                     with_gradient ? got.g.data() : nullptr, n, scalars);
      }
      EXPECT_TRUE(same_bits(got.w, expected.w)) << n << " elements, gradient " << with_gradient;
      EXPECT_TRUE(same_bits(got.m, expected.m)) << n << " elements, gradient " << with_gradient;
      EXPECT_TRUE(same_bits(got.v, expected.v)) << n << " elements, gradient " << with_gradient;
    }
  }
}

TEST(AdamWUpdate, Float32EqualsTheScalarLoopBitForBit) { expect_equal_to_the_scalar_loop<float>(); }
TEST(AdamWUpdate, Float64EqualsTheScalarLoopBitForBit) {
  expect_equal_to_the_scalar_loop<double>();
}

}  // namespace
}  // namespace strata
