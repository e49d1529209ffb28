// Blockwise causal attention: forward with an online softmax, backward by recomputation.
//
// Forward, for one (batch, head, query tile) task: running row maxima m, row sums l and an
// unnormalized output o start at (-inf, 0, 0); each visible key tile j gives scores
// s = q k_j^T * scale (future keys excluded), then m' = max(m, rowmax(s)),
// p = exp(s - m'), l = l e^(m - m') + rowsum(p), o = o e^(m - m') + p v_j, m = m'. At the end
// out = o / l and lse = m + log(l).
//
// Backward (Dao 2023, Algorithm 2), with delta = rowsum(dout * out): a tile's probabilities
// are p = exp(s - lse), dv_j += p^T dout, dp = dout v_j^T, ds = p * (dp - delta),
// dq += ds k_j * scale, dk_j += ds^T q * scale. dq is summed over key tiles and dk, dv over
// query tiles and the query heads sharing a kv head, so the backward runs one task per
// (batch, kv head), which owns all of those rows: B * K tasks, enough for a few cores.
//
// Each tile product is one call of tile_gemm on raw pointers (the scale rides in its alpha),
// and the softmax work is one or two vectorized passes per row (score_rows.h), into scratch
// tiles each parallel chunk allocates once. Scores, probabilities and their gradients are
// float32 (float64 for float64 inputs), and so are the sums of the output and the gradients.
// bf16 inputs are multiplied as bf16 where attention_tiles_in_bf16 (tile_gemm.h) holds: q, k,
// v and dout as stored, and each tile's probabilities and score gradients rounded to bf16
// before the products that take them, as FlashAttention multiplies them on GPUs; elsewhere,
// like float16, widened to float32 tile by tile as the products need them (TileLoader), and
// the output and gradients are summed in float32 and rounded once into the input's dtype
// (SumRows): no whole-tensor copy either way. Where the diagonal crosses a tile pair, the pair
// is cut into row blocks that each multiply only the keys they see (for_each_block).
//
// Document masking: each query row sees the keys [first_key_seen_by, keys_seen_by), one run
// because documents are contiguous; both ends are nondecreasing in the row, so a query tile's
// keys start at its first row's first key, and key tiles before that are skipped whole. A row
// whose run starts inside a block has the block's leading scores zeroed (SeenKeys::first).
#include "strata/kernels/attention.h"

#include <ATen/record_function.h>
#include <torch/csrc/autograd/custom_function.h>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <limits>
#include <type_traits>
#include <vector>

#include "strata/core/error.h"
#include "strata/kernels/score_rows.h"
#include "strata/kernels/thread_team.h"
#include "strata/kernels/tile_gemm.h"

