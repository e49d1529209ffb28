// Shared by the multi-rank dist tests: the dtypes and sizes every collective is tried with,
// integer test values that every dtype (bfloat16 included) holds exactly, and an exact
// comparison whose message names the index and both values (errors: expect_error.h).
#pragma once
#include <gtest/gtest.h>

#include <vector>

#include "expect_error.h"
#include "strata/dist/comm.h"
#include "test_support.h"

namespace strata::dist_test {

inline const std::vector<at::ScalarType>& all_dtypes() {
  static const std::vector<at::ScalarType> dtypes = {
      at::kFloat, at::kDouble, at::kBFloat16, at::kHalf,  at::kInt,
      at::kLong,  at::kByte,   at::kChar,     at::kShort, at::kBool};
  return dtypes;
}

// Element counts: empty, one, odd, and one past the 4096 where bfloat16 sums vectorize.
inline const std::vector<int64_t>& test_sizes() {
  static const std::vector<int64_t> sizes = {0, 1, 7, 4099};
  return sizes;
}

// A world communicator per test, generous timeout (oversubscribed runs are slow).
inline Comm test_world() { return Comm::world(120.0); }

// Small non-negative integers: exact in every dtype (bfloat16 holds integers up to 256).
inline int64_t small_value(int64_t seed, at::ScalarType dtype) {
  if (dtype == at::kBool) return seed % 2;
  return seed % 50;
}

// A tensor of `count` elements whose element i is f(i), as `dtype`.
template <typename F>
at::Tensor tensor_of(int64_t count, at::ScalarType dtype, F f) {
  std::vector<double> values(count);
  for (int64_t i = 0; i < count; ++i) values[i] = static_cast<double>(f(i));
  return at::tensor(values, at::kDouble).view({count}).to(dtype);
}

#define EXPECT_TENSOR_EQ(actual, expected)                                  \
  do {                                                                      \
    const std::string strata_difference =                                   \
        ::strata::testing::compare_tensors((actual), (expected), 0.0, 0.0); \
    EXPECT_TRUE(strata_difference.empty()) << strata_difference;            \
  } while (0)

}  // namespace strata::dist_test
