// skinny_gemm_nt against ATen's mm in float64: every row count from 1 to kSkinnyRows + 3 (the
// 4-row blocks and each remainder), column counts that leave 1, 2 and 3 columns of a group and
// a partial panel, k that ends inside a vector, row strides wider than the rows, exactly sized
// operands, shapes that run on two threads (for their work, for their weight); each row's bits
// do not depend on the other rows of the call, on the row count or on the thread count (what
// serving's determinism rests on); bf16 operands give the bits of their float32 copies, from
// memory read as bf16, or AVX512-BF16's dot product where the CPU has it; linear's forward takes
// this path for a few rows and the others beyond; empty sizes; bad sizes and strides refused.
#include <gtest/gtest.h>

#include <ATen/ATen.h>
#include <ATen/Parallel.h>

#include <cstdio>
#include <limits>
#include <string>
#include <tuple>

#include "strata/kernels/cpu.h"
#include "strata/kernels/skinny_gemm.h"
#include "strata/parallel/linear.h"

namespace strata {
namespace {

// A row-major matrix of `rows` x `cols` stored with `spare` extra columns per row.
at::Tensor padded(int64_t rows, int64_t cols, int64_t spare = 3) {
  return at::randn({rows, cols + spare}).narrow(1, 0, cols);
}

// out = x w^T through the kernel, into a NaN-filled output with spare columns (which must stay
// NaN: the kernel writes only its m x n).
at::Tensor skinny(const at::Tensor& x, const at::Tensor& w) {
  const int64_t m = x.size(0), n = w.size(0), k = x.size(1);
  at::Tensor out = at::full({m, n + 2}, std::numeric_limits<float>::quiet_NaN());
  skinny_gemm_nt(m, n, k, x.data_ptr<float>(), x.stride(0), w.data_ptr<float>(), w.stride(0),
                 out.data_ptr<float>(), out.stride(0));
  EXPECT_TRUE(out.narrow(1, n, 2).isnan().all().item<bool>()) << "wrote past column " << n;
  return out.narrow(1, 0, n);
}

void expect_product(int64_t m, int64_t n, int64_t k) {
  at::manual_seed(m * 10007 + n * 101 + k);
  const at::Tensor x = padded(m, k), w = padded(n, k, 5);
  const at::Tensor got = skinny(x, w).to(at::kDouble);
  const at::Tensor want = at::mm(x.to(at::kDouble), w.to(at::kDouble).t());
  // float32 products summed in float32: k roundings of terms of size ~1 each.
  const double error = (got - want).abs().max().item<double>();
  EXPECT_LE(error, 2e-6 * k) << "m " << m << " n " << n << " k " << k;
}

TEST(SkinnyGemm, MatchesFloat64ForEveryRowCount) {
  for (int64_t m = 1; m <= kSkinnyRows + 3; ++m) expect_product(m, 70, 37);
}

TEST(SkinnyGemm, MatchesFloat64AcrossColumnsAndDepths) {
  for (int64_t n : {1, 2, 3, 4, 5, 63, 64, 65, 131}) {
    for (int64_t k : {1, 15, 16, 17, 100, 256}) expect_product(5, n, k);
  }
}

// ATen's thread count for one scope (the kernel splits the columns over ATen's threads).
class Threads {
 public:
  explicit Threads(int count) : previous_(at::get_num_threads()) { at::set_num_threads(count); }
  ~Threads() { at::set_num_threads(previous_); }

