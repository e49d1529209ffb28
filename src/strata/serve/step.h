// One engine step as data, and its run on every rank. Rank 0 turns the scheduler's choice into
// a StepPlan, broadcasts it, and every rank runs its pipeline stage over it (tp ranks of a
// stage together); the logits of the sampled rows come back to rank 0, which samples.
#pragma once
#include <ATen/ATen.h>

#include <cstdint>
#include <memory>
#include <vector>

#include "strata/dist/mesh.h"
#include "strata/model/gpt.h"
#include "strata/serve/scheduler.h"

namespace strata {

struct StepPlan {
  struct Sequence {
    int64_t rows = 0;             // new tokens this step
    int64_t context = 0;          // positions after this step (cached + new)
    bool sample = false;          // its last new token is its last token: sample the next one
    bool all_rows = false;        // return the logits of every new row (to score the prompt)
    std::vector<int64_t> blocks;  // its block table, blocks_for(context) entries
  };
  bool stop = false;               // no step: every rank leaves the serving loop
  std::vector<int64_t> tokens;     // (N) the new tokens, sequence after sequence
  std::vector<int64_t> positions;  // (N) their positions
  std::vector<Sequence> sequences;
};

// The plan of the scheduler's step entries (rank 0).
StepPlan plan_of(const std::vector<StepEntry>& entries);

// Every rank leaves with rank 0's plan (the others pass any plan in). Waits without a timeout:
// the other ranks idle here while rank 0 has no requests.
void broadcast_plan(StepPlan& plan, Comm& world);

// This rank's part of the served model: its stage (split over tp) and the stage's KV cache,
// `num_blocks` blocks of kBlockTokens slots per layer.
class ServedStage {
 public:
  ServedStage(std::unique_ptr<GPT> model, Mesh& mesh, int64_t num_blocks);

  // The step's forward on this rank: the first stage embeds the tokens, each stage sends its
  // output to the next, the last stage's logits of the sampled rows (and of every row of the
  // sequences marked all_rows) return to world rank 0. Returns those logits (rows, V) float,
  // sequence after sequence, on world rank 0, an undefined tensor elsewhere.
  at::Tensor run(const StepPlan& plan);

  GPT& model() { return *model_; }

 private:
  std::unique_ptr<GPT> model_;
  Mesh& mesh_;
  PagedKVCache cache_;
};

// KV blocks that fit in `megabytes` MiB on this rank: each block holds kBlockTokens positions'
// keys and values of every layer of the stage, for the kv heads this rank caches.
int64_t kv_blocks_in(const GPT& stage, double megabytes);
int64_t kv_block_bytes(const GPT& stage);

}  // namespace strata
