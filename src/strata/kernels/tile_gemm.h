// Products of the small row-major tiles the attention kernel multiplies, on raw pointers and
// on the calling thread's terms: C = alpha op(A) op(B) + beta C, with no tensor built and no
// dispatcher crossed, so a 128 x 256 tile costs its arithmetic and not microseconds of setup.
//
// float goes to oneDNN's sgemm when libtorch brought libdnnl with it (Debian's libtorch does,
// for MKL-DNN): it picks its kernels from the CPU it runs on, where Debian's OpenBLAS 0.3.21
// may not know the CPU and fall back to SSE3 kernels (docs/performance.md, "The
// peers"). Inside a parallel region it runs on one thread. Without libdnnl, and for double,
// the product goes through ATen's mm on tensors wrapping the pointers.
//
// bf16 tiles (the attention kernel's where attention_tiles_in_bf16 holds) go to oneDNN's
// dnnl_gemm_bf16bf16f32: bf16 operands, float32 accumulation and result.
#pragma once
#include <c10/util/BFloat16.h>

#include <cstdint>
#include <optional>

namespace strata {

// A row-major matrix operand: element (i, j) at data[i * row_stride + j]. With transposed
// set the product uses its transpose.
template <typename scalar_t>
struct TileOperand {
  const scalar_t* data;
  int64_t row_stride;
  bool transposed = false;
};

enum class TileGemmBackend { onednn, aten };

// onednn when dnnl_sgemm is loaded in this process, else aten.
TileGemmBackend preferred_tile_gemm_backend();

// c (m x n, rows ldc apart) = alpha a b + beta c, with a (m x k) and b (k x n) after their
// transposes. beta 0 ignores c's old contents (NaN included).
void tile_gemm(int64_t m, int64_t n, int64_t k, float alpha, TileOperand<float> a,
               TileOperand<float> b, float beta, float* c, int64_t ldc,
               TileGemmBackend backend = preferred_tile_gemm_backend());
void tile_gemm(int64_t m, int64_t n, int64_t k, double alpha, TileOperand<double> a,
               TileOperand<double> b, double beta, double* c, int64_t ldc);
// bf16 operands, float32 c: needs dnnl_gemm_bf16bf16f32 (cpu.h's onednn_gemm_bf16).
void tile_gemm(int64_t m, int64_t n, int64_t k, float alpha, TileOperand<c10::BFloat16> a,
               TileOperand<c10::BFloat16> b, float beta, float* c, int64_t ldc);

// Whether bf16 attention multiplies its tiles as bf16 rather than as float32 copies. Only where
// dnnl_gemm_bf16bf16f32 is loaded; there, as the run's timed probe chose (use_attention_tiles,
// product_probe.h: it times the run's attention both ways), else by the default rule: as bf16
// where `bf16_products` (the route of the run's bf16 x.w^T products) multiplies bf16 operands as
// bf16, that is where oneDNN's bf16 GEMM beat its float32 one on the linear layers' shapes. The
// rule alone is not enough: on an AMX Xeon, oneDNN's bf16 GEMM takes the linear layers at 3x its
// float32 rate but attention's small tiles at about half of it. The argumentless form is the
// choice in force in this process, the same on every rank.
bool attention_tiles_in_bf16(bool bf16_products_in_float32);
bool attention_tiles_in_bf16();

// The run's choice for bf16 attention tiles (true: as bf16) replaces the default rule in this
// process until the next call; nullopt restores the rule. chosen_attention_tiles: the choice in
// force, nullopt under the rule.
void use_attention_tiles(std::optional<bool> in_bf16);
std::optional<bool> chosen_attention_tiles();

}  // namespace strata
