// The decode attention kernel against eager attention over the gathered slots: float64 (1e-12)
// and float32 (1e-5 relative), with grouped-query heads, scattered slot tables of different
// lengths (one key, D not a multiple of the lanes), a contiguous cache read through strides,
// bfloat16 inputs accumulating in float32 (the scores on AVX512-BF16's dot product where the
// CPU has it), the rows it must leave alone, and bad input.
#include <gtest/gtest.h>

#include <ATen/ATen.h>

#include <cstdio>
#include <random>
#include <vector>

#include "strata/core/error.h"
#include "strata/kernels/cpu.h"
#include "strata/kernels/decode_attention.h"
#include "strata/kernels/score_rows.h"

namespace strata {
namespace {

// softmax(q[row] keys[slots]^T * scale) values[slots], each query head on its kv head.
at::Tensor eager_row(const at::Tensor& q, const at::Tensor& keys, const at::Tensor& values,
                     const DecodeQuery& query, double scale) {
  const int64_t group = q.size(1) / keys.size(1);
  at::Tensor slots = at::tensor(std::vector<int64_t>(query.slots, query.slots + query.length));
  at::Tensor k = keys.index_select(0, slots).to(at::kDouble).repeat_interleave(group, 1);
  at::Tensor v = values.index_select(0, slots).to(at::kDouble).repeat_interleave(group, 1);
  at::Tensor qr = q[query.row].to(at::kDouble);                   // (H, D)
  at::Tensor scores = at::einsum("hd,lhd->hl", {qr, k}) * scale;  // (H, L)
  return at::einsum("hl,lhd->hd", {at::softmax(scores, -1), v});
}

double max_relative_error(const at::Tensor& got, const at::Tensor& want) {
  return (got.to(at::kDouble) - want).abs().max().item<double>() / want.abs().max().item<double>();
}

struct Case {
  int64_t N, H, K, D, slots;
  std::vector<int64_t> lengths;  // per query, on rows 0, 2, 4, ...
};

// Random inputs, random distinct slots per query; checks every query row against eager and
// that the rows between them keep the value out started with.
void check(const Case& c, at::ScalarType dtype, double tolerance) {
  at::manual_seed(7);
  const at::Tensor q = at::randn({c.N, c.H, c.D}, at::kDouble).to(dtype);
  const at::Tensor keys = at::randn({c.slots, c.K, c.D}, at::kDouble).to(dtype);
  const at::Tensor values = at::randn({c.slots, c.K, c.D}, at::kDouble).to(dtype);
  std::mt19937_64 random(11);
  std::vector<std::vector<int64_t>> tables;
  std::vector<DecodeQuery> queries;
  for (size_t i = 0; i < c.lengths.size(); ++i) {
    std::vector<int64_t> all(c.slots);
    for (int64_t s = 0; s < c.slots; ++s) all[s] = s;
    std::shuffle(all.begin(), all.end(), random);
    tables.emplace_back(all.begin(), all.begin() + c.lengths[i]);
  }
  for (size_t i = 0; i < tables.size(); ++i) {
    queries.push_back({static_cast<int64_t>(2 * i), tables[i].data(), c.lengths[i]});
  }
  at::Tensor out = at::full({c.N, c.H, c.D}, 5.0, at::TensorOptions(dtype));
  const double scale = 0.3;
  decode_attention(q, keys, values, queries, scale, out);
  for (const DecodeQuery& query : queries) {
    EXPECT_LT(max_relative_error(out[query.row], eager_row(q, keys, values, query, scale)),
              tolerance)
        << "row " << query.row << " of " << query.length << " keys, H" << c.H << " K" << c.K << " D"
        << c.D;
  }
  for (int64_t row = 1; row < c.N; row += 2) {
    EXPECT_TRUE(out[row].eq(5.0).all().item<bool>()) << "row " << row << " was not a query";
  }
}

const std::vector<Case> kCases = {
    {1, 1, 1, 8, 4, {1}},                   // one key: the output is its value
    {7, 4, 4, 32, 300, {1, 17, 300, 48}},   // scattered tables, one the whole pool
    {9, 8, 2, 19, 64, {3, 64, 16, 5, 31}},  // grouped-query heads, D off the lanes
    {4, 6, 1, 64, 100, {100, 2}},           // one kv head for all (multi-query)
    {2, 2, 1, 288, 8, {8}},                 // a head above kMaxDotScoreHead (bf16: widened)
};

TEST(DecodeAttention, MatchesEagerInFloat64) {
  for (const Case& c : kCases) check(c, at::kDouble, 1e-12);
}

TEST(DecodeAttention, MatchesEagerInFloat32) {
  for (const Case& c : kCases) check(c, at::kFloat, 1e-5);
}

TEST(DecodeAttention, AccumulatesBFloat16InFloat32) {
  // Inputs and output are rounded to bfloat16 (8 bits of mantissa); the sums in between are not.
  for (const Case& c : kCases) check(c, at::kBFloat16, 1e-2);
}

// The bf16 query's scores on AVX512-BF16's dot product (what the bf16 cases above run on such a
// CPU): scale (q . k_j) over gathered rows, against float64 within float32 roundings of the
// terms, for D that ends inside a pair and inside a vector. The kernel exists only where the
// CPU has the instruction; elsewhere decode attention widens (and CpuInfo says why).
TEST(DecodeAttention, Bf16QueryScoresOnTheDotProduct) {
  const CpuInfo& cpu = cpu_info();
  EXPECT_EQ(cpu.bf16_dot, cpu.avx512_bf16 && cpu.vector_path == VectorPath::avx512);
  std::printf("[ bf16     ] decode scores %s\n",
              cpu.bf16_dot ? "on the AVX512-BF16 dot product" : "widened to float32");
  if (!cpu.bf16_dot) return;
  at::manual_seed(5);
  for (const int64_t D : {int64_t{1}, int64_t{19}, int64_t{32}, int64_t{33}, int64_t{64},
                          int64_t{80}, kMaxDotScoreHead}) {
    const at::Tensor q = at::randn({D}).to(at::kBFloat16);
    const at::Tensor rows = at::randn({40, D + 3}).to(at::kBFloat16);  // strided rows
    const std::vector<int64_t> slots = {39, 0, 7, 7, 21};
    std::vector<float> scores(slots.size());
    gathered_scores_row(q.data_ptr<at::BFloat16>(), rows.data_ptr<at::BFloat16>(), D + 3,
                        slots.data(), static_cast<int64_t>(slots.size()), D, 0.25f, scores.data());
    for (size_t j = 0; j < slots.size(); ++j) {
      const at::Tensor key = rows[slots[j]].narrow(0, 0, D).to(at::kDouble);
      const at::Tensor terms = q.to(at::kDouble) * key;
      const double want = 0.25 * terms.sum().item<double>();
      EXPECT_NEAR(scores[j], want, 1e-6 * terms.abs().sum().item<double>() + 1e-30)
          << "D " << D << " slot " << slots[j];
    }
  }
}

TEST(DecodeAttention, ReadsAContiguousCacheThroughItsStrides) {
  // A generation cache (B, K, T, D): batch 1's keys as (T, K, D) slots, positions in order.
  at::manual_seed(3);
  const int64_t B = 2, H = 4, K = 2, T = 21, D = 16;
  const at::Tensor cache_k = at::randn({B, K, T, D}, at::kDouble);
  const at::Tensor cache_v = at::randn({B, K, T, D}, at::kDouble);
  const at::Tensor q = at::randn({1, H, D}, at::kDouble);
  const at::Tensor keys = cache_k[1].transpose(0, 1), values = cache_v[1].transpose(0, 1);
  std::vector<int64_t> positions(T);
  for (int64_t t = 0; t < T; ++t) positions[t] = t;
  const DecodeQuery query{0, positions.data(), T};
  at::Tensor out = at::empty_like(q);
  decode_attention(q, keys, values, {query}, 0.25, out);
  EXPECT_LT(max_relative_error(out[0], eager_row(q, keys, values, query, 0.25)), 1e-12);
}

TEST(DecodeAttention, MapsARanksQueryHeadsOntoEveryKvHead) {
  // 6 heads on 3 kv heads split over 2 tp ranks: rank 1's heads 3, 4, 5 read kv heads 1, 2, 2.
  at::manual_seed(5);
  const int64_t D = 8, slots = 12;
  const at::Tensor q = at::randn({1, 3, D}, at::kDouble);
  const at::Tensor keys = at::randn({slots, 3, D}, at::kDouble);
  const at::Tensor values = at::randn({slots, 3, D}, at::kDouble);
  std::vector<int64_t> table = {4, 0, 9, 2, 11};
  const DecodeQuery query{0, table.data(), 5};
  at::Tensor out = at::empty_like(q);
  decode_attention(q, keys, values, {query}, 0.5, out, {3, 2});
  const std::vector<int64_t> kv_of = {1, 2, 2};
  for (int64_t h = 0; h < 3; ++h) {
    const at::Tensor one_head = q.narrow(1, h, 1);
    const at::Tensor want =
        eager_row(one_head, keys.narrow(1, kv_of[h], 1), values.narrow(1, kv_of[h], 1), query, 0.5);
    EXPECT_LT(max_relative_error(out.narrow(1, h, 1)[0], want), 1e-12) << "head " << h;
  }
  EXPECT_THROW(decode_attention(q, keys, values, {query}, 0.5, out, {5, 2}), InternalError);
}

TEST(DecodeAttention, RefusesSlotsOutsideTheCacheAndMismatchedShapes) {
  const at::Tensor q = at::zeros({2, 4, 8}), keys = at::zeros({10, 2, 8});
  at::Tensor out = at::zeros_like(q);
  const std::vector<int64_t> slots = {0, 10};
  EXPECT_THROW(decode_attention(q, keys, keys, {{0, slots.data(), 2}}, 1.0, out), InternalError);
  EXPECT_THROW(decode_attention(q, keys, keys, {{2, slots.data(), 1}}, 1.0, out), InternalError);
  const at::Tensor three_kv = at::zeros({10, 3, 8});
  EXPECT_THROW(decode_attention(q, three_kv, three_kv, {{0, slots.data(), 1}}, 1.0, out),
               InternalError);
}

}  // namespace
}  // namespace strata
