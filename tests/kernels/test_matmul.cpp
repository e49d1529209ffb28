// The product routing (kernels/matmul.h): which kernel each product takes (a few float32 or
// 16-bit rows: the few-row kernel; more: its class's route, the default until a probe chose;
// other devices' and mismatched operands: ATen), that a chosen route is followed and counted,
// that every path multiplies correctly (against float64), and that a product added into a
// tensor lands in its memory.
#include <gtest/gtest.h>

#include <ATen/ATen.h>

#include "strata/kernels/cpu.h"
#include "strata/kernels/matmul.h"
#include "strata/kernels/skinny_gemm.h"

namespace strata {
namespace {

ProductPath blocked_path() {
  return cpu_info().onednn_sgemm != nullptr ? ProductPath::onednn_tile : ProductPath::aten;
}

// The routes chosen in one scope; the defaults again after it.
class ChosenRoutes {
 public:
  explicit ChosenRoutes(const std::vector<std::pair<ProductClass, ProductRoute>>& routes) {
    use_product_routes(routes);
  }
  ~ChosenRoutes() { use_product_routes({}); }
};

TEST(Matmul, RoutesByRowsDtypeAndShape) {
  const at::Tensor weight = at::empty({256, 64});
  const at::Tensor few = at::empty({kSkinnyRows, 64}), many = at::empty({kSkinnyRows + 1, 64});
  EXPECT_EQ(route_product(few, weight, false, true).path, ProductPath::few_rows);
  EXPECT_FALSE(route_product(few, weight, false, true).in_float32);
  EXPECT_EQ(route_product(many, weight, false, true).path, blocked_path());
  // The backward's products: dx = dy W (not transposed) and dW = dy^T x.
  EXPECT_EQ(route_product(at::empty({4, 256}), weight, false, false).path, blocked_path());
  EXPECT_EQ(route_product(at::empty({4, 256}), at::empty({4, 64}), true, false).path,
            blocked_path());

  // 16-bit rows: widened in the kernel, but for bf16 on a CPU with AVX512-BF16's dot product.
  for (at::ScalarType dtype : {at::kBFloat16, at::kHalf}) {
    const ProductRoute route = route_product(few.to(dtype), weight.to(dtype), false, true);
    const bool widened = dtype == at::kHalf || !cpu_info().bf16_dot;
    EXPECT_EQ(route, (ProductRoute{ProductPath::few_rows, widened})) << dtype;
  }
  const ProductRoute bf16 =
      route_product(many.to(at::kBFloat16), weight.to(at::kBFloat16), false, true);
  EXPECT_EQ(bf16, default_route({at::kBFloat16, false, true}));
  EXPECT_EQ(bf16.in_float32, !cpu_info().amx_bf16);
  EXPECT_TRUE(route_product(many.to(at::kHalf), weight.to(at::kHalf), false, true).in_float32);
  EXPECT_EQ(route_product(few.to(at::kDouble), weight.to(at::kDouble), false, true).path,
            ProductPath::aten);
  EXPECT_EQ(route_product(few, at::empty({256, 63}), false, true).path, ProductPath::aten)
      << "inner sizes that disagree go to ATen, which names them";
  EXPECT_EQ(route_product(few, weight.to(at::kBFloat16), false, true).path, ProductPath::aten)
      << "mixed dtypes go to ATen";
}

// Each class has its candidates, the default first; a chosen route replaces the default of its
// class alone (the few-row kernel keeps its rows), and an empty choice restores the defaults.
TEST(Matmul, ChosenRoutesReplaceTheirClassDefault) {
  for (at::ScalarType dtype : {at::kFloat, at::kBFloat16, at::kHalf, at::kDouble}) {
    const std::vector<ProductRoute> candidates = candidate_routes({dtype, false, true});
    ASSERT_FALSE(candidates.empty());
    EXPECT_EQ(candidates.front(), default_route({dtype, false, true}));
  }
  EXPECT_EQ(candidate_routes({at::kBFloat16, false, true}).size(), 2u);
  EXPECT_EQ(candidate_routes({at::kHalf, false, true}).size(), 1u);

  const at::Tensor weight = at::randn({96, 80});
  const at::Tensor many = at::randn({kSkinnyRows + 5, 80}), few = at::randn({3, 80});
  const ProductRoute aten{ProductPath::aten, false};
  {
    const ChosenRoutes chosen({{{at::kFloat, false, true}, aten}});
    EXPECT_EQ(class_route({at::kFloat, false, true}), aten);
    EXPECT_EQ(route_product(many, weight, false, true), aten);
    EXPECT_EQ(route_product(few, weight, false, true).path, ProductPath::few_rows);
    EXPECT_EQ(route_product(at::empty({4, 96}), weight, false, false).path, blocked_path())
        << "the input gradient's class keeps its default";
    const int64_t before = product_count(ProductPath::aten);
    const at::Tensor got = routed_product(many, weight, false, true);
    EXPECT_EQ(product_count(ProductPath::aten), before + 1);
    EXPECT_TRUE(at::allclose(got, at::mm(many, weight.t()), 1e-4, 1e-4));
  }
  EXPECT_EQ(route_product(many, weight, false, true).path, blocked_path());
  const ProductRoute native{ProductPath::aten, false};
  const ChosenRoutes chosen({{{at::kBFloat16, true, false}, native}});
  EXPECT_EQ(route_product(at::empty({4, 96}, at::kBFloat16), at::empty({4, 80}, at::kBFloat16),
                          true, false),
            native);
}

// Every candidate of every class multiplies correctly (what the probe times is a product).
TEST(Matmul, EveryCandidateMultiplies) {
  at::manual_seed(9);
  for (at::ScalarType dtype : {at::kFloat, at::kBFloat16, at::kHalf}) {
    for (const bool a_transposed : {false, true}) {
      for (const bool b_transposed : {false, true}) {
        const at::Tensor a =
            at::randn(a_transposed ? at::IntArrayRef{40, 60} : at::IntArrayRef{60, 40});
        const at::Tensor b =
            at::randn(b_transposed ? at::IntArrayRef{50, 40} : at::IntArrayRef{40, 50});
        const at::Tensor ad = a.to(dtype).to(at::kDouble), bd = b.to(dtype).to(at::kDouble);
        const at::Tensor want = at::mm(a_transposed ? ad.t() : ad, b_transposed ? bd.t() : bd);
        for (const ProductRoute& route : candidate_routes({dtype, a_transposed, b_transposed})) {
          const at::Tensor got =
              product_along(route, a.to(dtype), b.to(dtype), a_transposed, b_transposed);
          EXPECT_EQ(got.scalar_type(), dtype);
          EXPECT_LE((got.to(at::kDouble) - want).abs().max().item<double>(),
                    dtype == at::kFloat ? 1e-4 : 1e-2 * (1 + want.abs().max().item<double>()))
              << class_name({dtype, a_transposed, b_transposed}) << " " << route_name(route);
        }
      }
    }
  }
}

TEST(Matmul, EveryPathMultipliesAndCountsItself) {
  at::manual_seed(5);
  const at::Tensor weight = at::randn({96, 80});
  for (int64_t rows : {int64_t{3}, kSkinnyRows + 5}) {
    for (at::ScalarType dtype : {at::kFloat, at::kBFloat16, at::kDouble}) {
      const at::Tensor x = at::randn({rows, 80}).to(dtype), w = weight.to(dtype);
      const ProductPath path = route_product(x, w, false, true).path;
      const int64_t before = product_count(path);
      const at::Tensor got = routed_product(x, w, false, true);
      EXPECT_EQ(product_count(path), before + 1) << product_path_name(path);
      EXPECT_EQ(got.scalar_type(), dtype);
      const at::Tensor want = at::mm(x.to(at::kDouble), w.to(at::kDouble).t());
      const double tolerance =
          dtype == at::kBFloat16 ? 1e-2 * (1 + want.abs().max().item<double>()) : 1e-4;
      EXPECT_LE((got.to(at::kDouble) - want).abs().max().item<double>(), tolerance)
          << rows << " rows of " << dtype << " by " << product_path_name(path);
    }
  }
}

// out += a^T b, the deferred weight gradient's accumulation, along every route of its class:
// in out's own memory (float32, or the operands' bf16), counted once, equal to the sum in
// float64 within the operands' precision.
TEST(Matmul, ProductAddAccumulatesInPlaceOnEveryRoute) {
  at::manual_seed(13);
  const at::Tensor dy = at::randn({60, 50}), x = at::randn({60, 40}), start = at::randn({50, 40});
  for (at::ScalarType dtype : {at::kFloat, at::kBFloat16}) {
    const ProductClass weight_grad{dtype, true, false};
    const at::Tensor a = dy.to(dtype), b = x.to(dtype);
    const at::Tensor want =
        start.to(at::kDouble) + at::mm(a.to(at::kDouble).t(), b.to(at::kDouble));
    for (const ProductRoute& route : candidate_routes(weight_grad)) {
      ChosenRoutes chosen({{weight_grad, route}});
      for (at::ScalarType out_dtype : {at::kFloat, dtype}) {
        at::Tensor out = start.to(out_dtype).clone();
        const void* memory = out.data_ptr();
        const int64_t before = product_count(route.path);
        routed_product_add(out, a, b, true, false);
        const std::string what =
            class_name(weight_grad) + " " + route_name(route) + " into " + dtype_name(out_dtype);
        EXPECT_EQ(out.data_ptr(), memory) << what;
        EXPECT_EQ(product_count(route.path), before + 1) << what;
        EXPECT_LE((out.to(at::kDouble) - want).abs().max().item<double>(),
                  dtype == at::kFloat ? 1e-4 : 1e-2 * (1 + want.abs().max().item<double>()))
            << what;
      }
    }
  }
}

}  // namespace
}  // namespace strata
