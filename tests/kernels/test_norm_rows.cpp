// The bf16 norms against float64 on the same bf16 values: LayerNorm with and without bias and
// RMSNorm, widths that end inside a vector, rows that end inside a block; outputs and input
// gradients within bf16 rounding, weight and bias gradients within float32 summation. The
// gradients of the weights do not depend on the thread count, and a weight that does not fit
// is refused by name.
#include <gtest/gtest.h>

#include <ATen/ATen.h>
#include <ATen/Parallel.h>

#include <string>

#include "strata/kernels/norm_rows.h"

namespace strata {
namespace {

struct Grads {
  at::Tensor y, dx, dw, db;
};

// y = norm(x) and the gradients of sum(y * probe), with `norm` one of the two.
template <typename Norm>
Grads differentiate(const at::Tensor& x, const at::Tensor& w, const at::Tensor& b,
                    const at::Tensor& probe, Norm norm) {
  const at::Tensor xg = x.detach().requires_grad_(true), wg = w.detach().requires_grad_(true);
  const at::Tensor bg = b.defined() ? b.detach().requires_grad_(true) : at::Tensor();
  const at::Tensor y = norm(xg, wg, bg);
  (y.to(at::kDouble) * probe.to(at::kDouble)).sum().backward();
  return {y.detach(), xg.grad(), wg.grad(), bg.defined() ? bg.grad() : at::Tensor()};
}

at::Tensor reference(const at::Tensor& x, const at::Tensor& w, const at::Tensor& b, double eps,
                     bool centered) {
  if (centered) return at::layer_norm(x, {x.size(-1)}, w, b, eps);
  return x * at::rsqrt(x.pow(2).mean(-1, /*keepdim=*/true) + eps) * w;
}

// Largest |got - want| relative to the largest |want|.
double relative_error(const at::Tensor& got, const at::Tensor& want) {
  const at::Tensor w = want.to(at::kDouble);
  return (got.to(at::kDouble) - w).abs().max().item<double>() / w.abs().max().item<double>();
}

TEST(NormRows, Bf16MatchesFloat64OnTheSameValues) {
  at::manual_seed(3);
  struct Case {
    int64_t rows, C;
    bool centered, bias;
  };
  for (const Case c :
       {Case{2 * kNormRows + 5, 768, true, true}, Case{37, 37, true, true},
        Case{70, 40, true, false}, Case{kNormRows, 768, false, false}, Case{3, 19, false, false}}) {
    const std::string name = std::to_string(c.rows) + " x " + std::to_string(c.C) +
                             (c.centered ? " LayerNorm" : " RMSNorm") + (c.bias ? " + bias" : "");
    const double eps = 1e-5;
    // Rows with an offset and a scale of their own, as a residual stream has.
    const at::Tensor x =
        (at::randn({c.rows, c.C}, at::kDouble) * 3 + at::randn({c.rows, 1}) * 2).to(at::kBFloat16);
    const at::Tensor w = (1 + 0.5 * at::randn({c.C}, at::kDouble)).to(at::kBFloat16);
    const at::Tensor b = c.bias ? at::randn({c.C}, at::kDouble).to(at::kBFloat16) : at::Tensor();
    const at::Tensor probe = at::randn({c.rows, c.C}, at::kDouble).to(at::kBFloat16);
    const Grads got = differentiate(x, w, b, probe, [&](auto& xg, auto& wg, auto& bg) {
      return norm_rows(xg, wg, bg, eps, c.centered);
    });
    auto wide = [](const at::Tensor& t) { return t.defined() ? t.to(at::kDouble) : t; };
    const Grads want = differentiate(
        wide(x), wide(w), wide(b), probe,
        [&](auto& xg, auto& wg, auto& bg) { return reference(xg, wg, bg, eps, c.centered); });
    EXPECT_EQ(got.y.scalar_type(), at::kBFloat16) << name;
    EXPECT_EQ(got.dx.scalar_type(), at::kBFloat16) << name;
    EXPECT_EQ(got.dw.scalar_type(), at::kBFloat16) << name;
    // One bf16 rounding (2^-8 relative) of the result, and float32 arithmetic before it.
    EXPECT_LE(relative_error(got.y, want.y), 8e-3) << name << " y";
    EXPECT_LE(relative_error(got.dx, want.dx), 8e-3) << name << " dx";
    EXPECT_LE(relative_error(got.dw, want.dw), 8e-3) << name << " dw";
    if (c.bias) {
      EXPECT_LE(relative_error(got.db, want.db), 8e-3) << name << " db";
    } else {
      EXPECT_FALSE(got.db.defined()) << name;
    }
  }
}

// The float32 sums before the weights' gradients are rounded: the kernel's dw and db in float32
// weights stay within float32 summation error of float64, not just within a bf16 rounding.
TEST(NormRows, WeightGradientsSumInFloat32) {
  at::manual_seed(5);
  const int64_t rows = 4 * kNormRows + 9, C = 96;
  const at::Tensor x = at::randn({rows, C}, at::kDouble).to(at::kBFloat16);
  const at::Tensor w = at::randn({C}, at::kDouble).to(at::kFloat);
  const at::Tensor b = at::randn({C}, at::kDouble).to(at::kFloat);
  const at::Tensor probe = at::randn({rows, C}, at::kDouble).to(at::kBFloat16);
  const Grads got = differentiate(x, w, b, probe, [&](auto& xg, auto& wg, auto& bg) {
    return norm_rows(xg, wg, bg, 1e-5, true);
  });
  const Grads want = differentiate(
      x.to(at::kDouble), w.to(at::kDouble), b.to(at::kDouble), probe,
      [&](auto& xg, auto& wg, auto& bg) { return reference(xg, wg, bg, 1e-5, true); });
  EXPECT_EQ(got.dw.scalar_type(), at::kFloat);
  EXPECT_LE(relative_error(got.dw, want.dw), 1e-5);
  EXPECT_LE(relative_error(got.db, want.db), 1e-5);
}

TEST(NormRows, WeightGradientsDoNotDependOnTheThreadCount) {
  at::manual_seed(7);
  const int64_t rows = 9 * kNormRows + 3, C = 64;
  const at::Tensor x = at::randn({rows, C}).to(at::kBFloat16);
  const at::Tensor w = at::randn({C}), b = at::randn({C});
  const at::Tensor probe = at::randn({rows, C}).to(at::kBFloat16);
  const int threads = at::get_num_threads();
  std::vector<Grads> runs;
  for (int n : {1, 2, 3}) {
    at::set_num_threads(n);
    runs.push_back(differentiate(x, w, b, probe, [&](auto& xg, auto& wg, auto& bg) {
      return norm_rows(xg, wg, bg, 1e-5, true);
    }));
  }
  at::set_num_threads(threads);
  for (size_t i = 1; i < runs.size(); ++i) {
    EXPECT_TRUE(at::equal(runs[i].y, runs[0].y)) << i;
    EXPECT_TRUE(at::equal(runs[i].dx, runs[0].dx)) << i;
    EXPECT_TRUE(at::equal(runs[i].dw, runs[0].dw)) << i;
    EXPECT_TRUE(at::equal(runs[i].db, runs[0].db)) << i;
  }
}

// Activations of any rank and layout: a (B, T, C) view whose rows are not contiguous gives the
// bits of its contiguous copy, gradients included.
TEST(NormRows, TakesStridedActivationsOfAnyRank) {
  at::manual_seed(11);
  const at::Tensor base = at::randn({5, 3, 40}).to(at::kBFloat16);
  const at::Tensor strided = base.transpose(0, 1);  // (3, 5, 40), rows 3 * 40 apart
  const at::Tensor w = at::randn({40}), b = at::randn({40});
  const at::Tensor probe = at::randn({3, 5, 40}).to(at::kBFloat16);
  auto norm = [&](auto& xg, auto& wg, auto& bg) { return norm_rows(xg, wg, bg, 1e-5, true); };
  const Grads got = differentiate(strided, w, b, probe, norm);
  const Grads want = differentiate(strided.contiguous(), w, b, probe, norm);
  EXPECT_EQ(got.y.sizes(), strided.sizes());
  EXPECT_TRUE(at::equal(got.y, want.y));
  EXPECT_TRUE(at::equal(got.dx, want.dx));
  EXPECT_TRUE(at::equal(got.dw, want.dw));
  EXPECT_TRUE(at::equal(got.db, want.db));
}

// Its backward runs on raw memory, so a backward that builds a graph is refused, not answered
// with a zero second derivative.
TEST(NormRows, RefusesADoubleBackward) {
  const at::Tensor x = at::randn({4, 8}).to(at::kBFloat16).requires_grad_(true);
  const at::Tensor y = norm_rows(x, at::ones({8}), at::Tensor(), 1e-5, false);
  EXPECT_THROW(y.sum().backward({}, /*retain_graph=*/true, /*create_graph=*/true), std::exception);
}

TEST(NormRows, RefusesAWeightOfAnotherWidth) {
  const at::Tensor x = at::randn({4, 8}).to(at::kBFloat16);
  try {
    norm_rows(x, at::ones({7}), at::Tensor(), 1e-5, false);
    FAIL() << "accepted a weight of 7 for rows of 8";
  } catch (const std::exception& e) {
    EXPECT_NE(std::string(e.what()).find("norm weight"), std::string::npos) << e.what();
  }
  EXPECT_FALSE(norm_rows_takes(at::randn({4, 8})));  // float32 stays with ATen
}

}  // namespace
}  // namespace strata
