// The arguments of one forward call through a GPT chunk, handed down the call chain
// (blocks_forward -> block_forward -> attention, mlp, moe) instead of kept in the model: where
// attention's keys and values come from and go to, whether the residual stream is split along
// the tokens, the documents packed into each row, the objective's scale, and whether this run
// is a recomputation. Also the two
// key/value stores a context can point to.
#pragma once
#include <ATen/ATen.h>

#include <cstdint>
#include <utility>
#include <vector>

namespace strata {

// Keys and values of every layer for incremental decoding.
struct KVCache {
  std::vector<at::Tensor> keys;           // per layer (B, local kv heads, length, head_dim)
  std::vector<at::Tensor> values;         // per layer (B, local kv heads, length, head_dim)
  std::vector<at::Tensor> expert_counts;  // per MoE layer (B, E) int64: assignments so far
  int64_t length = 0;                     // positions already cached
};

// Keys and values for serving many sequences at once (serve/): a pool of slots per layer of
// this chunk, each slot one position of one sequence. Which slots a sequence owns is the
// caller's business (serve/ hands them out in 16-token blocks); the model only reads and writes
// the slots a PagedBatch names.
struct PagedKVCache {
  std::vector<at::Tensor> keys;    // per layer (slots, local kv heads, head_dim)
  std::vector<at::Tensor> values;  // per layer (slots, local kv heads, head_dim)
};

// One serving step: new tokens of several sequences, concatenated along the tokens (N of them).
struct PagedBatch {
  struct Sequence {
    int64_t first_row = 0;     // its first new token among the N
    int64_t rows = 0;          // its new tokens this step
    at::Tensor context_slots;  // (past + rows) int64: the slots of all its positions, in order
  };
  at::Tensor positions;    // (N) int64: each new token's position in its sequence
  at::Tensor write_slots;  // (N) int64: the slot each new token's key and value go to
  std::vector<Sequence> sequences;
  PagedKVCache* cache = nullptr;
};

// Where a forward's attention keeps keys and values.
enum class KvView {
  none,        // nowhere: whole sequences from position 0 (training, logits() without a cache)
  contiguous,  // a KVCache: the tokens continue its sequences (generation)
  paged,       // a PagedBatch's slots in the paged pool (serving)
};

struct ForwardContext {
  KVCache* cache = nullptr;           // KvView::contiguous
  const PagedBatch* paged = nullptr;  // KvView::paged
  // The residual stream between blocks is split along the tokens over tp.
  bool sequence_parallel = false;
  // Packed documents (data.document_mask), training only: (B, T) int64, for each token this
  // rank holds (its context-parallel chunks; all T of them under sequence parallelism) the
  // offset within its row where the token's document begins. Attention stays within a
  // document and positions restart at its start (position - offset). Undefined: each row is
  // one sequence.
  at::Tensor documents;
  // The factor the objective enters the backward with (the pipeline executor's
  // 1 / microbatches); MoE auxiliary losses join the backward with it from inside the layers.
  double objective_scale = 1.0;
  // The second run of a recomputed block (model/recompute.h), in its backward: statistics the
  // first run recorded are not recorded again.
  bool recomputing = false;

  // A training (or evaluation) forward of a pipeline stage.
  static ForwardContext training(double objective_scale, bool sequence_parallel,
                                 at::Tensor documents = {}) {
    ForwardContext context;
    context.objective_scale = objective_scale;
    context.sequence_parallel = sequence_parallel;
    context.documents = std::move(documents);
    return context;
  }
  // Generation: continue `cache`'s sequences, or (nullptr) run whole sequences.
  static ForwardContext generation(KVCache* cache) {
    ForwardContext context;
    context.cache = cache;
    return context;
  }
  static ForwardContext serving(const PagedBatch& batch) {
    ForwardContext context;
    context.paged = &batch;
    return context;
  }

  KvView kv_view() const {
    if (paged) return KvView::paged;
    return cache ? KvView::contiguous : KvView::none;
  }
  int64_t past() const { return cache ? cache->length : 0; }  // positions before the tokens
};

}  // namespace strata
