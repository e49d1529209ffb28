// The product routing (kernels/matmul.h): which kernel each product takes (a few float32 rows:
// the few-row kernel; more: oneDNN's sgemm where it is loaded, else ATen; bf16 in float32
// where the CPU lacks AMX; other devices' and mismatched operands: ATen), that each product
// counts its path, and that every path multiplies correctly (against float64).
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

  const ProductRoute bf16 =
      route_product(few.to(at::kBFloat16), weight.to(at::kBFloat16), false, true);
  EXPECT_EQ(bf16.in_float32, !cpu_info().amx_bf16);
  EXPECT_EQ(bf16.path, cpu_info().amx_bf16 ? ProductPath::aten : ProductPath::few_rows);
  EXPECT_TRUE(route_product(few.to(at::kHalf), weight.to(at::kHalf), false, true).in_float32);
  EXPECT_EQ(route_product(few.to(at::kDouble), weight.to(at::kDouble), false, true).path,
            ProductPath::aten);
  EXPECT_EQ(route_product(few, at::empty({256, 63}), false, true).path, ProductPath::aten)
      << "inner sizes that disagree go to ATen, which names them";
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

}  // namespace
}  // namespace strata
