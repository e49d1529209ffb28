// 16-lane float vectors for the vectorized kernels (score_rows.cpp, gelu.cpp, skinny_gemm.cpp,
// norm_rows.cpp, adamw_update.cpp):
// GCC vector types, which the compiler maps onto whatever registers the variant it builds has
// (one AVX-512 register, two AVX2 ones, four SSE ones). STRATA_VECTOR_PATHS builds a kernel
// for those three and calls the one cpu.h chose (vector_path()). Include only from those .cpp
// files: everything here is inlined into the variants that use it.
//
// exp (Cephes' expf): x = n ln2 + r with n = round(x / ln2) and |r| <= ln2 / 2, ln2 split in
// two constants so n ln2 is exact; exp(r) from a degree-6 polynomial; 2^n by writing n + 127
// into the exponent bits. Inputs are clamped to [-87.3, 88] so 2^n stays a normal float, and
// inputs below -87.3 (exp under 1.2e-38), -inf included, give exactly 0.
#pragma once
#include <c10/util/BFloat16.h>

#include <cstdint>
#include <cstring>
#include <limits>

#include "strata/kernels/cpu.h"

// STRATA_VECTOR_PATHS(return_type, name, (parameters), (arguments)) defines `name` from the
// always-inlined `name##_body`: three variants of the body, each compiled for one path
// (name##_avx512 with AVX-512F, name##_avx2 with AVX2 and FMA, name##_generic for the
// baseline of the build's target), and `name` itself, which calls the variant of
// vector_path(). A build without target attributes (the CMake check STRATA_VECTOR_TARGETS:
// not GCC or Clang on x86-64) has the generic variant only, which is then all `name` runs.
#if defined(STRATA_VECTOR_TARGETS)
#define STRATA_VECTOR_PATHS(return_type, name, parameters, arguments)       \
  namespace {                                                               \
  __attribute__((target("avx512f"))) return_type name##_avx512 parameters { \
    return name##_body arguments;                                           \
  }                                                                         \
  __attribute__((target("avx2,fma"))) return_type name##_avx2 parameters {  \
    return name##_body arguments;                                           \
  }                                                                         \
  return_type name##_generic parameters { return name##_body arguments; }   \
  }                                                                         \
  return_type name parameters {                                             \
    switch (::strata::vector_path()) {                                      \
      case ::strata::VectorPath::avx512:                                    \
        return name##_avx512 arguments;                                     \
      case ::strata::VectorPath::avx2:                                      \
        return name##_avx2 arguments;                                       \
      case ::strata::VectorPath::generic:                                   \
        break;                                                              \
    }                                                                       \
    return name##_generic arguments;                                        \
  }
#else
#define STRATA_VECTOR_PATHS(return_type, name, parameters, arguments)     \
  namespace {                                                             \
  return_type name##_generic parameters { return name##_body arguments; } \
  }                                                                       \
  return_type name parameters { return name##_generic arguments; }
#endif

namespace strata::lanes {
namespace {  // each including file keeps its own copy: nothing here is linked

using Floats = float __attribute__((vector_size(64)));
using Ints = int32_t __attribute__((vector_size(64)));
constexpr int64_t kLanes = 16;
constexpr float kNegativeInfinity = -std::numeric_limits<float>::infinity();

// A C-style cast between vector types of one size keeps the bits (GCC's vector extension).
// Vectors travel by reference between these helpers: passed by value between functions built
// for different targets they would change the ABI (GCC's -Wpsabi); always inlined, nothing is
// passed at all.
[[gnu::always_inline]] inline void load(Floats& lanes, const float* values, int64_t n,
                                        float fill = 0.0f) {
  lanes = Floats{} + fill;
  std::memcpy(&lanes, values, n * sizeof(float));
}
// n (<= kLanes) bf16 values as float32, the rest 0: a bf16 number is the upper half of a
// float32's bits, so it is widened in the registers.
[[gnu::always_inline]] inline void load(Floats& lanes, const c10::BFloat16* values, int64_t n) {
  using Halves = uint16_t __attribute__((vector_size(kLanes * sizeof(uint16_t))));
  Halves bits = {};
  std::memcpy(&bits, values, n * sizeof(uint16_t));
  lanes = (Floats)(__builtin_convertvector(bits, Ints) << 16);
}

// The first n (<= kLanes) lanes rounded to bf16, to nearest even (a NaN stays a quiet NaN).
[[gnu::always_inline]] inline void store(c10::BFloat16* values, const Floats& lanes, int64_t n) {
  using UInts = uint32_t __attribute__((vector_size(64)));
  using Halves = uint16_t __attribute__((vector_size(kLanes * sizeof(uint16_t))));
  const UInts bits = (UInts)lanes;
  UInts rounded = (bits + 0x7FFFu + ((bits >> 16) & 1u)) >> 16;
  rounded = lanes != lanes ? UInts{} + 0x7FC0u : rounded;
  const Halves halves = __builtin_convertvector(rounded, Halves);
  std::memcpy(values, &halves, n * sizeof(uint16_t));
}

// 2 kLanes bf16 values as they are stored (n of them, the rest 0): a pair per float32 lane, the
// operands of dot_pairs.
using Pairs = uint16_t __attribute__((vector_size(64)));
constexpr int64_t kPairs = 2 * kLanes;
[[gnu::always_inline]] inline void load(Pairs& pairs, const c10::BFloat16* values, int64_t n) {
  pairs = Pairs{};
  std::memcpy(&pairs, values, n * sizeof(uint16_t));
}

// acc[i] += x[2i] w[2i] + x[2i+1] w[2i+1]: AVX512-BF16's dot product (vdpbf16ps: the two exact
// products added into the lane, rounded to nearest even, subnormals flushed to zero). Only for
// the AVX-512 variants, on a CPU that has the instruction (CpuInfo::bf16_dot); an assembler
// that knows it is all the build needs.
[[gnu::always_inline]] inline void dot_pairs(Floats& acc, const Pairs& x, const Pairs& w) {
#if defined(STRATA_VECTOR_TARGETS)
  asm("vdpbf16ps %2, %1, %0" : "+v"(acc) : "v"(x), "v"(w));
#else
  (void)acc, (void)x, (void)w;
  __builtin_trap();  // never chosen: CpuInfo::bf16_dot needs the vector paths
#endif
}

[[gnu::always_inline]] inline void exp_lanes(Floats& x) {
  const Ints underflow = x < -87.3f;
  x = x < -87.3f ? Floats{} - 87.3f : x;
  x = x > 88.0f ? Floats{} + 88.0f : x;
  const Floats shifter = Floats{} + 12582912.0f;  // 1.5 * 2^23: adding it rounds to an integer
  const Floats shifted = x * 1.44269504088896341f + shifter;
  const Floats n = shifted - shifter;
  const Ints two_to_n = (((Ints)shifted - 0x4B400000) + 127) << 23;
  Floats r = x - n * 0.693359375f;
  r = r - n * -2.12194440e-4f;
  Floats p = Floats{} + 1.9875691500e-4f;
  p = p * r + 1.3981999507e-3f;
  p = p * r + 8.3334519073e-3f;
  p = p * r + 4.1665795894e-2f;
  p = p * r + 1.6666665459e-1f;
  p = p * r + 5.0000001201e-1f;
  const Floats y = (p * r * r + r + 1.0f) * (Floats)two_to_n;
  const Ints bits = (Ints)y & ~underflow;
  x = (Floats)bits;
}

}  // namespace
}  // namespace strata::lanes
