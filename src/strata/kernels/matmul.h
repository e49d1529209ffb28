// The one place a matrix product of the model picks its kernel (the linear layers' forward and
// backward, the matmul-peak probe): a float32 CPU product x W^T of at most kSkinnyRows rows
// (a serving step's decode rows, a small batch) goes to the few-row kernel (skinny_gemm.h),
// which streams the weight once for all rows and gives each row the same bits whatever other
// rows share the call; the other float32 CPU products go to oneDNN's sgemm through
// tile_gemm.h when libtorch brought oneDNN (cpu.h): it picks its kernels from the CPU, where
// Debian's OpenBLAS (behind ATen's matmul) may not know the CPU and run generic SSE3 kernels
// at a fifth of the speed (docs/performance.md). Other dtypes and devices, and a process
// without oneDNN, use ATen's matmul. fp16 on CPU, and bf16 on a CPU without AMX, are
// multiplied in float32 and rounded (cpu_multiplies_in_float32), so their few-row products
// take the few-row kernel too. Every product counts the path it took (product_count).
#pragma once
#include <ATen/ATen.h>

#include <cstdint>

namespace strata {

enum class ProductPath { few_rows, onednn_tile, aten };
constexpr int kProductPaths = 3;

const char* product_path_name(ProductPath path);

struct ProductRoute {
  ProductPath path = ProductPath::aten;
  bool in_float32 = false;  // 16-bit operands multiplied in float32, the result rounded back
};

// Whether CPU products of this dtype run in float32 and are rounded: float16 always, bfloat16
// where the CPU lacks AMX-BF16 (with it, ATen's matmul runs oneDNN's AMX kernels). Either way
// the products accumulate in float32 and round once; only the summation order differs.
bool cpu_multiplies_in_float32(at::ScalarType dtype);

// a (M, K) @ op(b), op(b) (K, N): b is (N, K) when b_transposed, else (K, N); a is given as
// (K, M) when a_transposed. Row-major matrices; the result is (M, N) of a's dtype.
at::Tensor routed_product(const at::Tensor& a, const at::Tensor& b, bool a_transposed,
                          bool b_transposed);

// The path routed_product takes for these operands (nothing is multiplied).
ProductRoute route_product(const at::Tensor& a, const at::Tensor& b, bool a_transposed,
                           bool b_transposed);

// How many products took `path` in this process so far (all threads).
int64_t product_count(ProductPath path);

}  // namespace strata