namespace strata {
namespace {

struct Problem {
  int64_t B, H, K, group, Tq, Tk, D;
  AttentionPositions positions;
  at::ScalarType accumulate;  // float64 for float64 inputs, else float32
  int64_t query_tiles;
  // With documents, per (batch, query row) at b * Tq + row: the keys [key_begin, key_end) the
  // row sees (causal and in its document). Empty without documents.
  std::vector<int64_t> key_begin, key_end;
};

// Rows per block where a tile crosses the diagonal (for_each_block).
constexpr int64_t kDiagonalRows = 64;

int64_t tiles(int64_t rows, int64_t tile) { return (rows + tile - 1) / tile; }

// How many leading keys query row `row` sees under the causal mask alone.
int64_t causal_keys_seen_by(const Problem& p, int64_t row) {
  return std::clamp<int64_t>(p.positions.query + row - p.positions.key + 1, 0, p.Tk);
}

// Each query row's run of keys: from the first key of its document to the last it may see.
void describe_documents(Problem& p, const AttentionDocuments& documents) {
  STRATA_CHECK(documents.query.sizes() == at::IntArrayRef({p.B, p.Tq}) &&
                   documents.key.sizes() == at::IntArrayRef({p.B, p.Tk}) &&
                   documents.query.scalar_type() == at::kLong &&
                   documents.key.scalar_type() == at::kLong,
               "attention documents want int64 (B, Tq) and (B, Tk), got ", documents.query.sizes(),
               " and ", documents.key.sizes());
  const at::Tensor query = documents.query.contiguous(), key = documents.key.contiguous();
  const int64_t *query_ids = query.data_ptr<int64_t>(), *key_ids = key.data_ptr<int64_t>();
  p.key_begin.resize(static_cast<size_t>(p.B * p.Tq));
  p.key_end.resize(static_cast<size_t>(p.B * p.Tq));
  for (int64_t b = 0; b < p.B; ++b) {
    const int64_t *row_ids = query_ids + b * p.Tq, *keys = key_ids + b * p.Tk;
    STRATA_CHECK(std::is_sorted(row_ids, row_ids + p.Tq) && std::is_sorted(keys, keys + p.Tk),
                 "attention documents must be nondecreasing along each row (batch row ", b, ")");
    for (int64_t row = 0; row < p.Tq; ++row) {
      const auto [begin, end] = std::equal_range(keys, keys + p.Tk, row_ids[row]);
      p.key_begin[b * p.Tq + row] = begin - keys;
      p.key_end[b * p.Tq + row] = std::min(end - keys, causal_keys_seen_by(p, row));
    }
  }
}

Problem describe(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
                 std::optional<AttentionPositions> positions, const AttentionDocuments& documents) {
  STRATA_CHECK(q.dim() == 4 && k.dim() == 4 && v.dim() == 4, "attention wants (B, heads, T, D) ",
               "tensors, got q ", q.sizes(), ", k ", k.sizes(), ", v ", v.sizes());
  Problem p;
  p.B = q.size(0);
  p.H = q.size(1);
  p.Tq = q.size(2);
  p.D = q.size(3);
  p.K = k.size(1);
  p.Tk = k.size(2);
  STRATA_CHECK(
      k.sizes() == v.sizes() && k.size(0) == p.B && k.size(3) == p.D && p.K >= 1 && p.H % p.K == 0,
      "attention shapes: q ", q.sizes(), ", k ", k.sizes(), ", v ", v.sizes());
  STRATA_CHECK(q.scalar_type() == k.scalar_type() && k.scalar_type() == v.scalar_type(),
               "attention: q, k and v differ in dtype");
  STRATA_CHECK(at::isFloatingType(q.scalar_type()),
               "attention takes float64, float32, bfloat16 or float16 inputs, not ",
               q.scalar_type());
  p.group = p.H / p.K;
  p.positions = positions ? *positions : AttentionPositions{p.Tk - p.Tq, 0};
  p.accumulate = q.scalar_type() == at::kDouble ? at::kDouble : at::kFloat;
  p.query_tiles = tiles(p.Tq, kAttentionQueryTile);
  if (documents.defined()) describe_documents(p, documents);
  return p;
}

// The end of the keys query row `row` of batch row b sees.
int64_t keys_seen_by(const Problem& p, int64_t b, int64_t row) {
  return p.key_end.empty() ? causal_keys_seen_by(p, row) : p.key_end[b * p.Tq + row];
}

// The first key it sees (0 without documents).
int64_t first_key_seen_by(const Problem& p, int64_t b, int64_t row) {
  return p.key_begin.empty() ? 0 : p.key_begin[b * p.Tq + row];
}

// The keys a query row sees among the `cols` keys from k0, as offsets [first, end) from k0.
struct SeenKeys {
  int64_t first, end;
};
SeenKeys seen_in(const Problem& p, int64_t b, int64_t row, int64_t k0, int64_t cols) {
  const int64_t end = std::clamp<int64_t>(keys_seen_by(p, b, row) - k0, 0, cols);
  return {std::clamp<int64_t>(first_key_seen_by(p, b, row) - k0, 0, end), end};
}

// Calls f(first, block_rows, k0, block_cols) for the products of query rows [r0, r0 + rows)
// of batch row b with the `cols` keys from j0: block rows [r0 + first, + block_rows) with
// keys [k0, k0 + block_cols). A tile that the diagonal (or a document boundary) crosses is cut
// into blocks of kDiagonalRows rows, each multiplying only the keys from its first row's first
// to its last row's last, so the masked upper triangle costs blocks of kDiagonalRows^2 / 2
// instead of up to half the tile; blocks that see none of these keys are skipped (their
// probabilities would all be 0). Returns whether any block ran.
template <typename F>
bool for_each_block(const Problem& p, int64_t b, int64_t r0, int64_t rows, int64_t j0, int64_t cols,
                    F&& f) {
  const bool unmasked =
      seen_in(p, b, r0, j0, cols).end == cols && seen_in(p, b, r0 + rows - 1, j0, cols).first == 0;
  const int64_t block = unmasked ? rows : kDiagonalRows;
  bool ran = false;
  for (int64_t first = 0; first < rows; first += block) {
    const int64_t block_rows = std::min(block, rows - first);
    const int64_t lead = seen_in(p, b, r0 + first, j0, cols).first;
    const int64_t end = seen_in(p, b, r0 + first + block_rows - 1, j0, cols).end;
    if (end > lead) {
      f(first, block_rows, j0 + lead, end - lead);
      ran = true;
    }
  }
  return ran;
}

// The first key tile (aligned, as the causal kernel's) any row from r0 on sees.
int64_t first_key_tile_start(const Problem& p, int64_t b, int64_t r0) {
  return first_key_seen_by(p, b, r0) / kAttentionKeyTile * kAttentionKeyTile;
}

// A (B, heads, T, D) tensor's rows as raw memory: the model passes q, k and v as transposed
// views of (B, T, heads, D) projections, which need no copy as long as each row of D values
// is contiguous.
template <typename scalar_t>
struct Rows {
  scalar_t* data;
  int64_t batch_stride, head_stride, row_stride;

