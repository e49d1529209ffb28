// The few-rows product (skinny_gemm.h): blocks of up to 4 rows of x by 4 rows of w, 16
// accumulator vectors of kLanes partial sums each, the k loop streaming one vector of every
// operand row per step (8 loads for 16 multiply-adds, and a prefetch of the next 4 rows of w);
// then one tree folds the 16 vectors into the 16 outputs of the block. The columns go out in
// panels of kPanel to the threads; within a panel, each 4 rows of w (4 KB at k = 256) are used
// by every block of x rows before the next, so w streams from memory once; x is read again for
// every group, from L1 while its m x k floats fit there (16 rows at k = 768 fill it) and from
// L2 beyond. The 16 accumulators are 16 registers in the AVX-512 variant; the AVX2 variant (16
// registers of 8 lanes) spills them to the stack: slower, the same sums. The tree's shuffles are
// GCC's __builtin_shuffle; other compilers add the same pairs lane by lane. bf16 operands are
// read as they are stored and widened in the registers (a bf16 number is the upper half of a
// float32's bits): the same float32 sums as multiplying their float32 copies, from half the
// bytes. x's few rows are widened once up front (m x k values), the weights as they stream.
// A single row of x (one_row) reads the weight rows one after another instead, with the same
// sums: nothing in x to reuse, and one sequential stream is the fastest read of the weight.
#include "strata/kernels/skinny_gemm.h"

#include <algorithm>
#include <type_traits>
#include <vector>

#include "strata/core/error.h"
#include "strata/kernels/cpu.h"
#include "strata/kernels/thread_team.h"
#include "strata/kernels/vector_lanes.h"

