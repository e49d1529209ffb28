// Row operations on attention score tiles. The float versions work on 16-lane vectors
// (vector_lanes.h), each function built for AVX-512, AVX2 and the generic baseline and run on
// the path cpu.h chose.
#include "strata/kernels/score_rows.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>

#if defined(STRATA_VECTOR_TARGETS)
#include <immintrin.h>
#endif

#include "strata/core/error.h"
#include "strata/kernels/vector_lanes.h"

namespace strata {
namespace {

using namespace lanes;

// values[i] = exp(values[i] - shift) for i < n; returns their sum.
[[gnu::always_inline]] inline float exp_shifted_and_sum(float* values, int64_t n, float shift) {
  Floats sums{};
  int64_t i = 0;
  for (; i + kLanes <= n; i += kLanes) {
    Floats x;
    load(x, values + i, kLanes, 0);
    x -= shift;
    exp_lanes(x);
    std::memcpy(values + i, &x, sizeof x);
    sums += x;
  }
  if (i < n) {  // the tail, padded with -inf, which exp turns into 0
    Floats x;
    load(x, values + i, n - i, kNegativeInfinity);
    x -= shift;
    exp_lanes(x);
    std::memcpy(values + i, &x, (n - i) * sizeof(float));
    sums += x;
  }
  float sum = 0;
  for (int64_t lane = 0; lane < kLanes; ++lane) sum += sums[lane];
  return sum;
}

[[gnu::always_inline]] inline float max_of(const float* values, int64_t n) {
  Floats maxima = Floats{} + kNegativeInfinity;
  int64_t i = 0;
  for (; i + kLanes <= n; i += kLanes) {
    Floats x;
    load(x, values + i, kLanes, 0);
    maxima = x > maxima ? x : maxima;
  }
  float maximum = kNegativeInfinity;
  for (int64_t lane = 0; lane < kLanes; ++lane) maximum = std::max(maximum, maxima[lane]);
  for (; i < n; ++i) maximum = std::max(maximum, values[i]);
  return maximum;
}

[[gnu::always_inline]] inline float online_softmax_row_body(float* scores, int64_t seen,
                                                            int64_t cols, float& running_max,
                                                            float& running_sum) {
  std::fill(scores + seen, scores + cols, 0.0f);
  if (seen == 0) return 1.0f;
  const float new_max = std::max(running_max, max_of(scores, seen));
  const float sum = exp_shifted_and_sum(scores, seen, new_max);
  const float rescale = std::exp(running_max - new_max);
  running_sum = running_sum * rescale + sum;
  running_max = new_max;
  return rescale;
}

[[gnu::always_inline]] inline void probabilities_row_body(float* scores, int64_t seen, int64_t cols,
                                                          float lse) {
  if (lse == kNegativeInfinity) seen = 0;
  std::fill(scores + seen, scores + cols, 0.0f);
  exp_shifted_and_sum(scores, seen, lse);
}

[[gnu::always_inline]] inline void score_gradient_row_body(const float* probabilities,
                                                           float* dprobabilities, int64_t cols,
                                                           float delta) {
  for (int64_t i = 0; i < cols; ++i) {
    dprobabilities[i] = probabilities[i] * (dprobabilities[i] - delta);
  }
}

// Gathered rows of float32 or bf16 (lanes::load widens bf16 in the registers); one variant set
// per dtype below.
template <typename T>
[[gnu::always_inline]] inline void gathered_scores_row_body(const float* query, const T* rows,
                                                            int64_t row_stride,
                                                            const int64_t* slots, int64_t count,
                                                            int64_t D, float* scores) {
  for (int64_t j = 0; j < count; ++j) {
    const T* key = rows + slots[j] * row_stride;
    Floats sums{};
    int64_t d = 0;
    for (; d + kLanes <= D; d += kLanes) {
      Floats q, k;
      load(q, query + d, kLanes, 0);
      load(k, key + d, kLanes);
      sums += q * k;
    }
    if (d < D) {
      Floats q, k;
      load(q, query + d, D - d, 0);
      load(k, key + d, D - d);
      sums += q * k;
    }
    float sum = 0;
    for (int64_t lane = 0; lane < kLanes; ++lane) sum += sums[lane];
    scores[j] = sum;
  }
}

// Whole pairs are loads of a constant size (a variable-sized copy would be a call); the query's
// pairs are loaded once per row.
constexpr int64_t kMaxDotPairs = kMaxDotScoreHead / lanes::kPairs;
[[gnu::always_inline]] inline void gathered_dot_scores_row_body(
    const c10::BFloat16* query, const c10::BFloat16* rows, int64_t row_stride, const int64_t* slots,
    int64_t count, int64_t D, float scale, float* scores) {
  using lanes::kPairs;
  const int64_t whole = D / kPairs, tail = D % kPairs;
  STRATA_CHECK(D <= kMaxDotScoreHead, "gathered_scores_row: head size ", D, " above ",
               kMaxDotScoreHead);
  lanes::Pairs q[kMaxDotPairs];
  for (int64_t p = 0; p < whole; ++p) lanes::load(q[p], query + p * kPairs, kPairs);
  if (tail > 0) lanes::load(q[whole], query + whole * kPairs, tail);
  for (int64_t j = 0; j < count; ++j) {
    const c10::BFloat16* key = rows + slots[j] * row_stride;
    Floats sums{};
    for (int64_t p = 0; p < whole; ++p) {
      lanes::Pairs k;
      lanes::load(k, key + p * kPairs, kPairs);
      lanes::dot_pairs(sums, q[p], k);
    }
    if (tail > 0) {
      lanes::Pairs k;
      lanes::load(k, key + whole * kPairs, tail);
      lanes::dot_pairs(sums, q[whole], k);
    }
    float sum = 0;
    for (int64_t lane = 0; lane < kLanes; ++lane) sum += sums[lane];
    scores[j] = sum * scale;
  }
}

template <typename T>
[[gnu::always_inline]] inline void gathered_weighted_sum_body(const float* weights, const T* rows,
                                                              int64_t row_stride,
                                                              const int64_t* slots, int64_t count,
                                                              int64_t D, float* out) {
  int64_t d0 = 0;
  for (; d0 + kLanes <= D; d0 += kLanes) {  // whole vectors: loads of a constant size
    Floats sums{};
    for (int64_t j = 0; j < count; ++j) {
      Floats v;
      load(v, rows + slots[j] * row_stride + d0, kLanes);
      sums += weights[j] * v;
    }
    std::memcpy(out + d0, &sums, sizeof sums);
  }
  for (; d0 < D; ++d0) {
    float sum = 0;
    for (int64_t j = 0; j < count; ++j) {
      sum += weights[j] * static_cast<float>(rows[slots[j] * row_stride + d0]);
    }
    out[d0] = sum;
  }
}

// Whole vectors first, their copies of a constant size, then the tail.
[[gnu::always_inline]] inline void round_to_bf16_body(const float* values, c10::BFloat16* rounded,
                                                      int64_t n) {
  int64_t i = 0;
  for (; i + kLanes <= n; i += kLanes) {
    Floats lanes;
    load(lanes, values + i, kLanes);
    store(rounded + i, lanes, kLanes);
  }
  if (i < n) {
    Floats lanes;
    load(lanes, values + i, n - i);
    store(rounded + i, lanes, n - i);
  }
}

[[gnu::always_inline]] inline void widen_bf16_body(const c10::BFloat16* values, float* widened,
                                                   int64_t n) {
  int64_t i = 0;
  for (; i + kLanes <= n; i += kLanes) {
    Floats lanes;
    load(lanes, values + i, kLanes);
    std::memcpy(widened + i, &lanes, sizeof lanes);
  }
  if (i < n) {
    Floats lanes;
    load(lanes, values + i, n - i);
    std::memcpy(widened + i, &lanes, (n - i) * sizeof(float));
  }
}

[[gnu::always_inline]] inline void exp_in_place_body(float* values, int64_t n) {
  exp_shifted_and_sum(values, n, 0.0f);
}

}  // namespace

STRATA_VECTOR_PATHS(float, online_softmax_row,
                    (float* scores, int64_t seen, int64_t cols, float& running_max,
                     float& running_sum),
                    (scores, seen, cols, running_max, running_sum))
STRATA_VECTOR_PATHS(void, probabilities_row, (float* scores, int64_t seen, int64_t cols, float lse),
                    (scores, seen, cols, lse))
STRATA_VECTOR_PATHS(void, score_gradient_row,
                    (const float* probabilities, float* dprobabilities, int64_t cols, float delta),
                    (probabilities, dprobabilities, cols, delta))
STRATA_VECTOR_PATHS(void, gathered_scores_row,
                    (const float* query, const float* rows, int64_t row_stride,
                     const int64_t* slots, int64_t count, int64_t D, float* scores),
                    (query, rows, row_stride, slots, count, D, scores))
STRATA_VECTOR_PATHS(void, gathered_weighted_sum,
                    (const float* weights, const float* rows, int64_t row_stride,
                     const int64_t* slots, int64_t count, int64_t D, float* out),
                    (weights, rows, row_stride, slots, count, D, out))
STRATA_VECTOR_PATHS(void, gathered_scores_row,
                    (const float* query, const c10::BFloat16* rows, int64_t row_stride,
                     const int64_t* slots, int64_t count, int64_t D, float* scores),
                    (query, rows, row_stride, slots, count, D, scores))
STRATA_VECTOR_PATHS(void, gathered_weighted_sum,
                    (const float* weights, const c10::BFloat16* rows, int64_t row_stride,
                     const int64_t* slots, int64_t count, int64_t D, float* out),
                    (weights, rows, row_stride, slots, count, D, out))
STRATA_VECTOR_PATHS(void, round_to_bf16, (const float* values, c10::BFloat16* rounded, int64_t n),
                    (values, rounded, n))
STRATA_VECTOR_PATHS(void, widen_bf16, (const c10::BFloat16* values, float* widened, int64_t n),
                    (values, widened, n))
STRATA_VECTOR_PATHS(void, exp_in_place, (float* values, int64_t n), (values, n))

#if defined(STRATA_VECTOR_TARGETS)
__attribute__((target("avx512f"))) void gathered_scores_row(const c10::BFloat16* query,
                                                            const c10::BFloat16* rows,
                                                            int64_t row_stride,
                                                            const int64_t* slots, int64_t count,
                                                            int64_t D, float scale, float* scores) {
  gathered_dot_scores_row_body(query, rows, row_stride, slots, count, D, scale, scores);
}
#else
void gathered_scores_row(const c10::BFloat16*, const c10::BFloat16*, int64_t, const int64_t*,
                         int64_t, int64_t, float, float*) {
  __builtin_trap();  // never chosen: CpuInfo::bf16_dot needs the vector paths
}
#endif

// float16 by F16C's conversions on the AVX-512 path (GCC's vector extension has none for
// them short of AVX512-FP16), c10::Half's elsewhere: the same values, rounded to nearest even.
#if defined(STRATA_VECTOR_TARGETS)
namespace {
__attribute__((target("avx512f"))) void widen_half_avx512(const c10::Half* values, float* widened,
                                                          int64_t n) {
  int64_t i = 0;
  for (; i + kLanes <= n; i += kLanes) {
    const __m256i halves = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(values + i));
    // The zero-masked forms: GCC 12's plain ones start from an "undefined" register it then
    // warns about (-Wmaybe-uninitialized).
    _mm512_storeu_ps(widened + i, _mm512_maskz_cvtph_ps(0xFFFF, halves));
  }
  for (; i < n; ++i) widened[i] = static_cast<float>(values[i]);
}

__attribute__((target("avx512f"))) void round_to_half_avx512(const float* values,
                                                             c10::Half* rounded, int64_t n) {
  int64_t i = 0;
  for (; i + kLanes <= n; i += kLanes) {
    const __m256i halves = _mm512_maskz_cvtps_ph(0xFFFF, _mm512_loadu_ps(values + i),
                                                 _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(rounded + i), halves);
  }
  for (; i < n; ++i) rounded[i] = static_cast<c10::Half>(values[i]);
}
}  // namespace
#endif

