// Iteration-level (continuous) batching: before every engine step the scheduler picks which
// sequences run and how many of their tokens, within a token budget and the free KV blocks.
//
// Running sequences go first, oldest first: each gets its uncached tokens (one, once it is
// decoding; a chunk of its prompt while prefilling) as far as the budget reaches, and the
// blocks those tokens need. When the pool runs dry, the newest running sequence is preempted:
// its blocks are freed and it goes back to the front of the queue, to be recomputed (its
// prompt and generated tokens prefilled again) when it is admitted next. Then, if nothing was
// preempted, waiting sequences are admitted first come first served while budget and blocks
// last. As long as one sequence of model.seq_len tokens fits in the pool, the oldest running
// sequence always advances.
//
// With prefix caching (block_pool.h), a sequence being admitted first takes the cached blocks
// that hold the longest full-block prefix of its tokens, short of its last token (whose logits
// it needs): those positions count as computed and cost no budget. A sequence that scores its
// prompt (echo with logprobs) computes every row and takes none. After every step the engine
// offers the blocks its sequences filled (cache_filled_blocks).
#pragma once
#include <cstdint>
#include <deque>
#include <memory>
#include <vector>

#include "strata/serve/block_pool.h"
#include "strata/serve/sequence.h"

namespace strata {

// One sequence in one step: its tokens [computed, computed + rows) run.
struct StepEntry {
  std::shared_ptr<Sequence> sequence;
  int64_t rows = 0;
};

class Scheduler {
 public:
  Scheduler(int64_t num_blocks, int64_t max_batch_tokens, bool prefix_cache = false);

  void add(std::shared_ptr<Sequence> sequence);  // to the back of the queue
  // The next step's sequences (blocks allocated for them); empty when nothing can run.
  std::vector<StepEntry> schedule();
  // Takes a sequence out (finished, cancelled or timed out) and frees its blocks.
  void remove(const std::shared_ptr<Sequence>& sequence);
  // After a step: the sequence's blocks that its computed positions fill become cached.
  void cache_filled_blocks(Sequence& sequence);

  const std::deque<std::shared_ptr<Sequence>>& waiting() const { return waiting_; }
  const std::vector<std::shared_ptr<Sequence>>& running() const { return running_; }
  const BlockPool& pool() const { return pool_; }
  int64_t preemptions() const { return preemptions_; }
  // Positions whose keys and values the blocks of running sequences hold, each shared block
  // counted once (KV utilization is this over pool().num_used() * kBlockTokens).
  int64_t tokens_stored() const;
  // Prefix caching: the tokens of admitted sequences, and those of them found cached.
  int64_t prefix_queried_tokens() const { return prefix_queried_; }
  int64_t prefix_hit_tokens() const { return prefix_hits_; }

 private:
  void preempt(size_t running_index);
  // Lets go of the sequence's blocks: nothing of it is computed any more.
  void release_blocks(Sequence& sequence);
  // Takes the cached blocks of the sequence's longest cached prefix (none without caching).
  void take_cached_prefix(Sequence& sequence);

  BlockPool pool_;
  int64_t max_batch_tokens_;
  std::deque<std::shared_ptr<Sequence>> waiting_;
  std::vector<std::shared_ptr<Sequence>> running_;  // in admission order
  int64_t preemptions_ = 0;
  int64_t prefix_queried_ = 0, prefix_hits_ = 0;
};

}  // namespace strata
