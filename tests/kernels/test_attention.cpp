// The blockwise attention kernel against eager attention (matmul, causal mask, softmax,
// matmul): outputs and gradients in float64 (1e-10) and float32 (1e-5 relative) over shapes
// that cross tile edges, grouped-query ratios, one token, decoding after a cache, and query
// blocks that see none of the keys (as context parallelism will pass them); the log-sum-exp;
// float64 gradients against finite differences; bfloat16 inputs accumulate in float32.
#include <gtest/gtest.h>

#include <ATen/core/grad_mode.h>

#include <cmath>
#include <limits>
#include <string>

#include "strata/kernels/attention.h"
#include "strata/kernels/matmul.h"
#include "strata/kernels/tile_gemm.h"

namespace strata {
namespace {

constexpr double kInf = std::numeric_limits<double>::infinity();
constexpr int64_t kQ = kAttentionQueryTile, kK = kAttentionKeyTile;

struct Shape {
  int64_t B, H, K, Tq, Tk, D;
  int64_t query_position, key_position;  // absolute positions of row 0
};

std::string describe(const Shape& s) {
  return "B" + std::to_string(s.B) + " H" + std::to_string(s.H) + " K" + std::to_string(s.K) +
         " Tq" + std::to_string(s.Tq) + " Tk" + std::to_string(s.Tk) + " D" + std::to_string(s.D) +
         " positions " + std::to_string(s.query_position) + "/" + std::to_string(s.key_position);
}

// softmax(q k^T * scale, causal by position) v; rows that see no key give 0.
at::Tensor eager_attention(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
                           double scale, const Shape& s) {
  const int64_t group = s.H / s.K;
  at::Tensor keys = k.repeat_interleave(group, 1), values = v.repeat_interleave(group, 1);
  at::Tensor scores = at::matmul(q, keys.transpose(-2, -1)) * scale;
  at::Tensor query_at = at::arange(s.Tq, at::kLong) + s.query_position;
  at::Tensor key_at = at::arange(s.Tk, at::kLong) + s.key_position;
  at::Tensor future = key_at.unsqueeze(0) > query_at.unsqueeze(1);  // (Tq, Tk)
  at::Tensor probabilities = at::softmax(scores.masked_fill(future, -kInf), -1);
  probabilities = probabilities.masked_fill(at::isnan(probabilities), 0);
  return at::matmul(probabilities, values);
}

// Relative to the largest |want|; absolute where want is all zeros, as the gradients of q and
// k are with a single key (softmax of one score is 1 whatever the score), where the kernel's
// float32 rounding leaves ~1e-8 and eager's identical operations happen to cancel exactly.
double max_relative_error(const at::Tensor& got, const at::Tensor& want) {
  const double largest = want.abs().max().item<double>();
  const double scale = largest > 0 ? largest : 1.0;
  return (got.to(at::kDouble) - want.to(at::kDouble)).abs().max().item<double>() / scale;
}

struct Inputs {
  at::Tensor q, k, v, weights;  // weights: a random linear function of the output to differentiate
};

Inputs make_inputs(const Shape& s, at::ScalarType dtype, uint64_t seed) {
  at::manual_seed(seed);
  Inputs in;
  in.q = at::randn({s.B, s.H, s.Tq, s.D}, at::kDouble).to(dtype).requires_grad_(true);
  in.k = at::randn({s.B, s.K, s.Tk, s.D}, at::kDouble).to(dtype).requires_grad_(true);
  in.v = at::randn({s.B, s.K, s.Tk, s.D}, at::kDouble).to(dtype).requires_grad_(true);
  in.weights = at::randn({s.B, s.H, s.Tq, s.D}, at::kDouble).to(dtype);
  return in;
}

struct Result {
  at::Tensor out, dq, dk, dv;
};

template <typename Attention>
Result run(const Inputs& in, Attention attention) {
  for (const at::Tensor& x : {in.q, in.k, in.v}) {
    if (x.grad().defined()) x.mutable_grad().zero_();
  }
  at::Tensor out = attention(in.q, in.k, in.v);
  (out * in.weights).sum().backward();
  return {out.detach(), in.q.grad().clone(), in.k.grad().clone(), in.v.grad().clone()};
}

void expect_close(const Shape& s, at::ScalarType dtype, double tolerance) {
  const double scale = 1.0 / std::sqrt(static_cast<double>(s.D));
  const Inputs in = make_inputs(s, dtype, 7);
  const AttentionPositions positions{s.query_position, s.key_position};
  const Result blockwise = run(in, [&](auto& q, auto& k, auto& v) {
    return blockwise_attention(q, k, v, scale, positions);
  });
  const Result eager =
      run(in, [&](auto& q, auto& k, auto& v) { return eager_attention(q, k, v, scale, s); });
  EXPECT_LE(max_relative_error(blockwise.out, eager.out), tolerance) << describe(s) << " out";
  EXPECT_LE(max_relative_error(blockwise.dq, eager.dq), tolerance) << describe(s) << " dq";
  EXPECT_LE(max_relative_error(blockwise.dk, eager.dk), tolerance) << describe(s) << " dk";
  EXPECT_LE(max_relative_error(blockwise.dv, eager.dv), tolerance) << describe(s) << " dv";
}

std::vector<Shape> shapes() {
  return {
      {1, 1, 1, 1, 1, 4, 0, 0},            // one token, one head
      {2, 2, 2, 5, 5, 3, 0, 0},            // tiny, odd head dim
      {1, 4, 2, kQ + 6, kQ + 6, 8, 0, 0},  // GQA 2, past one query tile
      {2, 4, 1, 33, 33, 8, 0, 0},          // GQA 4 (multi-query)
      {1, 2, 2, 2 * kK + 44, 2 * kK + 44, 16, 0,
       0},                          // several query and key tiles, neither a multiple
      {1, 4, 2, 1, 77, 8, 76, 0},   // decoding one token after a 76-token cache
      {1, 2, 1, 20, 97, 8, 77, 0},  // a block of queries after a cache
      {1, 2, 2, kQ + 1, kK + 4, 8, kK + 4 - (kQ + 1),
       0},                          // the last query tile crosses a key-tile edge
      {2, 2, 2, 24, 24, 8, 24, 0},  // every key before every query (no mask)
      {1, 2, 2, 24, 24, 8, 0, 24},  // every key after every query: nothing seen
      {1, 4, 4, 40, 40, 8, 10, 0},  // queries shifted: the first rows see more keys
      {1, 2, 1, 40, 40, 8, 0, 10},  // keys shifted: the first 10 rows see none
  };
}

TEST(BlockwiseAttention, EqualsEagerInFloat64) {
  for (const Shape& s : shapes()) expect_close(s, at::kDouble, 1e-10);
}

TEST(BlockwiseAttention, EqualsEagerInFloat32) {
  for (const Shape& s : shapes()) expect_close(s, at::kFloat, 1e-5);
}

TEST(BlockwiseAttention, LogSumExpOfEachRow) {
  const int64_t T = kQ + 6;
  const Shape s{1, 2, 1, T, T, 8, 0, 5};
  const Inputs in = make_inputs(s, at::kDouble, 3);
  const double scale = 0.5;
  at::NoGradGuard no_grad;
  const AttentionForward result =
      blockwise_attention_forward(in.q, in.k, in.v, scale, AttentionPositions{0, 5});
  at::Tensor scores = at::matmul(in.q, in.k.repeat_interleave(2, 1).transpose(-2, -1)) * scale;
  at::Tensor future =
      (at::arange(T, at::kLong) + 5).unsqueeze(0) > at::arange(T, at::kLong).unsqueeze(1);
  at::Tensor want = at::logsumexp(scores.masked_fill(future, -kInf), -1);  // -inf: no key seen
  ASSERT_EQ(result.lse.sizes(), want.sizes());
  for (int64_t row = 0; row < T; ++row) {
    const double got = result.lse[0][1][row].item<double>(),
                 expected = want[0][1][row].item<double>();
    if (row < 5) {
      EXPECT_EQ(got, -kInf) << "row " << row << " sees no key";
      EXPECT_EQ(result.out[0][1][row].abs().sum().item<double>(), 0.0) << "row " << row;
    } else {
      EXPECT_NEAR(got, expected, 1e-12) << "row " << row;
    }
  }
}

TEST(BlockwiseAttention, GradientsMatchFiniteDifferences) {
  const Shape s{1, 2, 1, 6, 6, 3, 0, 0};
  Inputs in = make_inputs(s, at::kDouble, 11);
  const double scale = 0.7;
  const Result analytic =
      run(in, [&](auto& q, auto& k, auto& v) { return blockwise_attention(q, k, v, scale); });
  at::NoGradGuard no_grad;
  auto objective = [&] {
    return (blockwise_attention_forward(in.q, in.k, in.v, scale).out * in.weights)
        .sum()
        .item<double>();
  };
  const double h = 1e-6;
  for (auto [name, x, grad] :
       {std::tuple<const char*, at::Tensor, at::Tensor>{"q", in.q, analytic.dq},
        {"k", in.k, analytic.dk},
        {"v", in.v, analytic.dv}}) {
    at::Tensor flat = x.view(-1);
    at::Tensor flat_grad = grad.reshape(-1);
    for (int64_t i = 0; i < flat.numel(); ++i) {
      const double saved = flat[i].item<double>();
      flat[i] = saved + h;
      const double up = objective();
      flat[i] = saved - h;
      const double down = objective();
      flat[i] = saved;
      EXPECT_NEAR(flat_grad[i].item<double>(), (up - down) / (2 * h), 1e-7)
          << name << "[" << i << "]";
    }
  }
}

// The model passes q, k and v as transposed views of (B, T, heads, D) projections: rows of D
// contiguous values, heads interleaved. The kernel reads them in place; results and gradients
// must equal those from contiguous copies.
TEST(BlockwiseAttention, TransposedViewsEqualContiguousCopies) {
  const Shape s{2, 4, 2, kQ + 9, kQ + 9, 8, 0, 0};
  const Inputs in = make_inputs(s, at::kFloat, 13);
  auto as_view = [](const at::Tensor& x) {  // same values, (B, T, heads, D) memory
    return x.detach().transpose(1, 2).contiguous().transpose(1, 2).requires_grad_(true);
  };
  const Inputs views{as_view(in.q), as_view(in.k), as_view(in.v), in.weights};
  ASSERT_FALSE(views.q.is_contiguous());
  const double scale = 0.3;
  auto attention = [&](auto& q, auto& k, auto& v) { return blockwise_attention(q, k, v, scale); };
  const Result contiguous = run(in, attention), strided = run(views, attention);
  EXPECT_EQ(max_relative_error(strided.out, contiguous.out), 0.0) << "out";
  EXPECT_EQ(max_relative_error(strided.dq, contiguous.dq), 0.0) << "dq";
  EXPECT_EQ(max_relative_error(strided.dk, contiguous.dk), 0.0) << "dk";
  EXPECT_EQ(max_relative_error(strided.dv, contiguous.dv), 0.0) << "dv";
}

// The output and the gradients come in (B, T, heads, D) memory, in every dtype: the model
// reads the output as (B, T, heads * D) rows without a copy (so the out-projection's saved
// input is the tensor the kernel saved), and the gradients reach the projections likewise.
TEST(BlockwiseAttention, OutputAndGradientsAreTokenMajor) {
  const Shape s{2, 4, 2, kQ + 9, kQ + 9, 8, 0, 0};
  for (at::ScalarType dtype : {at::kFloat, at::kBFloat16, at::kDouble}) {
    const Inputs in = make_inputs(s, dtype, 17);
    const AttentionForward forward = [&] {
      at::NoGradGuard no_grad;
      return blockwise_attention_forward(in.q, in.k, in.v, 0.3);
    }();
    EXPECT_TRUE(forward.out.transpose(1, 2).is_contiguous()) << dtype;
    EXPECT_EQ(forward.out.scalar_type(), dtype);
    const AttentionGradients grads =
        blockwise_attention_backward(in.weights, in.q, in.k, in.v, forward.out, forward.lse, 0.3);
    for (const at::Tensor& g : {grads.dq, grads.dk, grads.dv}) {
      EXPECT_TRUE(g.transpose(1, 2).is_contiguous()) << dtype;
      EXPECT_EQ(g.scalar_type(), dtype);
    }
    // The model's view: rows of every head's D values, sharing the output's storage.
    const at::Tensor rows = forward.out.transpose(1, 2).reshape({s.B, s.Tq, s.H * s.D});
    EXPECT_EQ(rows.data_ptr(), forward.out.data_ptr()) << dtype;
  }
}

TEST(BlockwiseAttention, BFloat16AccumulatesInFloat32) {
  const Shape s{1, 4, 2, kQ + 6, kQ + 6, 16, 0, 0};
  const Inputs in = make_inputs(s, at::kBFloat16, 5);
  const double scale = 0.25;
  at::NoGradGuard no_grad;
  at::Tensor got = blockwise_attention_forward(in.q, in.k, in.v, scale).out;
  EXPECT_EQ(got.scalar_type(), at::kBFloat16);
  // The reference sees the same bfloat16 values, computed in float64: only the output's
  // rounding to bfloat16 (relative 2^-8) and float32 accumulation separate them.
  at::Tensor want =
      eager_attention(in.q.to(at::kDouble), in.k.to(at::kDouble), in.v.to(at::kDouble), scale, s);
  EXPECT_LE(max_relative_error(got, want), 8e-3);
}

// The bf16 products' route, which attention's bf16 tiles follow (tile_gemm.h): multiplied as
// bf16 (oneDNN's bf16 GEMM), or as float32 copies. Restores the defaults when it goes.
struct Bf16ProductsFor {
  explicit Bf16ProductsFor(bool in_float32) {
    const ProductRoute route = in_float32 ? ProductRoute{ProductPath::onednn_tile, true}
                                          : ProductRoute{ProductPath::aten, false};
    use_product_routes({{{at::kBFloat16, false, true}, route}});
  }
  ~Bf16ProductsFor() { use_product_routes({}); }
};

// bfloat16 and float16 inputs, forward and backward, against float64 on the same rounded
// values: outputs and gradients come back in the input's dtype, within its rounding; bf16 both
// with its tiles multiplied as bf16 (probabilities and score gradients rounded to bf16 too)
// and as float32 copies.
TEST(BlockwiseAttention, HalfPrecisionGradientsAccumulateInFloat32) {
  const Shape s{1, 4, 2, kK + 7, kK + 7, 16, 0, 0};
  for (auto [dtype, bf16_tiles] :
       {std::pair{at::kBFloat16, true}, {at::kBFloat16, false}, {at::kHalf, false}}) {
    const Bf16ProductsFor route(/*in_float32=*/!bf16_tiles);
    ASSERT_EQ(attention_tiles_in_bf16(), bf16_tiles && attention_tiles_in_bf16(false));
    const Inputs in = make_inputs(s, dtype, 17);
    const double scale = 0.25;
    const Result got =
        run(in, [&](auto& q, auto& k, auto& v) { return blockwise_attention(q, k, v, scale); });
    auto widened = [](const at::Tensor& x) {
      return x.detach().to(at::kDouble).requires_grad_(true);
    };
    const Inputs wide{widened(in.q), widened(in.k), widened(in.v), in.weights.to(at::kDouble)};
    const Result want =
        run(wide, [&](auto& q, auto& k, auto& v) { return eager_attention(q, k, v, scale, s); });
    const double tolerance = dtype == at::kBFloat16 ? 8e-3 : 1e-3;  // 2^-8 and 2^-11 rounding
    const std::string name = dtype == at::kHalf ? "float16"
                             : bf16_tiles       ? "bfloat16, bf16 tiles"
                                                : "bfloat16, float32 tiles";
    for (const at::Tensor& x : {got.out, got.dq, got.dk, got.dv}) EXPECT_EQ(x.scalar_type(), dtype);
    EXPECT_LE(max_relative_error(got.out, want.out), tolerance) << name << " out";
    EXPECT_LE(max_relative_error(got.dq, want.dq), tolerance) << name << " dq";
    EXPECT_LE(max_relative_error(got.dk, want.dk), tolerance) << name << " dk";
    EXPECT_LE(max_relative_error(got.dv, want.dv), tolerance) << name << " dv";
  }
}

// Where this machine multiplies bf16 tiles as bf16, they give other bits than the float32 copies
// (the rounded probabilities): the bf16 path really ran in the test above. And with or without,
// the output and each gradient are one rounding of the other's apart.
TEST(BlockwiseAttention, Bf16TilesDifferFromFloat32TilesOnlyByRounding) {
  const Shape s{2, 4, 2, kK + 7, kK + 7, 64, 0, 0};
  const Inputs in = make_inputs(s, at::kBFloat16, 23);
  const double scale = 0.125;
  auto attention = [&](auto& q, auto& k, auto& v) { return blockwise_attention(q, k, v, scale); };
  const Result widened = [&] {
    const Bf16ProductsFor route(/*in_float32=*/true);
    return run(in, attention);
  }();
  const Bf16ProductsFor route(/*in_float32=*/false);
  const Result bf16 = run(in, attention);
  const std::pair<const char*, std::pair<at::Tensor, at::Tensor>> pairs[] = {
      {"out", {bf16.out, widened.out}},
      {"dq", {bf16.dq, widened.dq}},
      {"dk", {bf16.dk, widened.dk}},
      {"dv", {bf16.dv, widened.dv}}};
  for (const auto& [name, pair] : pairs) {
    EXPECT_LE(max_relative_error(pair.first, pair.second), 1.6e-2) << name;
    EXPECT_EQ(at::equal(pair.first, pair.second), !attention_tiles_in_bf16()) << name;
  }
}

// bf16 and float16 inputs multiplied as float32 are widened tile by tile, summed in float32 and
// rounded once: exactly the bits of the kernel run on float32 copies of the inputs with its
// results rounded, as it ran before the tiles were widened in place. Forward and backward, over
// tile edges, grouped-query heads, a cache and a document mask.
TEST(BlockwiseAttention, WidenedTilesEqualFloat32CopiesRounded) {
  struct TilesAsFloat32 {
    TilesAsFloat32() { use_attention_tiles(false); }
    ~TilesAsFloat32() { use_attention_tiles(std::nullopt); }
  } as_float32;
  const Shape shapes[] = {{2, 4, 2, kK + 7, kK + 7, 64, 0, 0},
                          {1, 2, 1, 20, 2 * kK + 3, 8, 2 * kK - 17, 0}};
  for (const Shape& s : shapes) {
    for (at::ScalarType dtype : {at::kBFloat16, at::kHalf}) {
      for (bool views : {false, true}) {
        const std::string name = describe(s) + (dtype == at::kHalf ? " float16" : " bfloat16") +
                                 (views ? ", (B, T, heads, D) views" : "");
        Inputs in = make_inputs(s, dtype, 29);
        if (views) {  // as the model passes them: rows heads * D apart
          auto view = [](const at::Tensor& x) {
            return x.detach().transpose(1, 2).contiguous().transpose(1, 2);
          };
          in = {view(in.q), view(in.k), view(in.v), view(in.weights)};
        }
        at::NoGradGuard no_grad;
        const double scale = 0.125;
        const AttentionPositions positions{s.query_position, s.key_position};
        // Two documents per batch row, the second from the middle of the keys.
        const at::Tensor key_documents = (at::arange(s.Tk, at::kLong) >= s.Tk / 2)
                                             .to(at::kLong)
                                             .expand({s.B, s.Tk})
                                             .contiguous();
        const AttentionDocuments documents{
            key_documents.narrow(1, s.query_position - s.key_position, s.Tq).contiguous(),
            key_documents};
        auto wide = [](const at::Tensor& x) { return x.detach().to(at::kFloat); };
        const AttentionForward got =
            blockwise_attention_forward(in.q, in.k, in.v, scale, positions, documents);
        const AttentionForward want = blockwise_attention_forward(
            wide(in.q), wide(in.k), wide(in.v), scale, positions, documents);
        EXPECT_EQ(got.out.scalar_type(), dtype) << name;
        EXPECT_TRUE(at::equal(got.out, want.out.to(dtype))) << name << " out";
        EXPECT_TRUE(at::equal(got.lse, want.lse)) << name << " lse";
        EXPECT_EQ(got.skipped_tiles, want.skipped_tiles) << name;
        const at::Tensor dout = in.weights;
        const AttentionGradients grads = blockwise_attention_backward(
            dout, in.q, in.k, in.v, got.out, got.lse, scale, positions, documents);
        const AttentionGradients wants =
            blockwise_attention_backward(wide(dout), wide(in.q), wide(in.k), wide(in.v),
                                         wide(got.out), got.lse, scale, positions, documents);
        EXPECT_TRUE(at::equal(grads.dq, wants.dq.to(dtype))) << name << " dq";
        EXPECT_TRUE(at::equal(grads.dk, wants.dk.to(dtype))) << name << " dk";
        EXPECT_TRUE(at::equal(grads.dv, wants.dv.to(dtype))) << name << " dv";
        EXPECT_GT(grads.dq.abs().sum().item<double>(), 0) << name;
      }
    }
  }
}

}  // namespace
}  // namespace strata
