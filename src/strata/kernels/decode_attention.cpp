// Decode attention (decode_attention.h): for one (query, head) task, the scaled scores of its
// keys go into a scratch row, one softmax pass makes them probabilities (score_rows.h), and the
// output is their weighted sum of value rows, accumulated in the accumulation dtype and
// written once. float and bf16 rows go through score_rows' vectorized gathers (a bf16 query's
// scores on AVX512-BF16's dot product where the CPU has it); the other dtypes convert element
// by element.
#include "strata/kernels/decode_attention.h"

#include <algorithm>
#include <limits>
#include <type_traits>
#include <vector>

#include "strata/core/error.h"
#include "strata/kernels/cpu.h"
#include "strata/kernels/score_rows.h"
#include "strata/kernels/thread_team.h"

namespace strata {
namespace {

// Rows of a (rows, heads, D) tensor as raw memory.
template <typename scalar_t>
struct HeadRows {
  scalar_t* data;
  int64_t row_stride, head_stride;

  explicit HeadRows(const at::Tensor& x)
      : data(x.data_ptr<scalar_t>()), row_stride(x.stride(0)), head_stride(x.stride(1)) {}
  scalar_t* at(int64_t row, int64_t head) const {
    return data + row * row_stride + head * head_stride;
  }
};

// q . k over D, in kLanes independent partial sums the compiler keeps in one vector register
// (a single running sum would be a chain it may not reorder).
template <typename acc_t, typename scalar_t>
acc_t dot(const acc_t* q, const scalar_t* k, int64_t D) {
  constexpr int64_t kLanes = 16;
  acc_t lanes[kLanes] = {};
  int64_t d = 0;
  for (; d + kLanes <= D; d += kLanes) {
    for (int64_t l = 0; l < kLanes; ++l) lanes[l] += q[d + l] * static_cast<acc_t>(k[d + l]);
  }
  acc_t sum = 0;
  for (; d < D; ++d) sum += q[d] * static_cast<acc_t>(k[d]);
  for (int64_t l = 0; l < kLanes; ++l) sum += lanes[l];
  return sum;
}

template <typename scalar_t, typename acc_t>
void decode_tasks(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
                  const std::vector<DecodeQuery>& queries, double scale, at::Tensor& out,
                  DecodeHeads heads) {
  const HeadRows<scalar_t> queries_in(q), keys(k), values(v), outputs(out);
  const int64_t H = q.size(1), D = q.size(2);
  int64_t longest = 0;
  for (const DecodeQuery& query : queries) longest = std::max(longest, query.length);
  // Larger heads (none of the families read today) take the widening scores.
  const bool dot_scores =
      std::is_same_v<scalar_t, at::BFloat16> && cpu_info().bf16_dot && D <= kMaxDotScoreHead;
  TaskQueue tasks(static_cast<int64_t>(queries.size()) * H);
  run_on_threads(tasks.threads(), [&] {
    std::vector<acc_t> scores(longest), q_row(D), o_row(D);
    for (int64_t task; tasks.take(task);) {
      const DecodeQuery& query = queries[task / H];
      const int64_t h = task % H, g = (heads.first + h) / heads.group, L = query.length;
      const scalar_t* q_in = queries_in.at(query.row, h);
      if constexpr (std::is_same_v<scalar_t, at::BFloat16>) {
        if (dot_scores) {  // the query as stored against the keys, in AVX512-BF16's pairs
          gathered_scores_row(q_in, keys.at(0, g), keys.row_stride, query.slots, L, D,
                              static_cast<float>(scale), scores.data());
        }
      }
      if (!dot_scores) {  // the scaled query in the accumulation dtype against each key
        for (int64_t d = 0; d < D; ++d) q_row[d] = static_cast<acc_t>(q_in[d]) * scale;
        if constexpr (std::is_same_v<scalar_t, float> || std::is_same_v<scalar_t, at::BFloat16>) {
          gathered_scores_row(q_row.data(), keys.at(0, g), keys.row_stride, query.slots, L, D,
                              scores.data());
        } else {
          for (int64_t j = 0; j < L; ++j) {
            scores[j] = dot(q_row.data(), keys.at(query.slots[j], g), D);
          }
        }
      }
      acc_t max = -std::numeric_limits<acc_t>::infinity(), sum = 0;
      online_softmax_row(scores.data(), L, L, max, sum);
      if constexpr (std::is_same_v<scalar_t, float> || std::is_same_v<scalar_t, at::BFloat16>) {
        gathered_weighted_sum(scores.data(), values.at(0, g), values.row_stride, query.slots, L, D,
                              o_row.data());
      } else {
        std::fill(o_row.begin(), o_row.end(), acc_t{0});
        for (int64_t j = 0; j < L; ++j) {
          const scalar_t* v_row = values.at(query.slots[j], g);
          const acc_t p = scores[j];
          for (int64_t d = 0; d < D; ++d) o_row[d] += p * static_cast<acc_t>(v_row[d]);
        }
      }
      scalar_t* o = outputs.at(query.row, h);
      for (int64_t d = 0; d < D; ++d) o[d] = static_cast<scalar_t>(o_row[d] / sum);
    }
  });
}

}  // namespace

void decode_attention(const at::Tensor& q, const at::Tensor& keys, const at::Tensor& values,
                      const std::vector<DecodeQuery>& queries, double scale, at::Tensor& out,
                      DecodeHeads heads) {
  STRATA_CHECK(q.dim() == 3 && keys.dim() == 3 && keys.sizes() == values.sizes() &&
                   out.sizes() == q.sizes() && keys.size(2) == q.size(2) && keys.size(1) >= 1,
               "decode attention shapes: q ", q.sizes(), ", keys ", keys.sizes(), ", values ",
               values.sizes(), ", out ", out.sizes());
  if (heads.group == 0) {
    STRATA_CHECK(q.size(1) % keys.size(1) == 0, "decode attention: ", keys.size(1),
                 " kv heads do not divide ", q.size(1), " query heads");
    heads.group = q.size(1) / keys.size(1);
  }
  STRATA_CHECK(heads.first >= 0 && heads.group >= 1 &&
                   (heads.first + q.size(1) - 1) / heads.group < keys.size(1),
               "decode attention: query heads ", heads.first, "..", heads.first + q.size(1) - 1,
               " in groups of ", heads.group, " need more than ", keys.size(1), " kv heads");
  const at::ScalarType dtype = q.scalar_type();
  STRATA_CHECK(
      keys.scalar_type() == dtype && values.scalar_type() == dtype && out.scalar_type() == dtype,
      "decode attention: q, keys, values and out differ in dtype");
  for (const at::Tensor* x : {&q, &keys, &values, static_cast<const at::Tensor*>(&out)}) {
    STRATA_CHECK(x->stride(2) == 1, "decode attention wants rows of D contiguous, got strides ",
                 x->strides());
  }
  const int64_t slots = keys.size(0), rows = q.size(0);
  std::vector<bool> taken(rows, false);  // two tasks writing one row would race
  for (const DecodeQuery& query : queries) {
    STRATA_CHECK(query.row >= 0 && query.row < rows && query.length >= 1 && !taken[query.row],
                 "decode query of row ", query.row, " and ", query.length, " keys (each row once)");
    taken[query.row] = true;
    for (int64_t j = 0; j < query.length; ++j) {
      STRATA_CHECK(query.slots[j] >= 0 && query.slots[j] < slots, "decode query slot ",
                   query.slots[j], " outside the cache's ", slots);
    }
  }
  if (queries.empty()) return;
  switch (dtype) {
    case at::kDouble:
      return decode_tasks<double, double>(q, keys, values, queries, scale, out, heads);
    case at::kFloat:
      return decode_tasks<float, float>(q, keys, values, queries, scale, out, heads);
    case at::kBFloat16:
      return decode_tasks<at::BFloat16, float>(q, keys, values, queries, scale, out, heads);
    case at::kHalf:
      return decode_tasks<at::Half, float>(q, keys, values, queries, scale, out, heads);
    default:
      STRATA_CHECK(false, "decode attention: unsupported dtype ", dtype);
  }
}

}  // namespace strata
