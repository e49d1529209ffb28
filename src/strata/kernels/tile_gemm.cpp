// Tile products for the attention kernel: oneDNN's row-major sgemm found at run time, or
// ATen's mm on tensors that wrap the caller's memory.
#include "strata/kernels/tile_gemm.h"

#include <ATen/ATen.h>

#include "strata/core/error.h"
#include "strata/kernels/cpu.h"
#include "strata/kernels/matmul.h"

namespace strata {
namespace {

// dnnl_sgemm from oneDNN's C API (dnnl.h): row-major, 'N' or 'T' per operand, 0 on success.
// Found by cpu.h: libdnnl comes in as a dependency of libtorch_cpu, which does not re-export
// it, and a libtorch built without MKL-DNN has none.
using OnednnSgemm = int (*)(char transa, char transb, int64_t m, int64_t n, int64_t k, float alpha,
                            const float* a, int64_t lda, const float* b, int64_t ldb, float beta,
                            float* c, int64_t ldc);

OnednnSgemm onednn_sgemm() { return reinterpret_cast<OnednnSgemm>(cpu_info().onednn_sgemm); }

// dnnl_gemm_bf16bf16f32: the same convention, bf16 operands (as their 16 bits), float32 c.
using OnednnGemmBf16 = int (*)(char transa, char transb, int64_t m, int64_t n, int64_t k,
                               float alpha, const uint16_t* a, int64_t lda, const uint16_t* b,
                               int64_t ldb, float beta, float* c, int64_t ldc);

// The operand as an ATen tensor of its shape after the transpose, sharing its memory.
template <typename scalar_t>
at::Tensor wrap(TileOperand<scalar_t> x, int64_t rows, int64_t cols) {
  const auto options = at::TensorOptions().dtype(c10::CppTypeToScalarType<scalar_t>::value);
  auto* data = const_cast<scalar_t*>(x.data);
  if (!x.transposed) return at::from_blob(data, {rows, cols}, {x.row_stride, 1}, options);
  return at::from_blob(data, {cols, rows}, {x.row_stride, 1}, options).t();
}

template <typename scalar_t>
void aten_gemm(int64_t m, int64_t n, int64_t k, scalar_t alpha, TileOperand<scalar_t> a,
               TileOperand<scalar_t> b, scalar_t beta, scalar_t* c, int64_t ldc) {
  const auto options = at::TensorOptions().dtype(c10::CppTypeToScalarType<scalar_t>::value);
  at::Tensor product = at::from_blob(c, {m, n}, {ldc, 1}, options);
  product.addmm_(wrap(a, m, k), wrap(b, k, n), beta, alpha);
}

}  // namespace

TileGemmBackend preferred_tile_gemm_backend() {
  return onednn_sgemm() ? TileGemmBackend::onednn : TileGemmBackend::aten;
}

void tile_gemm(int64_t m, int64_t n, int64_t k, float alpha, TileOperand<float> a,
               TileOperand<float> b, float beta, float* c, int64_t ldc, TileGemmBackend backend) {
  if (m == 0 || n == 0) return;
  if (backend == TileGemmBackend::aten) return aten_gemm(m, n, k, alpha, a, b, beta, c, ldc);
  const OnednnSgemm sgemm = onednn_sgemm();
  STRATA_CHECK(sgemm != nullptr, "tile_gemm: the oneDNN backend was asked for without libdnnl");
  const int status = sgemm(a.transposed ? 'T' : 'N', b.transposed ? 'T' : 'N', m, n, k, alpha,
                           a.data, a.row_stride, b.data, b.row_stride, beta, c, ldc);
  STRATA_CHECK(status == 0, "dnnl_sgemm returned status ", status, " for m ", m, ", n ", n, ", k ",
               k, ", lda ", a.row_stride, ", ldb ", b.row_stride, ", ldc ", ldc);
}

void tile_gemm(int64_t m, int64_t n, int64_t k, float alpha, TileOperand<c10::BFloat16> a,
               TileOperand<c10::BFloat16> b, float beta, float* c, int64_t ldc) {
  if (m == 0 || n == 0) return;
  const auto gemm = reinterpret_cast<OnednnGemmBf16>(cpu_info().onednn_gemm_bf16);
  STRATA_CHECK(gemm != nullptr, "tile_gemm: bf16 tiles need dnnl_gemm_bf16bf16f32 (oneDNN)");
  const int status = gemm(a.transposed ? 'T' : 'N', b.transposed ? 'T' : 'N', m, n, k, alpha,
                          reinterpret_cast<const uint16_t*>(a.data), a.row_stride,
                          reinterpret_cast<const uint16_t*>(b.data), b.row_stride, beta, c, ldc);
  STRATA_CHECK(status == 0, "dnnl_gemm_bf16bf16f32 returned status ", status, " for m ", m, ", n ",
               n, ", k ", k, ", lda ", a.row_stride, ", ldb ", b.row_stride, ", ldc ", ldc);
}

bool attention_tiles_in_bf16(bool bf16_products_in_float32) {
  return cpu_info().onednn_gemm_bf16 != nullptr && !bf16_products_in_float32;
}

bool attention_tiles_in_bf16() {
  return attention_tiles_in_bf16(class_route({at::kBFloat16, false, true}).in_float32);
}

void tile_gemm(int64_t m, int64_t n, int64_t k, double alpha, TileOperand<double> a,
               TileOperand<double> b, double beta, double* c, int64_t ldc) {
  if (m == 0 || n == 0) return;
  aten_gemm(m, n, k, alpha, a, b, beta, c, ldc);
}

}  // namespace strata
