// The attention kernel's row operations in float32 against float64 references: exp over its
// whole range (exactly 0 below -87.3 and for -inf), the online softmax across two tiles of one
// row (seen counts 0, 1, a partial vector, whole vectors), the probabilities for a row that
// saw no key, and the score gradient; the rounding of a tile to bf16.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <limits>
#include <vector>

#include "strata/kernels/score_rows.h"

namespace strata {
namespace {

constexpr float kInf = std::numeric_limits<float>::infinity();

TEST(ScoreRows, ExpWithinTwoUlpsAndZeroBelowRange) {
  std::vector<float> x;
  for (double value = -100; value <= 88; value += 0.00731) x.push_back(static_cast<float>(value));
  x.push_back(-kInf);
  x.push_back(0.0f);
  std::vector<float> y = x;
  exp_in_place(y.data(), static_cast<int64_t>(y.size()));
  for (size_t i = 0; i < x.size(); ++i) {
    if (x[i] < -87.3f) {
      EXPECT_EQ(y[i], 0.0f) << "exp(" << x[i] << ")";
      continue;
    }
    const double want = std::exp(static_cast<double>(x[i]));
    ASSERT_NEAR(y[i], want, 2.5e-7 * want) << "exp(" << x[i] << ") at index " << i;
  }
  EXPECT_EQ(y[x.size() - 1], 1.0f) << "exp(0)";
}

// The scores of one row split into two tiles of `cols` each, of which the row sees `seen`.
void expect_online_softmax(int64_t cols, int64_t seen_first, int64_t seen_second) {
  std::vector<float> first(cols), second(cols);
  std::vector<double> all;
  for (int64_t i = 0; i < cols; ++i) {
    first[i] = std::sin(0.7 * i) * 3;
    second[i] = std::cos(1.3 * i) * 4 + 1;
  }
  all.insert(all.end(), first.begin(), first.begin() + seen_first);
  all.insert(all.end(), second.begin(), second.begin() + seen_second);
  float running_max = -kInf, running_sum = 0;
  const float rescale_first =
      online_softmax_row(first.data(), seen_first, cols, running_max, running_sum);
  const float max_after_first = running_max;
  const float rescale_second =
      online_softmax_row(second.data(), seen_second, cols, running_max, running_sum);
  SCOPED_TRACE(testing::Message() << "cols " << cols << ", seen " << seen_first << " then "
                                  << seen_second);
  if (seen_first == 0) {
    EXPECT_EQ(rescale_first, 1.0f);
  }
  if (seen_second == 0) {
    EXPECT_EQ(rescale_second, 1.0f);
  }
  if (seen_first > 0 && seen_second > 0) {
    EXPECT_NEAR(rescale_second, std::exp(max_after_first - running_max), 1e-6);
  }
  double want_max = -kInf;
  for (double value : all) want_max = std::max(want_max, value);
  double want_sum = 0;
  for (double value : all) want_sum += std::exp(value - want_max);
  if (all.empty()) {
    EXPECT_EQ(running_max, -kInf);
    EXPECT_EQ(running_sum, 0.0f);
  } else {
    EXPECT_EQ(running_max, static_cast<float>(want_max));
    EXPECT_NEAR(running_sum, want_sum, 1e-6 * want_sum);
  }
  // Each tile holds exp(score - the maximum at its time), and 0 for keys not seen.
  for (int64_t i = 0; i < cols; ++i) {
    const double want_second =
        i < seen_second ? std::exp(all[seen_first + i] - static_cast<double>(running_max)) : 0.0;
    EXPECT_NEAR(second[i], want_second, 1e-6) << "second tile, column " << i;
    if (i >= seen_first) {
      EXPECT_EQ(first[i], 0.0f) << "first tile, column " << i;
    }
  }
}

TEST(ScoreRows, OnlineSoftmaxAcrossTwoTiles) {
  for (int64_t cols : {1, 5, 16, 37, 64}) {
    for (int64_t seen_first : {int64_t{0}, int64_t{1}, cols / 2, cols}) {
      for (int64_t seen_second : {int64_t{0}, int64_t{1}, cols - 1, cols}) {
        expect_online_softmax(cols, seen_first, seen_second);
      }
    }
  }
}

TEST(ScoreRows, ProbabilitiesAndTheirGradient) {
  const int64_t cols = 21, seen = 19;
  std::vector<float> scores(cols), dprobabilities(cols);
  for (int64_t i = 0; i < cols; ++i) {
    scores[i] = 0.3f * static_cast<float>(i) - 4;
    dprobabilities[i] = std::sin(static_cast<float>(i));
  }
  const float lse = 2.5f, delta = 0.25f;
  std::vector<float> probabilities = scores;
  probabilities_row(probabilities.data(), seen, cols, lse);
  std::vector<float> gradient = dprobabilities;
  score_gradient_row(probabilities.data(), gradient.data(), cols, delta);
  for (int64_t i = 0; i < cols; ++i) {
    const double p = i < seen ? std::exp(static_cast<double>(scores[i]) - lse) : 0.0;
    EXPECT_NEAR(probabilities[i], p, 1e-7 * (1 + p)) << "column " << i;
    EXPECT_NEAR(gradient[i], p * (dprobabilities[i] - delta), 1e-6) << "column " << i;
  }
  // A row whose lse is -inf saw no key anywhere: all 0, not exp(+inf).
  std::vector<float> unseen = scores;
  probabilities_row(unseen.data(), seen, cols, -kInf);
  for (int64_t i = 0; i < cols; ++i) EXPECT_EQ(unseen[i], 0.0f) << "column " << i;
}

// Bit for bit as c10::BFloat16's conversion, on every path: ties to even both ways, values that
// round up into the next binade and to infinity, NaN, infinities, zeros of both signs and
// subnormals, over lengths ending inside and at a vector.
TEST(ScoreRows, RoundsToBf16AsC10Does) {
  std::vector<float> values;
  for (uint32_t bits : {0x3F808000u, 0x3F818000u, 0x3F80FFFFu, 0x3F7FFFFFu, 0x7F7FFFFFu,
                        0xBF808000u, 0x00000001u, 0x80000000u, 0x7FC00001u, 0xFF800000u}) {
    float x;
    std::memcpy(&x, &bits, sizeof x);
    values.push_back(x);
  }
  for (int i = 0; values.size() < 45; ++i)
    values.push_back(std::sin(1.7f * i) * std::exp2(i % 40 - 20));
  for (int64_t n : {int64_t{0}, int64_t{1}, int64_t{15}, int64_t{16}, int64_t{45}}) {
    std::vector<c10::BFloat16> rounded(values.size(), c10::BFloat16(-7.0f));
    round_to_bf16(values.data(), rounded.data(), n);
    for (int64_t i = 0; i < static_cast<int64_t>(values.size()); ++i) {
      const c10::BFloat16 want = i < n ? c10::BFloat16(values[i]) : c10::BFloat16(-7.0f);
      EXPECT_EQ(rounded[i].x, want.x) << "n " << n << " value " << i << " = " << values[i];
    }
  }
}

// Widening is exact and touches only the n values asked for, whole vectors and tail alike.
TEST(ScoreRows, WidensBf16Exactly) {
  std::vector<c10::BFloat16> values;
  for (uint16_t bits : {0x3F80, 0x0001, 0x8000, 0x7F7F, 0xFF80, 0x7FC1}) {
    values.push_back(c10::BFloat16(bits, c10::BFloat16::from_bits()));
  }
  for (int i = 0; values.size() < 45; ++i)
    values.push_back(c10::BFloat16(std::sin(0.9f * i) * std::exp2(i % 30 - 15)));
  for (int64_t n : {int64_t{0}, int64_t{1}, int64_t{15}, int64_t{16}, int64_t{45}}) {
    std::vector<float> widened(values.size(), -7.0f);
    widen_bf16(values.data(), widened.data(), n);
    for (int64_t i = 0; i < static_cast<int64_t>(values.size()); ++i) {
      const float want = i < n ? static_cast<float>(values[i]) : -7.0f;
      uint32_t got_bits, want_bits;
      std::memcpy(&got_bits, &widened[i], sizeof got_bits);
      std::memcpy(&want_bits, &want, sizeof want_bits);
      EXPECT_EQ(got_bits, want_bits) << "n " << n << " value " << i;
    }
  }
}

// float16 both ways as c10::Half converts, bit for bit: whole vectors and tails, subnormals,
// the largest half, overflow to inf, ties to even.
TEST(ScoreRows, ConvertsFloat16AsC10Does) {
  std::vector<float> values = {0.0f,
                               -0.0f,
                               1.0f,
                               65504.0f,
                               65520.0f,
                               -1e6f,
                               5.96e-8f,
                               2.98e-8f,
                               1.0f + 1.0f / 2048,
                               1.0f + 3.0f / 2048,
                               6.1e-5f,
                               -3.3e-6f,
                               std::numeric_limits<float>::infinity()};
  for (int i = 0; values.size() < 45; ++i)
    values.push_back(std::sin(1.3f * i) * std::exp2(i % 36 - 20));
  for (int64_t n : {int64_t{0}, int64_t{1}, int64_t{15}, int64_t{16}, int64_t{45}}) {
    std::vector<c10::Half> rounded(values.size(), c10::Half(-7.0f));
    round_to_half(values.data(), rounded.data(), n);
    std::vector<float> widened(values.size(), -7.0f);
    widen_half(rounded.data(), widened.data(), n);
    for (int64_t i = 0; i < static_cast<int64_t>(values.size()); ++i) {
      const c10::Half want = i < n ? c10::Half(values[i]) : c10::Half(-7.0f);
      EXPECT_EQ(rounded[i].x, want.x) << "n " << n << " value " << i << " = " << values[i];
      const float back = i < n ? static_cast<float>(want) : -7.0f;
      EXPECT_EQ(std::memcmp(&widened[i], &back, sizeof back), 0) << "n " << n << " value " << i;
    }
  }
}

}  // namespace
}  // namespace strata
