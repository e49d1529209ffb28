// The elementwise work of the attention kernel, one row of a score tile at a time: each
// function makes one or two passes over the row while it sits in L1, where ATen would make
// one pass (and one dispatch) per operation. A row holds `cols` scores of which the first
// `seen` are keys the query may attend to; the rest are future keys and come out as 0.
//
// float rows run on 16 lanes with an exp accurate to about 1e-7 relative (Cephes' expf
// polynomial), compiled for AVX-512, AVX2 and the generic baseline, run on the path cpu.h
// chose (vector_path()).
// double rows use std::exp, so the float64 path stays exact enough to check the float one.
#pragma once
#include <c10/util/BFloat16.h>
#include <c10/util/Half.h>
#include <cstdint>

namespace strata {

// Forward, online softmax: with the row's running maximum and sum over the keys of earlier
// tiles, takes the scaled scores of this tile, overwrites them with exp(score - new maximum)
// (0 for the unseen), updates maximum and sum, and returns exp(old maximum - new maximum),
// the factor by which the row's output accumulated so far must be scaled. With seen 0 the
// row becomes 0 and the factor is 1.
float online_softmax_row(float* scores, int64_t seen, int64_t cols, float& running_max,
                         float& running_sum);
double online_softmax_row(double* scores, int64_t seen, int64_t cols, double& running_max,
                          double& running_sum);

// Backward: overwrites the scaled scores with the probabilities exp(score - lse); a row with
// lse -inf saw no key anywhere and gets 0, like the unseen keys.
void probabilities_row(float* scores, int64_t seen, int64_t cols, float lse);
void probabilities_row(double* scores, int64_t seen, int64_t cols, double lse);

// Backward: the gradient of the scaled scores, probabilities * (dprobabilities - delta), in
// place of dprobabilities.
void score_gradient_row(const float* probabilities, float* dprobabilities, int64_t cols,
                        float delta);
void score_gradient_row(const double* probabilities, double* dprobabilities, int64_t cols,
                        double delta);

// Decode (decode_attention.h): one query row's scores against `count` key rows gathered from
// memory, row j at rows + slots[j] * row_stride (D values each): scores[j] = query . key_j.
void gathered_scores_row(const float* query, const float* rows, int64_t row_stride,
                         const int64_t* slots, int64_t count, int64_t D, float* scores);
// And the weighted sum of the gathered value rows: out = sum_j weights[j] value_j (D values).
void gathered_weighted_sum(const float* weights, const float* rows, int64_t row_stride,
                           const int64_t* slots, int64_t count, int64_t D, float* out);
// The same over a bf16 cache, each key and value read as stored and widened in the registers:
// the sums of their float32 copies.
void gathered_scores_row(const float* query, const c10::BFloat16* rows, int64_t row_stride,
                         const int64_t* slots, int64_t count, int64_t D, float* scores);
void gathered_weighted_sum(const float* weights, const c10::BFloat16* rows, int64_t row_stride,
                           const int64_t* slots, int64_t count, int64_t D, float* out);
// A bf16 query against a bf16 cache on a CPU with AVX512-BF16 (CpuInfo::bf16_dot; nowhere
// else), for D up to kMaxDotScoreHead: scores[j] = scale (query . key_j), both read as stored
// and multiplied in pairs by the dot product, as the few-row kernel multiplies them.
constexpr int64_t kMaxDotScoreHead = 256;
void gathered_scores_row(const c10::BFloat16* query, const c10::BFloat16* rows, int64_t row_stride,
                         const int64_t* slots, int64_t count, int64_t D, float scale,
                         float* scores);

// n float32 values rounded to bf16 (nearest even), as c10::BFloat16's conversion rounds them:
// the probabilities and score gradients of a tile that the attention kernel multiplies as
// bf16 (tile_gemm.h).
void round_to_bf16(const float* values, c10::BFloat16* rounded, int64_t n);

// n bf16 values as float32 (exact): the attention kernel's q, k, v and dout tiles where it
// multiplies bf16 inputs as float32 (tile_gemm.h).
void widen_bf16(const c10::BFloat16* values, float* widened, int64_t n);

// n float16 values as float32 (exact), and n float32 values rounded to float16 (nearest even,
// as c10::Half rounds): the attention kernel's float16 tiles and results.
void widen_half(const c10::Half* values, float* widened, int64_t n);
void round_to_half(const float* values, c10::Half* rounded, int64_t n);

// exp on each of n values in place, as the float rows compute it (for tests).
void exp_in_place(float* values, int64_t n);

}  // namespace strata
