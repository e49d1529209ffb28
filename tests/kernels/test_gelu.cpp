// The vectorized GELU against ATen's gelu(approximate = "tanh") computed in float64: values
// and gradients in float32 (within 2e-6 absolute plus 2e-6 relative) over [-12, 12], sizes that
// end inside a vector and span several chunks; values at the edges (0, inf, NaN, huge, far
// below 0) and gradients at huge values; bfloat16 within one bfloat16 rounding of the float64
// answer and at least as close as ATen's; float64 goes to ATen.
#include <gtest/gtest.h>

#include <ATen/ATen.h>

#include <cmath>
#include <limits>

#include "strata/kernels/gelu.h"

namespace strata {
namespace {

at::Tensor reference(const at::Tensor& x) { return at::gelu(x.to(at::kDouble), "tanh"); }

at::Tensor reference_grad(const at::Tensor& x, const at::Tensor& dy) {
  at::Tensor xd = x.to(at::kDouble).detach().requires_grad_(true);
  at::gelu(xd, "tanh").backward(dy.to(at::kDouble));
  return xd.grad();
}

// Largest |got - want| / (1 + |want|): absolute near 0, relative for large values.
double max_error(const at::Tensor& got, const at::Tensor& want) {
  at::Tensor g = got.to(at::kDouble), w = want.to(at::kDouble);
  return ((g - w).abs() / (w.abs() + 1)).max().item<double>();
}

at::Tensor inputs(int64_t n, at::ScalarType dtype) {
  return (at::rand({n}, at::kDouble) * 24 - 12).to(dtype);
}

TEST(Gelu, MatchesAtenInFloat32AcrossSizesAndChunks) {
  at::manual_seed(1);
  for (int64_t n : {int64_t{1}, int64_t{15}, int64_t{17}, kGeluChunk - 3, 3 * kGeluChunk + 5}) {
    const at::Tensor x = inputs(n, at::kFloat).requires_grad_(true);
    const at::Tensor dy = at::randn({n});
    const at::Tensor y = gelu_tanh(x);
    EXPECT_EQ(y.scalar_type(), at::kFloat);
    EXPECT_LT(max_error(y, reference(x.detach())), 2e-6) << "n " << n;
    y.backward(dy);
    EXPECT_LT(max_error(x.grad(), reference_grad(x, dy)), 2e-6) << "n " << n;
  }
}

TEST(Gelu, KeepsTheEdgeValues) {
  constexpr float kInf = std::numeric_limits<float>::infinity();
  const at::Tensor x =
      at::tensor({0.0f, -0.0f, kInf, 1e30f, -1e30f, 1e-20f, 80.0f, -80.0f, -10.0f});
  const at::Tensor y = gelu_tanh(x);
  EXPECT_EQ(y[0].item<float>(), 0.0f);
  EXPECT_EQ(y[2].item<float>(), kInf);
  EXPECT_EQ(y[3].item<float>(), 1e30f);
  EXPECT_EQ(y[4].item<float>(), 0.0f);
  EXPECT_NEAR(y[5].item<float>(), 0.5e-20f, 1e-27f);
  EXPECT_EQ(y[6].item<float>(), 80.0f);
  EXPECT_EQ(y[7].item<float>(), 0.0f);
  // Far below 0 GELU is tiny, not 0: x / (1 + exp(-2u)) to float rounding, where ATen's
  // 1 + tanh(u) cancels to 0.
  const double x6 = -6.0, u6 = 0.7978845608028654 * (x6 + 0.044715 * x6 * x6 * x6);
  const double want = x6 / (1 + std::exp(-2 * u6));
  EXPECT_NEAR(gelu_tanh(at::tensor({-6.0f}))[0].item<float>(), want, 1e-5 * std::abs(want));
  const at::Tensor nan = gelu_tanh(at::tensor({std::numeric_limits<float>::quiet_NaN()}));
  EXPECT_TRUE(std::isnan(nan[0].item<float>()));
}

TEST(Gelu, GradientIsOneOrZeroFarFromZero) {
  // x^3 overflows float from 7e12 on and x^2 from 2e19: the gradient must still be 1 above 0
  // and 0 below, as the exact derivative is to float precision.
  const at::Tensor x =
      at::tensor({1e4f, 1e6f, 1e13f, 1e20f, 3e38f, -1e4f, -1e6f, -1e20f}).requires_grad_(true);
  gelu_tanh(x).backward(at::ones({8}));
  const at::Tensor want = at::tensor({1.0f, 1.0f, 1.0f, 1.0f, 1.0f, 0.0f, 0.0f, 0.0f});
  EXPECT_TRUE(at::equal(x.grad(), want)) << x.grad();
}

TEST(Gelu, BFloat16IsOneRoundingFromTheExactValue) {
  at::manual_seed(2);
  const int64_t n = 2 * kGeluChunk + 9;
  const at::Tensor x = inputs(n, at::kBFloat16).requires_grad_(true);
  const at::Tensor dy = at::randn({n}).to(at::kBFloat16);
  const at::Tensor y = gelu_tanh(x);
  EXPECT_EQ(y.scalar_type(), at::kBFloat16);
  // bfloat16 keeps 8 significant bits: one rounding is within 2^-8 relative.
  EXPECT_LT(max_error(y, reference(x.detach())), 1.0 / 256);
  y.backward(dy);
  EXPECT_EQ(x.grad().scalar_type(), at::kBFloat16);
  EXPECT_LT(max_error(x.grad(), reference_grad(x, dy)), 1.0 / 256);
  // And at least as close as ATen's own bfloat16 GELU.
  EXPECT_LE(max_error(gelu_tanh(x.detach()), reference(x.detach())),
            max_error(at::gelu(x.detach(), "tanh"), reference(x.detach())));
}

TEST(Gelu, Float64IsAtensOwn) {
  at::manual_seed(3);
  const at::Tensor x = inputs(100, at::kDouble);
  EXPECT_TRUE(at::equal(gelu_tanh(x), reference(x)));
}

}  // namespace
}  // namespace strata
