// tile_gemm against ATen's mm in float64: every transpose of both operands, row strides wider
// than the rows, sizes of 1 and odd sizes, alpha, beta 0 over a NaN-filled product (ignored)
// and beta 1 (accumulated), on each backend (oneDNN skipped where libdnnl is not loaded); bf16
// operands (oneDNN's dnnl_gemm_bf16bf16f32) against the same product of their float64 values.
#include <gtest/gtest.h>

#include <ATen/ATen.h>

#include <limits>
#include <string>
#include <type_traits>

#include "strata/kernels/cpu.h"
#include "strata/kernels/matmul.h"
#include "strata/kernels/tile_gemm.h"

namespace strata {
namespace {

struct Case {
  int64_t m, n, k;
  bool transpose_a, transpose_b;
  float alpha, beta;
};

std::string describe(const Case& c) {
  return "m " + std::to_string(c.m) + " n " + std::to_string(c.n) + " k " + std::to_string(c.k) +
         (c.transpose_a ? " a^T" : " a") + (c.transpose_b ? " b^T" : " b") + " alpha " +
         std::to_string(c.alpha) + " beta " + std::to_string(c.beta);
}

// A row-major matrix of `rows` x `cols` stored with 3 spare columns per row.
at::Tensor padded(int64_t rows, int64_t cols, at::ScalarType dtype = at::kFloat) {
  return at::randn({rows, cols + 3}).to(dtype).narrow(1, 0, cols);
}

// operand_t float: the float32 tile_gemm on `backend`; c10::BFloat16: the bf16 one.
template <typename operand_t = float>
void expect_product(const Case& c, TileGemmBackend backend = TileGemmBackend::onednn) {
  at::manual_seed(c.m * 1000 + c.n * 10 + c.k);
  const at::ScalarType dtype = c10::CppTypeToScalarType<operand_t>::value;
  // Stored as the operand before its transpose.
  const at::Tensor a = c.transpose_a ? padded(c.k, c.m, dtype) : padded(c.m, c.k, dtype);
  const at::Tensor b = c.transpose_b ? padded(c.n, c.k, dtype) : padded(c.k, c.n, dtype);
  at::Tensor product = padded(c.m, c.n);
  if (c.beta == 0) product.fill_(std::numeric_limits<float>::quiet_NaN());
  const at::Tensor before = product.to(at::kDouble);
  const TileOperand<operand_t> a_operand{a.data_ptr<operand_t>(), a.stride(0), c.transpose_a},
      b_operand{b.data_ptr<operand_t>(), b.stride(0), c.transpose_b};
  if constexpr (std::is_same_v<operand_t, float>) {
    tile_gemm(c.m, c.n, c.k, c.alpha, a_operand, b_operand, c.beta, product.data_ptr<float>(),
              product.stride(0), backend);
  } else {
    tile_gemm(c.m, c.n, c.k, c.alpha, a_operand, b_operand, c.beta, product.data_ptr<float>(),
              product.stride(0));
  }
  const at::Tensor a_used = c.transpose_a ? a.t() : a, b_used = c.transpose_b ? b.t() : b;
  at::Tensor want = at::mm(a_used.to(at::kDouble), b_used.to(at::kDouble)) * c.alpha;
  if (c.beta != 0) want += before * c.beta;
  const double error = (product.to(at::kDouble) - want).abs().max().item<double>();
  EXPECT_LE(error, 1e-5 * (1 + want.abs().max().item<double>())) << describe(c);
}

std::vector<Case> cases() {
  std::vector<Case> all;
  for (bool transpose_a : {false, true}) {
    for (bool transpose_b : {false, true}) {
      for (auto [m, n, k] : {std::tuple<int64_t, int64_t, int64_t>{1, 1, 1},
                             {1, 7, 3},
                             {5, 1, 9},
                             {33, 17, 64},
                             {128, 256, 64},
                             {64, 64, 129}}) {
        all.push_back({m, n, k, transpose_a, transpose_b, 1.0f, 0.0f});
        all.push_back({m, n, k, transpose_a, transpose_b, 0.125f, 1.0f});
      }
    }
  }
  return all;
}

TEST(TileGemm, AtenBackendEqualsMatmul) {
  for (const Case& c : cases()) expect_product(c, TileGemmBackend::aten);
}

TEST(TileGemm, OnednnBackendEqualsMatmul) {
  if (preferred_tile_gemm_backend() != TileGemmBackend::onednn) {
    GTEST_SKIP() << "dnnl_sgemm is not loaded in this process";
  }
  for (const Case& c : cases()) expect_product(c, TileGemmBackend::onednn);
}

// The bf16 values' exact products, summed in float32: within float32 rounding of the float64
// product of the same values (so the operands are read as bf16, not as some other 16 bits).
TEST(TileGemm, Bf16OperandsEqualTheirFloat64Product) {
  if (cpu_info().onednn_gemm_bf16 == nullptr) {
    const c10::BFloat16 one(1.0f);
    float c = 0;
    EXPECT_THROW(tile_gemm(1, 1, 1, 1.0f, TileOperand<c10::BFloat16>{&one, 1},
                           TileOperand<c10::BFloat16>{&one, 1}, 0.0f, &c, 1),
                 c10::Error);
    return;
  }
  for (const Case& c : cases()) expect_product<c10::BFloat16>(c);
}

// Without a choice of its own, attention multiplies bf16 tiles as bf16 where the run's bf16
// products do (the probe chose oneDNN's bf16 GEMM over its float32 one) and oneDNN's bf16 GEMM
// is loaded; a choice (use_attention_tiles) overrides that rule, but never without the GEMM.
TEST(TileGemm, AttentionTilesFollowTheChoiceElseTheBf16ProductRoute) {
  const bool loaded = cpu_info().onednn_gemm_bf16 != nullptr;
  EXPECT_EQ(attention_tiles_in_bf16(/*bf16_products_in_float32=*/false), loaded);
  EXPECT_FALSE(attention_tiles_in_bf16(/*bf16_products_in_float32=*/true));
  const ProductClass bf16_forward{at::kBFloat16, false, true};
  use_product_routes({{bf16_forward, {ProductPath::aten, false}}});
  EXPECT_EQ(attention_tiles_in_bf16(), loaded);
  use_product_routes({{bf16_forward, {ProductPath::onednn_tile, true}}});
  EXPECT_FALSE(attention_tiles_in_bf16());
  use_attention_tiles(true);
  EXPECT_EQ(attention_tiles_in_bf16(), loaded);
  use_product_routes({{bf16_forward, {ProductPath::aten, false}}});
  use_attention_tiles(false);
  EXPECT_FALSE(attention_tiles_in_bf16());
  use_attention_tiles(std::nullopt);
  EXPECT_EQ(attention_tiles_in_bf16(), loaded);
  use_product_routes({});
}

TEST(TileGemm, DoubleEqualsMatmul) {
  at::manual_seed(2);
  const at::Tensor a = at::randn({6, 5}, at::kDouble), b = at::randn({7, 5}, at::kDouble);
  at::Tensor product = at::full({6, 7}, std::numeric_limits<double>::quiet_NaN(), at::kDouble);
  tile_gemm(6, 7, 5, 0.5, {a.data_ptr<double>(), 5}, {b.data_ptr<double>(), 5, true}, 0.0,
            product.data_ptr<double>(), 7);
  EXPECT_LE((product - at::mm(a, b.t()) * 0.5).abs().max().item<double>(), 1e-14);
}

}  // namespace
}  // namespace strata