void widen_half(const c10::Half* values, float* widened, int64_t n) {
#if defined(STRATA_VECTOR_TARGETS)
  if (vector_path() == VectorPath::avx512) return widen_half_avx512(values, widened, n);
#endif
  for (int64_t i = 0; i < n; ++i) widened[i] = static_cast<float>(values[i]);
}

void round_to_half(const float* values, c10::Half* rounded, int64_t n) {
#if defined(STRATA_VECTOR_TARGETS)
  if (vector_path() == VectorPath::avx512) return round_to_half_avx512(values, rounded, n);
#endif
  for (int64_t i = 0; i < n; ++i) rounded[i] = static_cast<c10::Half>(values[i]);
}

double online_softmax_row(double* scores, int64_t seen, int64_t cols, double& running_max,
                          double& running_sum) {
  std::fill(scores + seen, scores + cols, 0.0);
  if (seen == 0) return 1.0;
  const double new_max = std::max(running_max, *std::max_element(scores, scores + seen));
  double sum = 0;
  for (int64_t i = 0; i < seen; ++i) sum += scores[i] = std::exp(scores[i] - new_max);
  const double rescale = std::exp(running_max - new_max);
  running_sum = running_sum * rescale + sum;
  running_max = new_max;
  return rescale;
}

void probabilities_row(double* scores, int64_t seen, int64_t cols, double lse) {
  if (lse == -std::numeric_limits<double>::infinity()) seen = 0;
  std::fill(scores + seen, scores + cols, 0.0);
  for (int64_t i = 0; i < seen; ++i) scores[i] = std::exp(scores[i] - lse);
}

void score_gradient_row(const double* probabilities, double* dprobabilities, int64_t cols,
                        double delta) {
  for (int64_t i = 0; i < cols; ++i) {
    dprobabilities[i] = probabilities[i] * (dprobabilities[i] - delta);
  }
}

}  // namespace strata