  explicit Rows(const at::Tensor& x)
      : data(x.data_ptr<scalar_t>()),
        batch_stride(x.stride(0)),
        head_stride(x.stride(1)),
        row_stride(x.stride(2)) {}
  scalar_t* at(int64_t b, int64_t head, int64_t row) const {
    return data + b * batch_stride + head * head_stride + row * row_stride;
  }
};

template <typename>
constexpr bool kNoConversion = false;

// n values of one 16-bit type widened to float32 exactly, or float32 rounded to it to nearest
// even (as ATen's conversion), on the vector paths (score_rows.h): the only conversions the
// kernels instantiate.
template <typename from_t, typename to_t>
void convert(const from_t* from, to_t* to, int64_t n) {
  if constexpr (std::is_same_v<from_t, c10::BFloat16> && std::is_same_v<to_t, float>) {
    widen_bf16(from, to, n);
  } else if constexpr (std::is_same_v<from_t, float> && std::is_same_v<to_t, c10::BFloat16>) {
    round_to_bf16(from, to, n);
  } else if constexpr (std::is_same_v<from_t, c10::Half> && std::is_same_v<to_t, float>) {
    widen_half(from, to, n);
  } else if constexpr (std::is_same_v<from_t, float> && std::is_same_v<to_t, c10::Half>) {
    round_to_half(from, to, n);
  } else {
    static_assert(kNoConversion<from_t>, "attention converts only between float32 and 16 bits");
  }
}

// Rows [first, first + count) of one head as the tile products take them: each product's
// operand starts at a row of the tile.
template <typename operand_t>
struct Tile {
  const operand_t* data;  // row `first`
  int64_t row_stride, first;

  TileOperand<operand_t> operand(int64_t row, bool transposed = false) const {
    return {data + (row - first) * row_stride, row_stride, transposed};
  }
};

// Loads tiles of a stored tensor (input_t) as the products' operand type: in place where the
// two agree, else converted into a scratch of up to max_rows rows (bf16 or float16 inputs
// multiplied as float32), once per tile however many products read it. The whole-tensor
// copies this replaces cost a bf16 step as much as a tenth of its attention.
template <typename operand_t, typename input_t>
class TileLoader {
 public:
  TileLoader(const Rows<input_t>& rows, int64_t D, int64_t max_rows) : rows_(rows), D_(D) {
    if constexpr (!kInPlace) scratch_.resize(static_cast<size_t>(max_rows * D));
  }

  Tile<operand_t> load(int64_t b, int64_t head, int64_t first, int64_t count) {
    if constexpr (kInPlace) {
      return {rows_.at(b, head, first), rows_.row_stride, first};
    } else {
      for (int64_t r = 0; r < count; ++r) {
        convert(rows_.at(b, head, first + r), scratch_.data() + r * D_, D_);
      }
      return {scratch_.data(), D_, first};
    }
  }

