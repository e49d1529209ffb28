// Causal attention computed tile by tile with an online softmax (FlashAttention-2, Dao 2023,
// arXiv 2307.08691), on ATen: the T x T scores are never held. The forward keeps the output
// and one log-sum-exp per query row; the backward recomputes each tile's probabilities from
// them. Work is split over (batch, head, query tile) tasks on ATen's OpenMP threads; inside a
// task every tile product runs on one thread.
//
// Shapes: q (B, H, Tq, D); k and v (B, K, Tk, D) with K dividing H: query head h reads
// key/value head h / (H / K) (grouped-query attention, no copies). Positions are absolute:
// query row i sits at positions.query + i, key j at positions.key + j, and a query sees the
// keys at positions up to its own. The default places the queries at the end of the keys
// (training: Tq = Tk; decoding: new queries after a cache).
//
// Document masking (packed sequences, data.document_mask): with AttentionDocuments a query
// sees a key only if, besides coming no later, it belongs to the same document. Documents are
// contiguous, so each query row sees one contiguous run of keys; a key tile outside every run
// of a query tile is skipped whole (AttentionForward::skipped_tiles counts them). Without
// documents the kernel does exactly the causal work it did before.
//
// Precision: float64 in, float64 throughout; float32, bfloat16 and float16 in, float32
// accumulation, output and gradients in the input's dtype. 16-bit inputs are read in place:
// each tile is widened to float32 as the products need it (or multiplied as bf16, tile_gemm.h),
// and the sums are rounded once into the result, with no whole-tensor copy on the way in or out
// (q, k, v, dout and out whose rows are not contiguous are copied once; a backward keeps k, v,
// dk and dv of one kv head in float32 per thread, 16 Tk D bytes). dout and out are taken in
// q's dtype: a float32 dout or out with bf16 q is rounded to bf16 first.
#pragma once
#include <ATen/ATen.h>

#include <cstdint>
#include <optional>

namespace strata {

struct AttentionPositions {
  int64_t query = 0;  // position of query row 0
  int64_t key = 0;    // position of key row 0
};

// The document of each query and key, per batch row: int64 ids, nondecreasing along the row
// (a document is a contiguous run of tokens) and labelled alike for queries and keys (the model
// uses the row offset where the document begins). Undefined tensors: no document mask.
struct AttentionDocuments {
  at::Tensor query;  // (B, Tq) int64
  at::Tensor key;    // (B, Tk) int64
  bool defined() const { return query.defined(); }
};

struct AttentionForward {
  at::Tensor out;  // (B, H, Tq, D), q's dtype, in (B, Tq, H, D) memory order
  at::Tensor lse;  // (B, H, Tq) log-sum-exp of each row's scaled scores (float32, or float64
                   // for float64 inputs); -inf for a row that sees no key (its out row is 0)
  // (query tile, key tile) pairs, over batch rows and heads, that the causal mask alone would
  // compute but the document mask skips (no query in the one shares a document with a key in
  // the other); 0 without documents.
  int64_t skipped_tiles = 0;
};

// Tiles: a 128-row query tile against 256-row key/value tiles. With D <= 128 a tile pair
// touches 128 KiB of scores and <= 256 KiB of q, k, v tiles (float32): within a core's L2
// (1-2 MiB). Each tile product is one BLAS-sized GEMM, which runs nearer its peak the larger
// it is; where the diagonal crosses a tile pair it is cut into 64-row blocks, so the masked
// triangle wastes little. Chosen by timing bench/attention_kernel against 64-row query tiles and
// 128-row key tiles (slower here, commit 798f44f); the kernel against eager attention is the
// `attention` record of docs/performance.md.
constexpr int64_t kAttentionQueryTile = 128;
constexpr int64_t kAttentionKeyTile = 256;

// No autograd: the pieces ring context parallelism merges by their log-sum-exp.
AttentionForward blockwise_attention_forward(const at::Tensor& q, const at::Tensor& k,
                                             const at::Tensor& v, double scale,
                                             std::optional<AttentionPositions> positions = {},
                                             const AttentionDocuments& documents = {});

struct AttentionGradients {
  at::Tensor dq, dk, dv;  // shaped and typed as q, k, v, in (B, T, heads, D) memory order
};
// Gradients from the forward's out and lse, recomputing the probabilities tile by tile.
AttentionGradients blockwise_attention_backward(const at::Tensor& dout, const at::Tensor& q,
                                                const at::Tensor& k, const at::Tensor& v,
                                                const at::Tensor& out, const at::Tensor& lse,
                                                double scale,
                                                std::optional<AttentionPositions> positions = {},
                                                const AttentionDocuments& documents = {});

// softmax(q k^T * scale, causal (and within documents)) v, differentiable with respect to q,
// k and v.
at::Tensor blockwise_attention(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
                               double scale, std::optional<AttentionPositions> positions = {},
                               const AttentionDocuments& documents = {});

}  // namespace strata