 private:
  const int previous_;
};

TEST(SkinnyGemm, MatchesFloat64WhenThreaded) {
  const Threads two(2);
  expect_product(8, 1024, 768);  // 6.3 M multiply-adds: threaded for the work
  expect_product(1, 2048, 512);  // 1 M multiply-adds: threaded for its weight of 2^20 values
}

// Operands of exactly their size, k ending inside a vector: a load past the last row's end
// would leave the allocation (the sanitizer build sees it).
TEST(SkinnyGemm, ReadsNothingPastItsOperands) {
  at::manual_seed(11);
  for (int64_t m : {1, 3, 4, 6}) {
    const at::Tensor x = at::randn({m, 37}), w = at::randn({7, 37});
    at::Tensor out = at::empty({m, 7});
    skinny_gemm_nt(m, 7, 37, x.data_ptr<float>(), 37, w.data_ptr<float>(), 37,
                   out.data_ptr<float>(), 7);
    const at::Tensor want = at::mm(x.to(at::kDouble), w.to(at::kDouble).t());
    EXPECT_LE((out.to(at::kDouble) - want).abs().max().item<double>(), 1e-4) << "m " << m;
  }
}

// Row i of a product equals row i computed alone, for every row count, and equals it again on
// one thread: a decoding sequence's logits do not depend on the batch it shared a step with.
TEST(SkinnyGemm, EachRowIsTheSameWhateverSharesTheCall) {
  at::manual_seed(7);
  for (auto [n, k] : {std::pair<int64_t, int64_t>{96, 33}, {1024, 768}}) {
    const at::Tensor x = padded(kSkinnyRows, k), w = padded(n, k);
    const at::Tensor all = skinny(x, w).clone();
    for (int64_t m : {int64_t{1}, int64_t{3}, int64_t{4}, int64_t{13}}) {
      const at::Tensor first = skinny(x.narrow(0, 0, m), w);
      EXPECT_TRUE(at::equal(first, all.narrow(0, 0, m))) << "m " << m << " n " << n;
      const at::Tensor last = skinny(x.narrow(0, kSkinnyRows - m, m), w);
      EXPECT_TRUE(at::equal(last, all.narrow(0, kSkinnyRows - m, m))) << "m " << m << " n " << n;
    }
    at::Tensor one_thread, two_threads;
    {
      const Threads one(1);
      one_thread = skinny(x, w).clone();
    }
    {
      const Threads two(2);
      two_threads = skinny(x, w).clone();
    }
    EXPECT_TRUE(at::equal(one_thread, all)) << "n " << n;
    EXPECT_TRUE(at::equal(two_threads, all)) << "n " << n;
  }
}

// out = x w^T of bf16 operands through the kernel, checked as skinny() checks it.
at::Tensor skinny_bf16(const at::Tensor& x, const at::Tensor& w) {
  const int64_t m = x.size(0), n = w.size(0), k = x.size(1);
  at::Tensor out = at::full({m, n + 2}, std::numeric_limits<float>::quiet_NaN());
  skinny_gemm_nt(m, n, k, x.data_ptr<at::BFloat16>(), x.stride(0), w.data_ptr<at::BFloat16>(),
                 w.stride(0), out.data_ptr<float>(), out.stride(0));
  EXPECT_TRUE(out.narrow(1, n, 2).isnan().all().item<bool>()) << "wrote past column " << n;
  return out.narrow(1, 0, n);
}

// bf16 operands, for every row count of the blocks, columns that leave partial groups and
// panels, k that ends inside a vector (or a pair), strided rows, threaded or not; operands of
// exactly their size are read no further (the sanitizer build sees a load past the end). Where
// the kernels add bf16 pairs with AVX512-BF16's dot product (CpuInfo::bf16_dot) its roundings
// are not float32's: the product is checked against float64, each row's bits against the row
// computed alone and on one thread, and the instruction against the widened sums it replaces
// (which some of 8 x 1024 outputs at k = 768 must differ from). Elsewhere (and on the avx2 and
// generic paths, which the tests also run) the bits are those of the operands' float32 copies.
TEST(SkinnyGemm, Bf16OperandsMatchTheirFloat32CopiesAndEachRowAlone) {
  at::manual_seed(17);
  const bool dot = cpu_info().bf16_dot;
  std::printf("[ bf16     ] %s\n", dot ? "AVX512-BF16 dot product" : "widened to float32");
  const Threads two(2);
  for (auto [m, n, k] : {std::tuple<int64_t, int64_t, int64_t>{1, 70, 37},
                         {3, 5, 16},
                         {2, 9, 33},
                         {4, 131, 100},
                         {7, 65, 1},
                         {kSkinnyRows, 64, 17},
                         {8, 1024, 768}}) {
    const at::Tensor x = padded(m, k).to(at::kBFloat16), w = padded(n, k, 5).to(at::kBFloat16);
    const at::Tensor out = skinny_bf16(x, w);
    const at::Tensor widened = skinny(x.to(at::kFloat).contiguous(), w.to(at::kFloat).contiguous());
    const std::string shape =
        "m " + std::to_string(m) + " n " + std::to_string(n) + " k " + std::to_string(k);
    if (!dot) {
      EXPECT_TRUE(at::equal(out, widened)) << shape;
      continue;
    }
    const at::Tensor want = at::mm(x.to(at::kDouble), w.to(at::kDouble).t());
    EXPECT_LE((out.to(at::kDouble) - want).abs().max().item<double>(), 2e-6 * k) << shape;
    for (int64_t i = 0; i < m; ++i) {
      EXPECT_TRUE(at::equal(out[i], skinny_bf16(x.narrow(0, i, 1), w)[0])) << shape << " row " << i;
    }
    {
      const Threads one(1);
      EXPECT_TRUE(at::equal(out, skinny_bf16(x, w))) << shape << " on one thread";
    }
    if (k == 768) {
      EXPECT_FALSE(at::equal(out, widened)) << shape << ": not the dot product's sums";
    }
  }
}

TEST(SkinnyGemm, EmptySizesWriteNothing) {
  const at::Tensor x = at::randn({4, 8}), w = at::randn({6, 8});
  at::Tensor out = at::full({4, 6}, 5.0f);
  skinny_gemm_nt(0, 6, 8, x.data_ptr<float>(), 8, w.data_ptr<float>(), 8, out.data_ptr<float>(), 6);
  skinny_gemm_nt(4, 0, 8, x.data_ptr<float>(), 8, w.data_ptr<float>(), 8, out.data_ptr<float>(), 6);
  EXPECT_TRUE(at::equal(out, at::full({4, 6}, 5.0f)));
  // k = 0: every output is the empty sum.
  skinny_gemm_nt(4, 6, 0, x.data_ptr<float>(), 8, w.data_ptr<float>(), 8, out.data_ptr<float>(), 6);
  EXPECT_TRUE(at::equal(out, at::zeros({4, 6})));
}

TEST(SkinnyGemm, RefusesNegativeSizesAndShortStrides) {
  const at::Tensor x = at::randn({4, 8}), w = at::randn({6, 8});
  at::Tensor out = at::empty({4, 6});
  const float* xp = x.data_ptr<float>();
  const float* wp = w.data_ptr<float>();
  float* op = out.data_ptr<float>();
  EXPECT_THROW(skinny_gemm_nt(-1, 6, 8, xp, 8, wp, 8, op, 6), std::exception);
  EXPECT_THROW(skinny_gemm_nt(4, 6, 8, xp, 7, wp, 8, op, 6), std::exception);  // ldx < k
  EXPECT_THROW(skinny_gemm_nt(4, 6, 8, xp, 8, wp, 7, op, 6), std::exception);  // ldw < k
  EXPECT_THROW(skinny_gemm_nt(4, 6, 8, xp, 8, wp, 8, op, 5), std::exception);  // ldo < n
}

// linear's forward on a few float32 rows is this kernel's product, bit for bit, and its
// gradients still match float64 (the backward's products are not few-row ones); bf16 rows are
// the kernel's bf16 product, rounded; one row more than kSkinnyRows and a weight of the wrong
// width take or refuse the other paths.
TEST(SkinnyGemm, IsLinearsForwardForAFewRows) {
  at::manual_seed(3);
  const at::Tensor x = at::randn({2, 5, 64}).requires_grad_(true);
  const at::Tensor w = at::randn({48, 64}).requires_grad_(true);
  const at::Tensor y = strata::linear(x, w);
  const at::Tensor flat = x.detach().reshape({10, 64}).contiguous();
  EXPECT_TRUE(at::equal(y.detach().reshape({10, 48}), skinny(flat, w.detach().contiguous())));
  const at::Tensor dy = at::randn({2, 5, 48});
  y.backward(dy);
  const at::Tensor xd = x.detach().to(at::kDouble), wd = w.detach().to(at::kDouble);
  const at::Tensor dyd = dy.to(at::kDouble);
  EXPECT_LE((x.grad().to(at::kDouble) - at::matmul(dyd, wd)).abs().max().item<double>(), 1e-4);
  EXPECT_LE((w.grad().to(at::kDouble) - at::matmul(dyd.reshape({10, 48}).t(), xd.reshape({10, 64})))
                .abs()
                .max()
                .item<double>(),
            1e-4);

  const at::Tensor many = at::randn({kSkinnyRows + 1, 64});
  const at::Tensor many_want = at::mm(many.to(at::kDouble), w.detach().to(at::kDouble).t());
  EXPECT_LE(
      (strata::linear(many, w.detach()).to(at::kDouble) - many_want).abs().max().item<double>(),
      1e-4);
  const at::Tensor half = strata::linear(flat.to(at::kBFloat16), w.detach().to(at::kBFloat16));
  EXPECT_EQ(half.scalar_type(), at::kBFloat16);
  const at::Tensor half_want =
      skinny(flat.to(at::kBFloat16).to(at::kFloat), w.detach().to(at::kBFloat16).to(at::kFloat));
  EXPECT_TRUE(at::equal(half, half_want.to(at::kBFloat16)));
  EXPECT_THROW(strata::linear(flat, at::randn({48, 63})), std::exception);
}

}  // namespace
}  // namespace strata
