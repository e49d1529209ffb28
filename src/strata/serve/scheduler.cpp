// The scheduling policy (scheduler.h) and the sequence's finish reasons.
#include "strata/serve/scheduler.h"

#include <algorithm>
#include <unordered_set>

#include "strata/core/error.h"

namespace strata {

const char* finish_reason_name(FinishReason reason) {
  switch (reason) {
    case FinishReason::none:
      return "none";
    case FinishReason::length:
      return "length";
    case FinishReason::stop:
      return "stop";
    case FinishReason::timeout:
      return "timeout";
    case FinishReason::cancelled:
      return "cancelled";
  }
  return "?";
}

Scheduler::Scheduler(int64_t num_blocks, int64_t max_batch_tokens, bool prefix_cache)
    : pool_(num_blocks, prefix_cache), max_batch_tokens_(max_batch_tokens) {
  STRATA_CHECK(max_batch_tokens >= 1, "max_batch_tokens ", max_batch_tokens);
}

namespace {

// Extends the sequence's block keys to its first `blocks` full blocks.
void key_blocks(Sequence& sequence, int64_t blocks) {
  STRATA_CHECK(blocks * kBlockTokens <= static_cast<int64_t>(sequence.tokens.size()), "keys for ",
               blocks, " blocks of a sequence of ", sequence.tokens.size(), " tokens");
  for (auto b = static_cast<int64_t>(sequence.block_keys.size()); b < blocks; ++b) {
    const uint64_t parent = b == 0 ? 0 : sequence.block_keys[b - 1];
    sequence.block_keys.push_back(block_key(parent, sequence.tokens.data() + b * kBlockTokens));
  }
}

}  // namespace

void Scheduler::take_cached_prefix(Sequence& sequence) {
  if (!pool_.caching() || sequence.scores_prompt()) return;
  // Short of the last token: its row gives the logits the next token is sampled from.
  const int64_t most = (static_cast<int64_t>(sequence.tokens.size()) - 1) / kBlockTokens;
  key_blocks(sequence, most);
  const int64_t run =
      pool_.take_prefix(sequence.tokens.data(), sequence.block_keys, most, sequence.blocks);
  sequence.computed = run * kBlockTokens;
  sequence.blocks_offered = run;
}

void Scheduler::cache_filled_blocks(Sequence& sequence) {
  if (!pool_.caching()) return;
  const int64_t full = sequence.computed / kBlockTokens;
  if (sequence.blocks_offered >= full) return;
  key_blocks(sequence, full);
  for (int64_t b = sequence.blocks_offered; b < full; ++b) {
    pool_.cache(sequence.blocks[b], sequence.block_keys[b], b == 0 ? 0 : sequence.block_keys[b - 1],
                sequence.tokens.data() + b * kBlockTokens);
  }
  sequence.blocks_offered = full;
}

void Scheduler::release_blocks(Sequence& sequence) {
  pool_.release(sequence.blocks);
  sequence.computed = 0;
  sequence.blocks_offered = 0;
}

void Scheduler::add(std::shared_ptr<Sequence> sequence) { waiting_.push_back(std::move(sequence)); }

void Scheduler::preempt(size_t running_index) {
  std::shared_ptr<Sequence> victim = running_[running_index];
  running_.erase(running_.begin() + static_cast<std::ptrdiff_t>(running_index));
  release_blocks(*victim);
  waiting_.push_front(std::move(victim));
  ++preemptions_;
}

std::vector<StepEntry> Scheduler::schedule() {
  std::vector<StepEntry> step;
  int64_t budget = max_batch_tokens_;
  bool preempted = false;
  for (size_t i = 0; i < running_.size() && budget > 0;) {
    Sequence& sequence = *running_[i];
    const int64_t uncached = static_cast<int64_t>(sequence.tokens.size()) - sequence.computed;
    STRATA_CHECK(uncached >= 1, "running sequence ", sequence.id, " has nothing to compute");
    const int64_t rows = std::min(uncached, budget);
    const int64_t needed =
        blocks_for(sequence.computed + rows) - static_cast<int64_t>(sequence.blocks.size());
    bool self_preempted = false;
    while (needed > pool_.num_free()) {
      const size_t victim = running_.size() - 1;
      preempt(victim);
      preempted = true;
      if (victim == i) {
        self_preempted = true;
        break;
      }
    }
    if (self_preempted) break;
    STRATA_CHECK(pool_.allocate(needed, sequence.blocks), "blocks were counted free");
    step.push_back({running_[i], rows});
    budget -= rows;
    ++i;
  }
  // Admission only when budget is left after every running sequence, and none had to make room.
  while (!preempted && budget > 0 && !waiting_.empty()) {
    std::shared_ptr<Sequence> sequence = waiting_.front();
    take_cached_prefix(*sequence);
    const int64_t rows =
        std::min(static_cast<int64_t>(sequence->tokens.size()) - sequence->computed, budget);
    const int64_t needed =
        blocks_for(sequence->computed + rows) - static_cast<int64_t>(sequence->blocks.size());
    if (needed > pool_.num_free()) {  // it waits, holding nothing
      release_blocks(*sequence);
      break;
    }
    STRATA_CHECK(pool_.allocate(needed, sequence->blocks), "blocks were counted free");
    prefix_queried_ += static_cast<int64_t>(sequence->tokens.size());
    prefix_hits_ += sequence->computed;
    waiting_.pop_front();
    running_.push_back(sequence);
    step.push_back({sequence, rows});
    budget -= rows;
  }
  return step;
}

void Scheduler::remove(const std::shared_ptr<Sequence>& sequence) {
  auto running = std::find(running_.begin(), running_.end(), sequence);
  if (running != running_.end()) running_.erase(running);
  auto waiting = std::find(waiting_.begin(), waiting_.end(), sequence);
  if (waiting != waiting_.end()) waiting_.erase(waiting);
  release_blocks(*sequence);
}

int64_t Scheduler::tokens_stored() const {
  int64_t stored = 0;
  std::unordered_set<int64_t> seen;  // blocks shared by several sequences count once
  for (const auto& sequence : running_) {
    for (int64_t b = 0; b < blocks_for(sequence->computed); ++b) {
      if (seen.insert(sequence->blocks[b]).second) {
        stored += std::min(kBlockTokens, sequence->computed - b * kBlockTokens);
      }
    }
  }
  return stored;
}

}  // namespace strata