namespace strata {
namespace {

using lanes::Floats;
using lanes::Ints;
using lanes::kLanes;
using Indices = int32_t __attribute__((vector_size(64)));

// How the k loop multiplies, as a policy of the blocks below (each load is lanes::load of the
// policy's Operand from X or W, its overload doing any widening). Widen<T>: kLanes values of x
// (float32) and of w (float32, or bf16 widened as it is loaded) per step, multiply-added into
// the float32 lanes. Dot: 2 kLanes bf16 values of x and of w per step, a pair per lane, added
// into the float32 lanes by the AVX512-BF16 dot product (lanes::dot_pairs); x is read as
// stored, and a step covers a whole cache line of w. Its sums differ from Widen's by the
// instruction's rounding, never by the call: every output still has its own lanes, added over
// k in order, then the one tree. Dot runs only in the AVX-512 variant, on a CPU that has the
// instruction (CpuInfo::bf16_dot).
template <typename T>
struct Widen {
  using X = float;
  using W = T;
  using Operand = Floats;
  static constexpr int64_t kStep = kLanes;
  [[gnu::always_inline]] static void add(Floats& acc, const Operand& x, const Operand& w) {
    acc += x * w;
  }
};

struct Dot {
  using X = c10::BFloat16;
  using W = c10::BFloat16;
  using Operand = lanes::Pairs;
  static constexpr int64_t kStep = lanes::kPairs;
  [[gnu::always_inline]] static void add(Floats& acc, const Operand& x, const Operand& w) {
    lanes::dot_pairs(acc, x, w);
  }
};

constexpr int64_t kPanel = 64;  // columns per task
// One thread runs the whole product unless it has 2^21 multiply-adds (~10 us of one core's work;
// waking a second thread costs several us) or a weight of 2^16 values (256 KB of float32). A
// decode step reads each weight once, from memory (the model is far larger than the caches),
// and two cores stream it faster than one (AMD EPYC VM: 30 against 54 GB/s): at 2^20, the
// d_model 768 model's 768 x 768 out-projections ran on one thread, and the other thread waited
// through 46% of the batch-1 step (perf) against 27% at 2^16 (docs/serving.md).
constexpr int64_t kThreadedWork = int64_t{1} << 21;
constexpr int64_t kThreadedWeight = int64_t{1} << 16;

// One level of the tree: a and b each hold 16 / W accumulators' partial sums, 2W lanes apiece;
// the result holds all 32 / W accumulators (a's, then b's), W lanes apiece, each lane the sum
// of its accumulator's two partials W lanes apart. (Vectors go by reference: vector_lanes.h.)
constexpr Indices kLow8 = {0, 1, 2, 3, 4, 5, 6, 7, 16, 17, 18, 19, 20, 21, 22, 23};
constexpr Indices kLow4 = {0, 1, 2, 3, 8, 9, 10, 11, 16, 17, 18, 19, 24, 25, 26, 27};
constexpr Indices kLow2 = {0, 1, 4, 5, 8, 9, 12, 13, 16, 17, 20, 21, 24, 25, 28, 29};
constexpr Indices kLow1 = {0, 2, 4, 6, 8, 10, 12, 14, 16, 18, 20, 22, 24, 26, 28, 30};

template <int W>
[[gnu::always_inline]] inline void fold(const Floats& a, const Floats& b, Floats& result) {
  constexpr Indices low = W == 8 ? kLow8 : W == 4 ? kLow4 : W == 2 ? kLow2 : kLow1;
  constexpr Indices high = low + W;
#if defined(__GNUC__) && !defined(__clang__)
  result = __builtin_shuffle(a, b, low) + __builtin_shuffle(a, b, high);
#else  // Clang's shuffle takes its indices one by one; the same sums, lane by lane
  for (int lane = 0; lane < kLanes; ++lane) {
    const float first = low[lane] < kLanes ? a[low[lane]] : b[low[lane] - kLanes];
    const float second = high[lane] < kLanes ? a[high[lane]] : b[high[lane] - kLanes];
    result[lane] = first + second;
  }
#endif
}

// Lane i of the result: the sum of acc[i]'s 16 lanes, added in the same order for every i.
[[gnu::always_inline]] inline void sum_each(const Floats (&acc)[16], Floats& sums) {
  Floats eights[8], fours[4], twos[2];
  for (int i = 0; i < 8; ++i) fold<8>(acc[2 * i], acc[2 * i + 1], eights[i]);
  for (int i = 0; i < 4; ++i) fold<4>(eights[2 * i], eights[2 * i + 1], fours[i]);
  for (int i = 0; i < 2; ++i) fold<2>(fours[2 * i], fours[2 * i + 1], twos[i]);
  fold<1>(twos[0], twos[1], sums);
}

// out[i][j] for i < MR, j < NR: accumulator 4i + j, whatever MR and NR are, so every output is
// summed by the same tree.
template <int MR, int NR, typename Op>
[[gnu::always_inline]] inline void block(const typename Op::X* x, int64_t ldx,
                                         const typename Op::W* w, int64_t ldw, int64_t k,
                                         float* out, int64_t ldo) {
  Floats acc[16] = {};
  const int64_t whole = k - k % Op::kStep;
  for (int64_t l = 0; l < whole; l += Op::kStep) {
    typename Op::Operand xs[MR], ws[NR];
    for (int i = 0; i < MR; ++i) lanes::load(xs[i], x + i * ldx + l, Op::kStep);
    for (int j = 0; j < NR; ++j) lanes::load(ws[j], w + j * ldw + l, Op::kStep);
    // The next column group's rows: on the first block of x they stream from memory while
    // this group's multiply-adds run (~10% at the 12-layer d_model 768 model's decode of 8
    // rows). Integer arithmetic: past the last group the address is outside w (a prefetch does
    // not fault; the pointer arithmetic would be undefined).
    const auto here = reinterpret_cast<uintptr_t>(w + l);
    for (int j = 0; j < 4; ++j) {
      __builtin_prefetch(
          reinterpret_cast<const void*>(here + (4 + j) * ldw * sizeof(typename Op::W)));
    }
    for (int i = 0; i < MR; ++i) {
      for (int j = 0; j < NR; ++j) Op::add(acc[4 * i + j], xs[i], ws[j]);
    }
  }
  if (whole < k) {  // the last k % kStep, zero-filled
    typename Op::Operand xs[MR], ws[NR];
    for (int i = 0; i < MR; ++i) lanes::load(xs[i], x + i * ldx + whole, k - whole);
    for (int j = 0; j < NR; ++j) lanes::load(ws[j], w + j * ldw + whole, k - whole);
    for (int i = 0; i < MR; ++i) {
      for (int j = 0; j < NR; ++j) Op::add(acc[4 * i + j], xs[i], ws[j]);
    }
  }
  Floats sums;
  sum_each(acc, sums);
  for (int i = 0; i < MR; ++i) {
    for (int j = 0; j < NR; ++j) out[i * ldo + j] = sums[4 * i + j];
  }
}

// The blocks of one 4-column group of w against every row of x.
template <int NR, typename Op>
[[gnu::always_inline]] inline void column_group(int64_t m, int64_t k, const typename Op::X* x,
                                                int64_t ldx, const typename Op::W* w, int64_t ldw,
                                                float* out, int64_t ldo) {
  int64_t i = 0;
  for (; i + 4 <= m; i += 4) block<4, NR, Op>(x + i * ldx, ldx, w, ldw, k, out + i * ldo, ldo);
  switch (m - i) {
    case 3:
      return block<3, NR, Op>(x + i * ldx, ldx, w, ldw, k, out + i * ldo, ldo);
    case 2:
      return block<2, NR, Op>(x + i * ldx, ldx, w, ldw, k, out + i * ldo, ldo);
    case 1:
      return block<1, NR, Op>(x + i * ldx, ldx, w, ldw, k, out + i * ldo, ldo);
    default:
      return;
  }
}

// Columns [first, last) of out.
template <typename Op>
[[gnu::always_inline]] inline void columns(int64_t m, int64_t k, const typename Op::X* x,
                                           int64_t ldx, const typename Op::W* w, int64_t ldw,
                                           float* out, int64_t ldo, int64_t first, int64_t last) {
  int64_t j = first;
  for (; j + 4 <= last; j += 4) column_group<4, Op>(m, k, x, ldx, w + j * ldw, ldw, out + j, ldo);
  switch (last - j) {
    case 3:
      return column_group<3, Op>(m, k, x, ldx, w + j * ldw, ldw, out + j, ldo);
    case 2:
      return column_group<2, Op>(m, k, x, ldx, w + j * ldw, ldw, out + j, ldo);
    case 1:
      return column_group<1, Op>(m, k, x, ldx, w + j * ldw, ldw, out + j, ldo);
    default:
      return;
  }
}

// One row of x (a batch-1 decode): the weight rows one after another, each one multiply-add
// chain into its own accumulator, and the tree run once per 16 rows over their 16
// accumulators. The same sums as block<1, NR> (one accumulator per output, added over k in
// order, then the same tree), so a row's bits do not depend on the call's row count; but the
// weight streams as one sequential read where block's four rows are four streams 4k bytes
// apart, which on the AMD EPYC VM reached 30 GB/s against 45 for a plain summing pass.
template <typename Op>
[[gnu::always_inline]] inline void one_row(int64_t k, const typename Op::X* x,
                                           const typename Op::W* w, int64_t ldw, float* out,
                                           int64_t first, int64_t last) {
  const int64_t whole = k - k % Op::kStep;
  for (int64_t j = first; j < last; j += 16) {
    const int64_t rows = std::min<int64_t>(16, last - j);
    Floats acc[16] = {};
    for (int64_t r = 0; r < rows; ++r) {
      const typename Op::W* row = w + (j + r) * ldw;
      Floats sum = {};
      for (int64_t l = 0; l < whole; l += Op::kStep) {
        typename Op::Operand xs, ws;
        lanes::load(xs, x + l, Op::kStep);
        lanes::load(ws, row + l, Op::kStep);
        Op::add(sum, xs, ws);
      }
      if (whole < k) {  // the last k % kStep, zero-filled
        typename Op::Operand xs, ws;
        lanes::load(xs, x + whole, k - whole);
        lanes::load(ws, row + whole, k - whole);
        Op::add(sum, xs, ws);
      }
      acc[r] = sum;
    }
    Floats sums;
    sum_each(acc, sums);
    for (int64_t r = 0; r < rows; ++r) out[j + r] = sums[r];
  }
}

// Columns [first, last) of out, by the kernel for x's row count.
template <typename Op>
[[gnu::always_inline]] inline void panel_of(int64_t m, int64_t k, const typename Op::X* x,
                                            int64_t ldx, const typename Op::W* w, int64_t ldw,
                                            float* out, int64_t ldo, int64_t first, int64_t last) {
  if (m == 1) return one_row<Op>(k, x, w, ldw, out, first, last);
  columns<Op>(m, k, x, ldx, w, ldw, out, ldo, first, last);
}

// One `panel` per pair of operand types: the widening ones in the three vector variants, Dot
// in the AVX-512 one only.
template <typename T>
[[gnu::always_inline]] inline void panel_body(int64_t m, int64_t k, const float* x, int64_t ldx,
                                              const T* w, int64_t ldw, float* out, int64_t ldo,
                                              int64_t first, int64_t last) {
  panel_of<Widen<T>>(m, k, x, ldx, w, ldw, out, ldo, first, last);
}
STRATA_VECTOR_PATHS(void, panel,
                    (int64_t m, int64_t k, const float* x, int64_t ldx, const float* w, int64_t ldw,
                     float* out, int64_t ldo, int64_t first, int64_t last),
                    (m, k, x, ldx, w, ldw, out, ldo, first, last))
STRATA_VECTOR_PATHS(void, panel,
                    (int64_t m, int64_t k, const float* x, int64_t ldx, const c10::BFloat16* w,
                     int64_t ldw, float* out, int64_t ldo, int64_t first, int64_t last),
                    (m, k, x, ldx, w, ldw, out, ldo, first, last))

#if defined(STRATA_VECTOR_TARGETS)
__attribute__((target("avx512f"))) void panel(int64_t m, int64_t k, const c10::BFloat16* x,
                                              int64_t ldx, const c10::BFloat16* w, int64_t ldw,
                                              float* out, int64_t ldo, int64_t first,
                                              int64_t last) {
  panel_of<Dot>(m, k, x, ldx, w, ldw, out, ldo, first, last);
}
#else
void panel(int64_t, int64_t, const c10::BFloat16*, int64_t, const c10::BFloat16*, int64_t, float*,
           int64_t, int64_t, int64_t) {
  __builtin_trap();  // never chosen: CpuInfo::bf16_dot needs the vector paths
}
#endif

template <typename X, typename W>
void product(int64_t m, int64_t n, int64_t k, const X* x, int64_t ldx, const W* w, int64_t ldw,
             float* out, int64_t ldo) {
  STRATA_CHECK(m >= 0 && n >= 0 && k >= 0, "skinny_gemm_nt: sizes m ", m, ", n ", n, ", k ", k);
  STRATA_CHECK(ldx >= k && ldw >= k && ldo >= n, "skinny_gemm_nt: row strides ldx ", ldx, ", ldw ",
               ldw, ", ldo ", ldo, " are shorter than the rows (k ", k, ", n ", n, ")");
  if (m == 0 || n == 0) return;
  const int64_t panels = (n + kPanel - 1) / kPanel;
  TaskQueue tasks(panels);
  // The thresholds count values: a bf16 weight streams half the bytes of a float32 one.
  const bool threaded = m * n * k >= kThreadedWork || n * k >= kThreadedWeight;
  const int64_t threads = threaded ? tasks.threads() : 1;
  run_on_threads(threads, [&] {
    for (int64_t task; tasks.take(task);) {
      const int64_t first = task * kPanel, last = std::min(n, (task + 1) * kPanel);
      panel(m, k, x, ldx, w, ldw, out, ldo, first, last);
    }
  });
}

}  // namespace

void skinny_gemm_nt(int64_t m, int64_t n, int64_t k, const float* x, int64_t ldx, const float* w,
                    int64_t ldw, float* out, int64_t ldo) {
  product(m, n, k, x, ldx, w, ldw, out, ldo);
}

void skinny_gemm_nt(int64_t m, int64_t n, int64_t k, const c10::BFloat16* x, int64_t ldx,
                    const c10::BFloat16* w, int64_t ldw, float* out, int64_t ldo) {
  if (cpu_info().bf16_dot) return product(m, n, k, x, ldx, w, ldw, out, ldo);
  STRATA_CHECK(m >= 0 && k >= 0 && ldx >= k, "skinny_gemm_nt: sizes m ", m, ", k ", k, ", ldx ",
               ldx);
  // x's few rows widened once (exact), not at every group of weight rows that reads them.
  std::vector<float> rows(static_cast<size_t>(m * k));
  for (int64_t i = 0; i < m; ++i) {
    for (int64_t l = 0; l < k; ++l) rows[i * k + l] = static_cast<float>(x[i * ldx + l]);
  }
  product(m, n, k, rows.data(), k, w, ldw, out, ldo);
}

}  // namespace strata
