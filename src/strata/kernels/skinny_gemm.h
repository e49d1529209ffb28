// Products of a few rows by a weight matrix, out = x w^T, as a linear layer computes them when
// a serving step decodes a few sequences (one row each). oneDNN's sgemm falls off a cliff at
// 16 rows on the CPUs measured here: it starts packing the whole weight matrix on every call
// (a 1024 -> 256 product of 16 rows took 207 us against 21 us for 8; docs/serving.md). This
// kernel reads each weight row once per call for all the rows of x, which stay in the caches.
//
// Each output element is one dot product: kLanes partial sums over k, in order, then summed
// by a fixed tree. Its value is the same whatever m is, whichever rows share the call and
// however the columns are split over threads: a row's result does not depend on the batch it
// was computed in (on one host and vector path: the path, cpu.h, decides whether the
// multiply-adds are fused).
#pragma once
#include <c10/util/BFloat16.h>

#include <cstdint>

namespace strata {

// The most rows skinny_gemm_nt takes over from the general product (measured: at 32 rows it
// still ran 1.6-3x faster than oneDNN's sgemm at the serving model's shapes on an Intel Xeon,
// level at 64 rows; on an AMD EPYC it took 0.29-0.76 of oneDNN's time at 48 rows and 0.48-0.72
// at 64).
constexpr int64_t kSkinnyRows = 48;

// out (m x n, rows ldo apart) = x (m x k, rows ldx apart) times w (n x k, rows ldw apart)
// transposed: out[i][j] = sum over l of x[i][l] w[j][l]. Splits the columns over ATen's threads
// when the product is large enough to pay for them (or runs on the calling thread inside a
// parallel region). Any m works; m above kSkinnyRows is slower than a blocked GEMM.
void skinny_gemm_nt(int64_t m, int64_t n, int64_t k, const float* x, int64_t ldx, const float* w,
                    int64_t ldw, float* out, int64_t ldo);
// The same product of bf16 operands, each widened to float32 as it is loaded: out holds the bits
// the float32 product of x's and w's float32 copies gives, read from half the bytes (a decode
// step streams its weights once: half the time where memory bounds it).
void skinny_gemm_nt(int64_t m, int64_t n, int64_t k, const c10::BFloat16* x, int64_t ldx,
                    const c10::BFloat16* w, int64_t ldw, float* out, int64_t ldo);

}  // namespace strata