 private:
  static constexpr bool kInPlace = std::is_same_v<operand_t, input_t>;
  Rows<input_t> rows_;
  int64_t D_;
  std::vector<operand_t> scratch_;
};

// Rows of a (B, heads, T, D) result (output_t) that a task sums in the accumulation type:
// in place where the result has that type, else in a scratch of up to max_rows rows that
// `store` rounds into the result once the sums are done (as a float32 result rounded whole
// would be).
template <typename scalar_t, typename output_t>
class SumRows {
 public:
  SumRows(const at::Tensor& out, int64_t D, int64_t max_rows) : out_(out), D_(D) {
    if constexpr (!kInPlace) scratch_.resize(static_cast<size_t>(max_rows * D));
  }

  // Rows [first, first + count) of one head, zeroed, row_stride() apart.
  scalar_t* begin(int64_t b, int64_t head, int64_t first, int64_t count) {
    scalar_t* rows;
    if constexpr (kInPlace) {
      rows = out_.at(b, head, first);
    } else {
      rows = scratch_.data();
    }
    for (int64_t r = 0; r < count; ++r) std::fill_n(rows + r * row_stride(), D_, scalar_t{0});
    return rows;
  }
  int64_t row_stride() const { return kInPlace ? out_.row_stride : D_; }

  // The sums of begin's rows into the result.
  void store(int64_t b, int64_t head, int64_t first, int64_t count) {
    if constexpr (!kInPlace) {
      for (int64_t r = 0; r < count; ++r) {
        convert(scratch_.data() + r * D_, out_.at(b, head, first + r), D_);
      }
    }
  }

