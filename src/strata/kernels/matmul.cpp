// The product routing (matmul.h): route_product decides, routed_product multiplies as decided.
#include "strata/kernels/matmul.h"

#include <atomic>

#include "strata/kernels/cpu.h"
#include "strata/kernels/skinny_gemm.h"
#include "strata/kernels/tile_gemm.h"

namespace strata {
namespace {

std::atomic<int64_t> taken[kProductPaths];

// 16-bit operands on CPU multiply in float32 and the product is rounded: a product of two
// 16-bit numbers is exact in float32, so this is what a bf16 GEMM accumulating in float32
// computes. Without AMX oneDNN's float32 sgemm runs about 3x faster than its bf16 GEMM (an
// AVX-512 BF16 Xeon, 2 threads: ~250 against ~80 GFLOP/s); with AMX its bf16 GEMM runs about
// 5x faster than float32 (the `matmul` record of docs/performance.md), so bf16 stays bf16
// there. libtorch 1.13 has no CPU float16 GEMM at all. A CUDA tensor multiplies natively.
bool multiplies_in_float32(const at::Tensor& a) {
  return a.is_cpu() && cpu_multiplies_in_float32(a.scalar_type());
}

// The path of the operands, read as float32 when `widened` (multiplied in float32).
ProductPath path_of(const at::Tensor& a, const at::Tensor& b, bool a_transposed, bool b_transposed,
                    bool widened) {
  const int64_t m = a.size(a_transposed ? 1 : 0), k = a.size(a_transposed ? 0 : 1);
  const auto is_float = [widened](const at::Tensor& x) {
    return widened || x.scalar_type() == at::kFloat;
  };
  // The raw-pointer kernels take float32 CPU matrices whose inner sizes agree; anything else
  // goes to ATen's matmul, which also names a mismatch.
  const bool raw =
      a.is_cpu() && b.is_cpu() && is_float(a) && is_float(b) && b.size(b_transposed ? 1 : 0) == k;
  if (raw && !a_transposed && b_transposed && m <= kSkinnyRows) return ProductPath::few_rows;
  const bool onednn = cpu_info().onednn_sgemm != nullptr;
  if (!raw || !onednn || a.numel() == 0 || b.numel() == 0) return ProductPath::aten;
  return ProductPath::onednn_tile;
}

at::Tensor multiply(const at::Tensor& a, const at::Tensor& b, bool a_transposed,
                    bool b_transposed) {
  const ProductPath path = path_of(a, b, a_transposed, b_transposed, false);
  taken[static_cast<int>(path)].fetch_add(1, std::memory_order_relaxed);
  if (path == ProductPath::aten) {
    return at::matmul(a_transposed ? a.t() : a, b_transposed ? b.t() : b);
  }
  const int64_t m = a.size(a_transposed ? 1 : 0), k = a.size(a_transposed ? 0 : 1);
  const int64_t n = b.size(b_transposed ? 0 : 1);
  const at::Tensor ac = a.contiguous(), bc = b.contiguous();
  at::Tensor out = at::empty({m, n}, ac.options());
  if (path == ProductPath::few_rows) {
    skinny_gemm_nt(m, n, k, ac.data_ptr<float>(), k, bc.data_ptr<float>(), k, out.data_ptr<float>(),
                   n);
    return out;
  }
  tile_gemm(m, n, k, 1.0f, TileOperand<float>{ac.data_ptr<float>(), ac.size(1), a_transposed},
            TileOperand<float>{bc.data_ptr<float>(), bc.size(1), b_transposed}, 0.0f,
            out.data_ptr<float>(), n, TileGemmBackend::onednn);
  return out;
}

}  // namespace

const char* product_path_name(ProductPath path) {
  switch (path) {
    case ProductPath::few_rows:
      return "few-row kernel";
    case ProductPath::onednn_tile:
      return "oneDNN sgemm";
    case ProductPath::aten:
      return "ATen matmul";
  }
  return "ATen matmul";
}

bool cpu_multiplies_in_float32(at::ScalarType dtype) {
  return dtype == at::kHalf || (dtype == at::kBFloat16 && !cpu_info().amx_bf16);
}

ProductRoute route_product(const at::Tensor& a, const at::Tensor& b, bool a_transposed,
                           bool b_transposed) {
  const bool widened = multiplies_in_float32(a);
  return {path_of(a, b, a_transposed, b_transposed, widened), widened};
}

at::Tensor routed_product(const at::Tensor& a, const at::Tensor& b, bool a_transposed,
                          bool b_transposed) {
  if (multiplies_in_float32(a)) {
    return multiply(a.to(at::kFloat), b.to(at::kFloat), a_transposed, b_transposed)
        .to(a.scalar_type());
  }
  return multiply(a, b, a_transposed, b_transposed);
}

int64_t product_count(ProductPath path) {
  return taken[static_cast<int>(path)].load(std::memory_order_relaxed);
}

}  // namespace strata
