// Tile products for the attention kernel: oneDNN's row-major sgemm found at run time, or
// ATen's mm on tensors that wrap the caller's memory.
#include "strata/kernels/tile_gemm.h"

#include <ATen/ATen.h>

#include <atomic>

#include "strata/core/error.h"
#include "strata/kernels/cpu.h"
#include "strata/kernels/matmul.h"

namespace strata {
namespace {

// The run's choice for bf16 attention tiles: -1 none (the default rule), 0 float32 copies, 1 bf16.
std::atomic<int> attention_tiles_choice{-1};

// dnnl_sgemm and dnnl_gemm_bf16bf16f32 from oneDNN's C API (dnnl.h): row-major, 'N' or 'T' per
// operand, float32 c, 0 on success; operand_t float or bf16 (passed as its 16 bits, which
// c10::BFloat16 is). Found by cpu.h: libdnnl comes in as a dependency of libtorch_cpu, which
// does not re-export it, and a libtorch built without MKL-DNN has none.
template <typename operand_t>
using OnednnGemm = int (*)(char transa, char transb, int64_t m, int64_t n, int64_t k, float alpha,
                           const operand_t* a, int64_t lda, const operand_t* b, int64_t ldb,
                           float beta, float* c, int64_t ldc);

// c = alpha a b + beta c through the oneDNN entry point `entry` (named `name`, null when absent).
template <typename operand_t>
void onednn_gemm(void* entry, const char* name, int64_t m, int64_t n, int64_t k, float alpha,
                 TileOperand<operand_t> a, TileOperand<operand_t> b, float beta, float* c,
                 int64_t ldc) {
  STRATA_CHECK(entry != nullptr, "tile_gemm: ", name, " (oneDNN) is not loaded in this process");
  const int status = reinterpret_cast<OnednnGemm<operand_t>>(entry)(
      a.transposed ? 'T' : 'N', b.transposed ? 'T' : 'N', m, n, k, alpha, a.data, a.row_stride,
      b.data, b.row_stride, beta, c, ldc);
  STRATA_CHECK(status == 0, name, " returned status ", status, " for m ", m, ", n ", n, ", k ", k,
               ", lda ", a.row_stride, ", ldb ", b.row_stride, ", ldc ", ldc);
}

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
  return cpu_info().onednn_sgemm != nullptr ? TileGemmBackend::onednn : TileGemmBackend::aten;
}

void tile_gemm(int64_t m, int64_t n, int64_t k, float alpha, TileOperand<float> a,
               TileOperand<float> b, float beta, float* c, int64_t ldc, TileGemmBackend backend) {
  if (m == 0 || n == 0) return;
  if (backend == TileGemmBackend::aten) return aten_gemm(m, n, k, alpha, a, b, beta, c, ldc);
  onednn_gemm(cpu_info().onednn_sgemm, "dnnl_sgemm", m, n, k, alpha, a, b, beta, c, ldc);
}

void tile_gemm(int64_t m, int64_t n, int64_t k, float alpha, TileOperand<c10::BFloat16> a,
               TileOperand<c10::BFloat16> b, float beta, float* c, int64_t ldc) {
  if (m == 0 || n == 0) return;
  onednn_gemm(cpu_info().onednn_gemm_bf16, "dnnl_gemm_bf16bf16f32", m, n, k, alpha, a, b, beta, c,
              ldc);
}

bool attention_tiles_in_bf16(bool bf16_products_in_float32) {
  return cpu_info().onednn_gemm_bf16 != nullptr && !bf16_products_in_float32;
}

bool attention_tiles_in_bf16() {
  const std::optional<bool> chosen = chosen_attention_tiles();
  if (chosen) return *chosen && cpu_info().onednn_gemm_bf16 != nullptr;
  return attention_tiles_in_bf16(class_route({at::kBFloat16, false, true}).in_float32);
}

void use_attention_tiles(std::optional<bool> in_bf16) {
  attention_tiles_choice = in_bf16 ? static_cast<int>(*in_bf16) : -1;
}

std::optional<bool> chosen_attention_tiles() {
  const int choice = attention_tiles_choice;
  if (choice < 0) return std::nullopt;
  return choice == 1;
}

void tile_gemm(int64_t m, int64_t n, int64_t k, double alpha, TileOperand<double> a,
               TileOperand<double> b, double beta, double* c, int64_t ldc) {
  if (m == 0 || n == 0) return;
  aten_gemm(m, n, k, alpha, a, b, beta, c, ldc);
}

}  // namespace strata
