// Document-masked blockwise attention (packed sequences) against dense attention with an
// explicit block-diagonal causal mask: outputs and gradients in float64 (1e-10) and float32
// (1e-5 relative) for documents that cross query and key tiles, one-token documents, one
// document (plain causal), and a later query chunk against an earlier key chunk as context
// parallelism passes them (rows whose document is not among the keys see nothing); and the
// count of skipped tiles against a brute-force count of the tile pairs with no visible key.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <string>
#include <vector>

#include "strata/kernels/attention.h"

namespace strata {
namespace {

constexpr double kInf = std::numeric_limits<double>::infinity();
constexpr int64_t kQ = kAttentionQueryTile, kK = kAttentionKeyTile;

// Document ids of a row packed from documents of these lengths: each token's id is the offset
// where its document begins (as the model labels them).
std::vector<int64_t> packed_ids(const std::vector<int64_t>& lengths) {
  std::vector<int64_t> ids;
  for (int64_t length : lengths) {
    const auto start = static_cast<int64_t>(ids.size());
    ids.insert(ids.end(), static_cast<size_t>(length), start);
  }
  return ids;
}

// (rows.size(), T) int64 from one id vector per batch row.
at::Tensor id_tensor(const std::vector<std::vector<int64_t>>& rows) {
  std::vector<at::Tensor> out;
  for (const auto& row : rows) out.push_back(at::tensor(row, at::kLong));
  return at::stack(out);
}

struct Case {
  std::string name;
  int64_t H, K, D;
  at::Tensor documents;                                  // (B, T) ids of the whole packed row
  int64_t query_first, query_rows, key_first, key_rows;  // the slices of the row attending
};

// True where query i may see key j: no later, and in the same document. (B, Tq, Tk).
at::Tensor visible(const Case& c) {
  const at::Tensor query_ids = c.documents.narrow(1, c.query_first, c.query_rows);
  const at::Tensor key_ids = c.documents.narrow(1, c.key_first, c.key_rows);
  const at::Tensor query_at = at::arange(c.query_rows, at::kLong) + c.query_first;
  const at::Tensor key_at = at::arange(c.key_rows, at::kLong) + c.key_first;
  const at::Tensor causal = key_at.unsqueeze(0) <= query_at.unsqueeze(1);  // (Tq, Tk)
  return causal.unsqueeze(0).logical_and(query_ids.unsqueeze(2) == key_ids.unsqueeze(1));
}

at::Tensor dense_attention(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
                           double scale, const Case& c) {
  const int64_t group = c.H / c.K;
  at::Tensor keys = k.repeat_interleave(group, 1), values = v.repeat_interleave(group, 1);
  at::Tensor scores = at::matmul(q, keys.transpose(-2, -1)) * scale;
  at::Tensor hidden = visible(c).logical_not().unsqueeze(1);  // (B, 1, Tq, Tk)
  at::Tensor probabilities = at::softmax(scores.masked_fill(hidden, -kInf), -1);
  probabilities = probabilities.masked_fill(at::isnan(probabilities), 0);
  return at::matmul(probabilities, values);
}

double max_relative_error(const at::Tensor& got, const at::Tensor& want) {
  const double largest = want.abs().max().item<double>();
  const double scale = largest > 0 ? largest : 1.0;
  return (got.to(at::kDouble) - want.to(at::kDouble)).abs().max().item<double>() / scale;
}

struct Result {
  at::Tensor out, dq, dk, dv;
};

template <typename Attention>
Result run(const Case& c, at::ScalarType dtype, Attention attention) {
  at::manual_seed(11);
  const int64_t B = c.documents.size(0);
  at::Tensor q = at::randn({B, c.H, c.query_rows, c.D}, at::kDouble).to(dtype).requires_grad_();
  at::Tensor k = at::randn({B, c.K, c.key_rows, c.D}, at::kDouble).to(dtype).requires_grad_();
  at::Tensor v = at::randn({B, c.K, c.key_rows, c.D}, at::kDouble).to(dtype).requires_grad_();
  at::Tensor weights = at::randn({B, c.H, c.query_rows, c.D}, at::kDouble).to(dtype);
  at::Tensor out = attention(q, k, v);
  (out * weights).sum().backward();
  return {out.detach(), q.grad(), k.grad(), v.grad()};
}

AttentionDocuments documents_of(const Case& c) {
  return {c.documents.narrow(1, c.query_first, c.query_rows),
          c.documents.narrow(1, c.key_first, c.key_rows)};
}

void expect_close(const Case& c, at::ScalarType dtype, double tolerance) {
  const double scale = 1.0 / std::sqrt(static_cast<double>(c.D));
  const AttentionPositions positions{c.query_first, c.key_first};
  const Result masked = run(c, dtype, [&](auto& q, auto& k, auto& v) {
    return blockwise_attention(q, k, v, scale, positions, documents_of(c));
  });
  const Result dense =
      run(c, dtype, [&](auto& q, auto& k, auto& v) { return dense_attention(q, k, v, scale, c); });
  EXPECT_LE(max_relative_error(masked.out, dense.out), tolerance) << c.name << " out";
  EXPECT_LE(max_relative_error(masked.dq, dense.dq), tolerance) << c.name << " dq";
  EXPECT_LE(max_relative_error(masked.dk, dense.dk), tolerance) << c.name << " dk";
  EXPECT_LE(max_relative_error(masked.dv, dense.dv), tolerance) << c.name << " dv";
}

Case whole_rows(std::string name, int64_t H, int64_t K, int64_t D,
                const std::vector<std::vector<int64_t>>& lengths) {
  std::vector<std::vector<int64_t>> rows;
  for (const auto& row : lengths) rows.push_back(packed_ids(row));
  const at::Tensor ids = id_tensor(rows);
  const int64_t T = ids.size(1);
  return {std::move(name), H, K, D, ids, 0, T, 0, T};
}

std::vector<Case> cases() {
  const int64_t T = 2 * kK + 70;  // several query and key tiles, neither a multiple
  std::vector<Case> all = {
      whole_rows("documents across tiles", 4, 2, 16,
                 {{kQ + 5, 1, 1, kK - 3, T - kQ - kK - 4}, {40, T - 80, 40}}),
      whole_rows("one document", 2, 2, 8, {{T}}),
      whole_rows("one-token documents", 2, 1, 8, {std::vector<int64_t>(40, 1)}),
      whole_rows("a document per key tile", 2, 2, 8, {{kK, kK, T - 2 * kK}}),
  };
  // Context parallelism's chunks: a later query chunk against an earlier key chunk, and a
  // chunk against itself, of a row whose documents cross the chunk edges.
  const int64_t c = 150;
  const at::Tensor ids =
      id_tensor({packed_ids({100, 160, 30, 220, 90}), packed_ids({4 * c - 10, 10})});
  all.push_back({"a later query chunk", 2, 2, 8, ids, 3 * c, c, c, c});
  all.push_back({"a chunk against itself", 2, 1, 8, ids, 2 * c, c, 2 * c, c});
  all.push_back({"a far later chunk", 2, 2, 8, ids, 3 * c, c, 0, c});
  return all;
}

TEST(DocumentAttention, EqualsDenseBlockDiagonalInFloat64) {
  for (const Case& c : cases()) expect_close(c, at::kDouble, 1e-10);
}

TEST(DocumentAttention, EqualsDenseBlockDiagonalInFloat32) {
  for (const Case& c : cases()) expect_close(c, at::kFloat, 1e-5);
}

// The tile pairs the causal kernel visits (a query tile against the key tiles up to its last
// row's last visible key) in which no query sees any key, counted from the dense mask.
int64_t expected_skipped_tiles(const Case& c) {
  const at::Tensor seen = visible(c);  // (B, Tq, Tk)
  int64_t skipped = 0;
  for (int64_t b = 0; b < seen.size(0); ++b) {
    for (int64_t r0 = 0; r0 < c.query_rows; r0 += kQ) {
      const int64_t rows = std::min(kQ, c.query_rows - r0);
      const int64_t causal_end =
          std::clamp<int64_t>(c.query_first + r0 + rows - c.key_first, 0, c.key_rows);
      for (int64_t j0 = 0; j0 < causal_end; j0 += kK) {
        const int64_t cols = std::min(kK, causal_end - j0);
        if (!seen[b].narrow(0, r0, rows).narrow(1, j0, cols).any().item<bool>()) ++skipped;
      }
    }
  }
  return skipped * c.H;
}

TEST(DocumentAttention, SkipsTheTilesNoQuerySharesADocumentWith) {
  int64_t total = 0;
  for (const Case& c : cases()) {
    const int64_t B = c.documents.size(0);
    const at::Tensor q = at::randn({B, c.H, c.query_rows, c.D});
    const at::Tensor k = at::randn({B, c.K, c.key_rows, c.D}), v = at::randn(k.sizes());
    const AttentionForward forward = blockwise_attention_forward(
        q, k, v, 0.5, AttentionPositions{c.query_first, c.key_first}, documents_of(c));
    EXPECT_EQ(forward.skipped_tiles, expected_skipped_tiles(c)) << c.name;
    total += forward.skipped_tiles;
  }
  EXPECT_GT(total, 0);  // the cases do skip tiles
}

TEST(DocumentAttention, WithoutDocumentsNothingIsSkipped) {
  const at::Tensor q = at::randn({1, 2, 3 * kQ, 8}), k = at::randn({1, 2, 3 * kQ, 8});
  EXPECT_EQ(blockwise_attention_forward(q, k, k, 0.5).skipped_tiles, 0);
}

TEST(DocumentAttention, RejectsDecreasingDocumentIds) {
  const at::Tensor q = at::randn({1, 1, 4, 8});
  const at::Tensor ids = at::tensor(std::vector<int64_t>{0, 2, 1, 3}, at::kLong).unsqueeze(0);
  EXPECT_ANY_THROW(blockwise_attention_forward(q, q, q, 0.5, {}, {ids, ids}));
}

}  // namespace
}  // namespace strata