 private:
  static constexpr bool kInPlace = std::is_same_v<scalar_t, output_t>;
  Rows<output_t> out_;
  int64_t D_;
  std::vector<scalar_t> scratch_;
};

// A (B, heads, T, D) tensor laid out as (B, T, heads, D), the layout the model's projections
// produce q, k and v in: the model reads an output as (B, T, heads * D) rows with no copy, so
// the output the forward saves and the out-projection's saved input are one tensor, and the
// gradients reach the projections without a transposing copy.
at::Tensor rows_major(int64_t B, int64_t heads, int64_t T, int64_t D,
                      const at::TensorOptions& options) {
  return at::empty({B, T, heads, D}, options).transpose(1, 2);
}

// x in `dtype` with contiguous rows (a copy only where either differs).
at::Tensor stored_rows(const at::Tensor& x, at::ScalarType dtype) {
  at::Tensor converted = x.to(dtype);
  return converted.stride(-1) == 1 ? converted : converted.contiguous();
}

// A tile of n values (probabilities or score gradients) as the tile products' operand type:
// the tile itself, or its bf16 rounding in `rounded` (sized for the largest tile).
template <typename operand_t, typename scalar_t>
const operand_t* as_operand(const scalar_t* tile, int64_t n, std::vector<operand_t>& rounded) {
  if constexpr (std::is_same_v<operand_t, scalar_t>) {
    return tile;
  } else {
    round_to_bf16(tile, rounded.data(), n);
    return rounded.data();
  }
}

// The scratch of as_operand: empty where the operands are the tile itself.
template <typename operand_t, typename scalar_t>
std::vector<operand_t> rounded_tile() {
  return std::vector<operand_t>(
      std::is_same_v<operand_t, scalar_t> ? 0 : kAttentionQueryTile * kAttentionKeyTile);
}

// Returns the key tiles the document mask skipped (AttentionForward::skipped_tiles). q, k, v
// and out are input_t, multiplied as operand_t; lse and the sums are scalar_t, the
// accumulation dtype.
template <typename scalar_t, typename operand_t, typename input_t>
int64_t forward_tiles(const Problem& p, const at::Tensor& q, const at::Tensor& k,
                      const at::Tensor& v, double scale, at::Tensor& out, at::Tensor& lse) {
  const Rows<input_t> queries(q), keys(k), values(v);
  const Rows<scalar_t> lses(lse.unsqueeze(-1));
  constexpr scalar_t kInf = std::numeric_limits<scalar_t>::infinity();
  const int64_t D = p.D;
  std::atomic<int64_t> skipped{0};
  // A head's query tiles last to first: the later ones see more keys, and the cheap ones at
  // the end of the queue even out the threads.
  TaskQueue queue(p.B * p.H * p.query_tiles);
  run_on_threads(queue.threads(), [&] {
    TileLoader<operand_t, input_t> query_tiles(queries, D, kAttentionQueryTile),
        key_tiles(keys, D, kAttentionKeyTile), value_tiles(values, D, kAttentionKeyTile);
    SumRows<scalar_t, input_t> outputs(out, D, kAttentionQueryTile);
    std::vector<scalar_t> scores(kAttentionQueryTile * kAttentionKeyTile);  // (rows, cols)
    std::vector<operand_t> rounded = rounded_tile<operand_t, scalar_t>();
    std::vector<scalar_t> row_max(kAttentionQueryTile), row_sum(kAttentionQueryTile);
    for (int64_t task; queue.take(task);) {
      const int64_t tile = p.query_tiles - 1 - task % p.query_tiles, b = task / p.query_tiles / p.H,
                    h = task / p.query_tiles % p.H, g = h / p.group;
      const int64_t r0 = tile * kAttentionQueryTile;
      const int64_t rows = std::min(kAttentionQueryTile, p.Tq - r0);
      const Tile<operand_t> query_tile = query_tiles.load(b, h, r0, rows);
      scalar_t* o = outputs.begin(b, h, r0, rows);  // (rows, D), unnormalized until the end
      const int64_t o_stride = outputs.row_stride();
      std::fill(row_max.begin(), row_max.end(), -kInf);
      std::fill(row_sum.begin(), row_sum.end(), 0);
      const int64_t visible = keys_seen_by(p, b, r0 + rows - 1);
      int64_t computed_tiles = 0;
      for (int64_t j0 = first_key_tile_start(p, b, r0); j0 < visible; j0 += kAttentionKeyTile) {
        const int64_t cols = std::min(kAttentionKeyTile, visible - j0);
        const Tile<operand_t> key_tile = key_tiles.load(b, g, j0, cols),
                              value_tile = value_tiles.load(b, g, j0, cols);
        computed_tiles += for_each_block(
            p, b, r0, rows, j0, cols,
            [&](int64_t first, int64_t block_rows, int64_t k0, int64_t block_cols) {
              tile_gemm(block_rows, block_cols, D, static_cast<scalar_t>(scale),
                        query_tile.operand(r0 + first), key_tile.operand(k0, /*transposed=*/true),
                        0, scores.data(), block_cols);
              for (int64_t r = first; r < first + block_rows; ++r) {
                scalar_t* row = scores.data() + (r - first) * block_cols;
                const SeenKeys seen = seen_in(p, b, r0 + r, k0, block_cols);
                std::fill(row, row + seen.first, scalar_t{0});  // keys of an earlier document
                const scalar_t rescale =
                    online_softmax_row(row + seen.first, seen.end - seen.first,
                                       block_cols - seen.first, row_max[r], row_sum[r]);
                if (rescale != 1) {
                  scalar_t* o_row = o + r * o_stride;
                  for (int64_t d = 0; d < D; ++d) o_row[d] *= rescale;
                }
              }
              tile_gemm(block_rows, D, block_cols, scalar_t{1},
                        {as_operand(scores.data(), block_rows * block_cols, rounded), block_cols},
                        value_tile.operand(k0), 1, o + first * o_stride, o_stride);
            });
      }
      if (!p.key_end.empty()) {
        skipped += tiles(causal_keys_seen_by(p, r0 + rows - 1), kAttentionKeyTile) - computed_tiles;
      }
      for (int64_t r = 0; r < rows; ++r) {  // rows that see no key: out 0, lse -inf
        scalar_t* o_row = o + r * o_stride;
        const scalar_t sum = row_sum[r];
        if (sum > 0) {
          for (int64_t d = 0; d < D; ++d) o_row[d] /= sum;
        }
        *lses.at(b, h, r0 + r) = sum > 0 ? row_max[r] + std::log(sum) : -kInf;
      }
      outputs.store(b, h, r0, rows);
    }
  });
  return skipped;
}

// dout, q, k, v, out and the gradients are input_t, multiplied as operand_t; lse and the sums
// are scalar_t.
template <typename scalar_t, typename operand_t, typename input_t>
void backward_tiles(const Problem& p, const at::Tensor& dout, const at::Tensor& q,
                    const at::Tensor& k, const at::Tensor& v, const at::Tensor& lse,
                    const at::Tensor& out, double scale, at::Tensor& dq, at::Tensor& dk,
                    at::Tensor& dv) {
  const Rows<input_t> queries(q), keys(k), values(v), douts(dout), outputs(out);
  const Rows<scalar_t> lses(lse.unsqueeze(-1));
  const int64_t D = p.D;
  const auto scale_as = static_cast<scalar_t>(scale);
  // One task per (batch, kv head): it owns the dq rows of the query heads sharing the kv
  // head and the kv head's dk and dv rows, so no two tasks write the same rows and each tile
  // pair costs five products.
  TaskQueue queue(p.B * p.K);
  run_on_threads(queue.threads(), [&] {
    TileLoader<operand_t, input_t> query_tiles(queries, D, kAttentionQueryTile),
        dout_tiles(douts, D, kAttentionQueryTile), key_heads(keys, D, p.Tk),
        value_heads(values, D, p.Tk);
    SumRows<scalar_t, input_t> dq_rows(dq, D, kAttentionQueryTile), dk_rows(dk, D, p.Tk),
        dv_rows(dv, D, p.Tk);
    std::vector<scalar_t> probabilities(kAttentionQueryTile * kAttentionKeyTile);  // (rows, cols)
    std::vector<scalar_t> score_grads(kAttentionQueryTile * kAttentionKeyTile);    // (rows, cols)
    std::vector<scalar_t> deltas(kAttentionQueryTile);  // rowsum(dout * out) of a query tile
    // The bf16 rounding of P, then (P_in read) of dS: one scratch for both.
    std::vector<operand_t> rounded = rounded_tile<operand_t, scalar_t>();
    for (int64_t task; queue.take(task);) {
      const int64_t b = task / p.K, g = task % p.K;
      const Tile<operand_t> key_head = key_heads.load(b, g, 0, p.Tk),
                            value_head = value_heads.load(b, g, 0, p.Tk);
      scalar_t* dk_head = dk_rows.begin(b, g, 0, p.Tk);
      scalar_t* dv_head = dv_rows.begin(b, g, 0, p.Tk);
      const int64_t dk_stride = dk_rows.row_stride(), dv_stride = dv_rows.row_stride();
      for (int64_t h = g * p.group; h < (g + 1) * p.group; ++h) {
        for (int64_t r0 = 0; r0 < p.Tq; r0 += kAttentionQueryTile) {
          const int64_t rows = std::min(kAttentionQueryTile, p.Tq - r0);
          for (int64_t r = 0; r < rows; ++r) {
            const input_t *dout_row = douts.at(b, h, r0 + r), *out_row = outputs.at(b, h, r0 + r);
            scalar_t dot = 0;
            for (int64_t d = 0; d < D; ++d) {
              dot += static_cast<scalar_t>(dout_row[d]) * static_cast<scalar_t>(out_row[d]);
            }
            deltas[r] = dot;
          }
          const Tile<operand_t> query_tile = query_tiles.load(b, h, r0, rows),
                                dout_tile = dout_tiles.load(b, h, r0, rows);
          scalar_t* dq_tile = dq_rows.begin(b, h, r0, rows);
          const int64_t dq_stride = dq_rows.row_stride();
          const int64_t visible = keys_seen_by(p, b, r0 + rows - 1);
          for (int64_t j0 = first_key_tile_start(p, b, r0); j0 < visible; j0 += kAttentionKeyTile) {
            const int64_t cols = std::min(kAttentionKeyTile, visible - j0);
            for_each_block(
                p, b, r0, rows, j0, cols,
                [&](int64_t first, int64_t block_rows, int64_t k0, int64_t block_cols) {
                  const int64_t row = r0 + first;
                  scalar_t* P = probabilities.data();
                  scalar_t* dS = score_grads.data();
                  tile_gemm(block_rows, block_cols, D, scale_as, query_tile.operand(row),
                            key_head.operand(k0, /*transposed=*/true), 0, P, block_cols);
                  for (int64_t r = 0; r < block_rows; ++r) {
                    scalar_t* P_row = P + r * block_cols;
                    const SeenKeys seen = seen_in(p, b, row + r, k0, block_cols);
                    std::fill(P_row, P_row + seen.first, scalar_t{0});  // an earlier document
                    probabilities_row(P_row + seen.first, seen.end - seen.first,
                                      block_cols - seen.first, *lses.at(b, h, row + r));
                  }
                  // dv_j += p^T dout
                  const operand_t* P_in = as_operand(P, block_rows * block_cols, rounded);
                  tile_gemm(block_cols, D, block_rows, scalar_t{1},
                            {P_in, block_cols, /*transposed=*/true}, dout_tile.operand(row), 1,
                            dv_head + k0 * dv_stride, dv_stride);
                  // dp = dout v_j^T, then ds = p * (dp - delta) in its place
                  tile_gemm(block_rows, block_cols, D, scalar_t{1}, dout_tile.operand(row),
                            value_head.operand(k0, /*transposed=*/true), 0, dS, block_cols);
                  for (int64_t r = 0; r < block_rows; ++r) {
                    score_gradient_row(P + r * block_cols, dS + r * block_cols, block_cols,
                                       deltas[first + r]);
                  }
                  // dq += ds k_j * scale, dk_j += ds^T q * scale
                  const operand_t* dS_in = as_operand(dS, block_rows * block_cols, rounded);
                  tile_gemm(block_rows, D, block_cols, scale_as, {dS_in, block_cols},
                            key_head.operand(k0), 1, dq_tile + first * dq_stride, dq_stride);
                  tile_gemm(block_cols, D, block_rows, scale_as,
                            {dS_in, block_cols, /*transposed=*/true}, query_tile.operand(row), 1,
                            dk_head + k0 * dk_stride, dk_stride);
                });
          }
          dq_rows.store(b, h, r0, rows);
        }
      }
      dk_rows.store(b, g, 0, p.Tk);
      dv_rows.store(b, g, 0, p.Tk);
    }
  });
}

// The accumulation type of an input type: float64 for float64, else float32 (Problem::accumulate).
template <typename input_t>
using sum_t = std::conditional_t<std::is_same_v<input_t, double>, double, float>;

// The kernels for q's dtype: float64 throughout; float32; bf16 multiplied as bf16 where
// attention_tiles_in_bf16 (tile_gemm.h) holds, else like float16 widened to float32 tile by
// tile. F is called with a null pointer of the operand type and one of the input type.
template <typename F>
auto dispatch_inputs(at::ScalarType dtype, F&& f) {
  switch (dtype) {
    case at::kDouble:
      return f(static_cast<double*>(nullptr), static_cast<double*>(nullptr));
    case at::kFloat:
      return f(static_cast<float*>(nullptr), static_cast<float*>(nullptr));
    case at::kBFloat16:
      if (attention_tiles_in_bf16()) {
        return f(static_cast<c10::BFloat16*>(nullptr), static_cast<c10::BFloat16*>(nullptr));
      }
      return f(static_cast<float*>(nullptr), static_cast<c10::BFloat16*>(nullptr));
    default:  // float16 (describe took no other dtype)
      return f(static_cast<float*>(nullptr), static_cast<c10::Half*>(nullptr));
  }
}

}  // namespace

AttentionForward blockwise_attention_forward(const at::Tensor& q, const at::Tensor& k,
                                             const at::Tensor& v, double scale,
                                             std::optional<AttentionPositions> positions,
                                             const AttentionDocuments& documents) {
  RECORD_FUNCTION("strata::attention_forward", std::vector<c10::IValue>({q, k, v}));
  const Problem p = describe(q, k, v, positions, documents);
  const at::ScalarType dtype = q.scalar_type();
  const at::Tensor qs = stored_rows(q, dtype), ks = stored_rows(k, dtype),
                   vs = stored_rows(v, dtype);
  at::Tensor out = rows_major(p.B, p.H, p.Tq, p.D, q.options());
  at::Tensor lse = at::empty({p.B, p.H, p.Tq}, q.options().dtype(p.accumulate));
  const int64_t skipped = dispatch_inputs(dtype, [&](auto* operand, auto* input) {
    using operand_t = std::remove_pointer_t<decltype(operand)>;
    using input_t = std::remove_pointer_t<decltype(input)>;
    return forward_tiles<sum_t<input_t>, operand_t, input_t>(p, qs, ks, vs, scale, out, lse);
  });
  return {out, lse, skipped};
}

AttentionGradients blockwise_attention_backward(const at::Tensor& dout, const at::Tensor& q,
                                                const at::Tensor& k, const at::Tensor& v,
                                                const at::Tensor& out, const at::Tensor& lse,
                                                double scale,
                                                std::optional<AttentionPositions> positions,
                                                const AttentionDocuments& documents) {
  RECORD_FUNCTION("strata::attention_backward", std::vector<c10::IValue>({dout, q, k, v}));
  const Problem p = describe(q, k, v, positions, documents);
  const at::ScalarType dtype = q.scalar_type();
  const at::Tensor qs = stored_rows(q, dtype), ks = stored_rows(k, dtype),
                   vs = stored_rows(v, dtype), douts = stored_rows(dout, dtype),
                   outs = stored_rows(out, dtype), lses = lse.to(p.accumulate);
  // Zeroed by the task that owns the rows.
  at::Tensor dq = rows_major(p.B, p.H, p.Tq, p.D, q.options());
  at::Tensor dk = rows_major(p.B, p.K, p.Tk, p.D, q.options());
  at::Tensor dv = rows_major(p.B, p.K, p.Tk, p.D, q.options());
  dispatch_inputs(dtype, [&](auto* operand, auto* input) {
    using operand_t = std::remove_pointer_t<decltype(operand)>;
    using input_t = std::remove_pointer_t<decltype(input)>;
    backward_tiles<sum_t<input_t>, operand_t, input_t>(p, douts, qs, ks, vs, lses, outs, scale, dq,
                                                       dk, dv);
  });
  return {dq, dk, dv};
}

namespace {

struct BlockwiseAttentionFunction : torch::autograd::Function<BlockwiseAttentionFunction> {
  static at::Tensor forward(torch::autograd::AutogradContext* ctx, const at::Tensor& q,
                            const at::Tensor& k, const at::Tensor& v, double scale,
                            int64_t query_position, int64_t key_position,
                            const AttentionDocuments& documents) {
    AttentionForward result = blockwise_attention_forward(
        q, k, v, scale, AttentionPositions{query_position, key_position}, documents);
    ctx->save_for_backward({q, k, v, result.out, result.lse});
    // Not inputs of the graph (no gradient): kept aside, undefined without documents.
    ctx->saved_data["query_documents"] = documents.query;
    ctx->saved_data["key_documents"] = documents.key;
    ctx->saved_data["scale"] = scale;
    ctx->saved_data["query_position"] = query_position;
    ctx->saved_data["key_position"] = key_position;
    return result.out;
  }
  static torch::autograd::variable_list backward(torch::autograd::AutogradContext* ctx,
                                                 torch::autograd::variable_list grads) {
    const auto saved = ctx->get_saved_variables();
    const AttentionPositions positions{ctx->saved_data["query_position"].toInt(),
                                       ctx->saved_data["key_position"].toInt()};
    AttentionGradients g =
        blockwise_attention_backward(grads[0], saved[0], saved[1], saved[2], saved[3], saved[4],
                                     ctx->saved_data["scale"].toDouble(), positions,
                                     {ctx->saved_data["query_documents"].toTensor(),
                                      ctx->saved_data["key_documents"].toTensor()});
    return {g.dq, g.dk, g.dv, at::Tensor(), at::Tensor(), at::Tensor(), at::Tensor()};
  }
};

}  // namespace

at::Tensor blockwise_attention(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
                               double scale, std::optional<AttentionPositions> positions,
                               const AttentionDocuments& documents) {
  const AttentionPositions at_end{k.size(2) - q.size(2), 0};
  const AttentionPositions where = positions ? *positions : at_end;
  return BlockwiseAttentionFunction::apply(q, k, v, scale, where.query, where.key, documents);
}

}  // namespace strata
