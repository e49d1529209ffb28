// The block pool and the continuous-batching scheduler: budgets, chunked prefill, admission
// order, preemption by recomputation and its re-admission, exact block counts; prefix caching:
// reference counts, least-recently-released eviction, hits checked against the stored ids,
// shared prefixes, a preempted sequence finding its own blocks again.
#include <gtest/gtest.h>

#include <algorithm>

#include "strata/serve/scheduler.h"

namespace strata {
namespace {

std::shared_ptr<Sequence> sequence_of(int64_t id, int64_t prompt_tokens) {
  auto sequence = std::make_shared<Sequence>();
  sequence->id = id;
  sequence->prompt_tokens = prompt_tokens;
  sequence->tokens.assign(prompt_tokens, 1);
  return sequence;
}

// A sequence whose prompt is `shared` tokens 0, 1, 2, ... and then `own` tokens of `id`.
std::shared_ptr<Sequence> sharing(int64_t id, int64_t shared, int64_t own) {
  auto sequence = sequence_of(id, shared + own);
  for (int64_t i = 0; i < shared + own; ++i) sequence->tokens[i] = i < shared ? i : 1000 + id;
  return sequence;
}

// What the engine does after a step: the rows are cached (and their full blocks offered to the
// prefix cache), and a sequence whose tokens are all cached gets one more.
void complete(Scheduler& scheduler, const std::vector<StepEntry>& step) {
  for (const StepEntry& entry : step) {
    entry.sequence->computed += entry.rows;
    scheduler.cache_filled_blocks(*entry.sequence);
    if (entry.sequence->computed == static_cast<int64_t>(entry.sequence->tokens.size())) {
      entry.sequence->tokens.push_back(2);
    }
  }
}

TEST(BlockPool, AllocatesAllOrNothingAndTakesBack) {
  BlockPool pool(5);
  std::vector<int64_t> a, b;
  EXPECT_TRUE(pool.allocate(3, a));
  EXPECT_EQ(a.size(), 3u);
  EXPECT_FALSE(pool.allocate(3, b));
  EXPECT_TRUE(b.empty());
  EXPECT_EQ(pool.num_free(), 2);
  EXPECT_TRUE(pool.allocate(2, b));
  EXPECT_EQ(pool.num_used(), 5);
  pool.release(a);
  EXPECT_TRUE(a.empty());
  EXPECT_EQ(pool.num_free(), 3);
  std::vector<int64_t> all = b;
  EXPECT_TRUE(pool.allocate(3, all));
  std::sort(all.begin(), all.end());
  EXPECT_EQ(all, (std::vector<int64_t>{0, 1, 2, 3, 4})) << "every block once";
  EXPECT_EQ(blocks_for(0), 0);
  EXPECT_EQ(blocks_for(1), 1);
  EXPECT_EQ(blocks_for(16), 1);
  EXPECT_EQ(blocks_for(17), 2);
}

TEST(Scheduler, PrefillsInChunksWithinTheBudgetThenDecodes) {
  Scheduler scheduler(/*num_blocks=*/10, /*max_batch_tokens=*/8);
  auto a = sequence_of(1, 20), b = sequence_of(2, 3);
  scheduler.add(a);
  scheduler.add(b);
  auto step = scheduler.schedule();  // a's first 8 prompt tokens use the whole budget
  ASSERT_EQ(step.size(), 1u);
  EXPECT_EQ(step[0].sequence, a);
  EXPECT_EQ(step[0].rows, 8);
  EXPECT_EQ(a->blocks.size(), 1u);
  complete(scheduler, step);
  step = scheduler.schedule();  // 8 more
  ASSERT_EQ(step.size(), 1u);
  EXPECT_EQ(step[0].rows, 8);
  EXPECT_EQ(a->blocks.size(), 1u);
  complete(scheduler, step);
  step = scheduler.schedule();  // a's last 4, and b's 3 prompt tokens join
  ASSERT_EQ(step.size(), 2u);
  EXPECT_EQ(step[0].rows, 4);
  EXPECT_EQ(a->blocks.size(), 2u);
  EXPECT_EQ(step[1].sequence, b);
  EXPECT_EQ(step[1].rows, 3);
  complete(scheduler, step);
  EXPECT_EQ(a->tokens.size(), 21u) << "a sampled its first token";
  step = scheduler.schedule();  // both decode one token each
  ASSERT_EQ(step.size(), 2u);
  EXPECT_EQ(step[0].rows, 1);
  EXPECT_EQ(step[1].rows, 1);
  EXPECT_EQ(scheduler.pool().num_used(), 3);
  EXPECT_EQ(scheduler.tokens_stored(), 23);
  scheduler.remove(a);
  EXPECT_EQ(scheduler.pool().num_used(), 1);
  EXPECT_EQ(scheduler.running().size(), 1u);
}

TEST(Scheduler, AdmitsOnlyWhatTheFreeBlocksHold) {
  Scheduler scheduler(/*num_blocks=*/3, /*max_batch_tokens=*/100);
  auto a = sequence_of(1, 30), b = sequence_of(2, 20);
  scheduler.add(a);
  scheduler.add(b);
  auto step = scheduler.schedule();  // a takes 2 blocks; b needs 2, 1 is free: it waits
  ASSERT_EQ(step.size(), 1u);
  EXPECT_EQ(scheduler.waiting().size(), 1u);
  complete(scheduler, step);
  scheduler.remove(a);
  step = scheduler.schedule();
  ASSERT_EQ(step.size(), 1u);
  EXPECT_EQ(step[0].sequence, b);
}

TEST(Scheduler, PreemptsTheNewestAndRecomputesItLater) {
  Scheduler scheduler(/*num_blocks=*/2, /*max_batch_tokens=*/100);
  auto a = sequence_of(1, 16), b = sequence_of(2, 10);
  scheduler.add(a);
  scheduler.add(b);
  auto step = scheduler.schedule();  // one block each
  ASSERT_EQ(step.size(), 2u);
  complete(scheduler, step);  // a: 17 tokens, 16 cached: its next step needs a second block
  step = scheduler.schedule();
  ASSERT_EQ(step.size(), 1u) << "b made room for a";
  EXPECT_EQ(step[0].sequence, a);
  EXPECT_EQ(scheduler.preemptions(), 1);
  EXPECT_EQ(b->computed, 0);
  EXPECT_TRUE(b->blocks.empty());
  ASSERT_EQ(scheduler.waiting().size(), 1u);
  EXPECT_EQ(scheduler.waiting().front(), b);
  EXPECT_EQ(a->blocks.size(), 2u);
  complete(scheduler, step);
  scheduler.remove(a);  // a finishes: b comes back and prefills its prompt and its token
  step = scheduler.schedule();
  ASSERT_EQ(step.size(), 1u);
  EXPECT_EQ(step[0].sequence, b);
  EXPECT_EQ(step[0].rows, 11);
}

TEST(Scheduler, ASequenceThatCannotGrowPreemptsItselfWhenItIsTheNewest) {
  Scheduler scheduler(/*num_blocks=*/2, /*max_batch_tokens=*/100);
  auto a = sequence_of(1, 10), b = sequence_of(2, 16);
  scheduler.add(a);
  scheduler.add(b);
  complete(scheduler, scheduler.schedule());  // b: 17 tokens, needs a second block; a is older
  auto step = scheduler.schedule();
  ASSERT_EQ(step.size(), 1u);
  EXPECT_EQ(step[0].sequence, a);
  EXPECT_EQ(scheduler.waiting().front(), b);
  EXPECT_EQ(scheduler.preemptions(), 1);
}

std::vector<int64_t> ids(int64_t first) {  // one block of ids first, first + 1, ...
  std::vector<int64_t> tokens(kBlockTokens);
  for (int64_t i = 0; i < kBlockTokens; ++i) tokens[i] = first + i;
  return tokens;
}

TEST(BlockPool, CachedBlocksAreSharedKeptAfterReleaseAndEvictedLeastRecentFirst) {
  BlockPool pool(4, /*caching=*/true);
  const std::vector<int64_t> a = ids(0), b = ids(100);
  const uint64_t key_a = block_key(0, a.data()), key_b = block_key(key_a, b.data());
  std::vector<int64_t> first;
  ASSERT_TRUE(pool.allocate(2, first));
  pool.cache(first[0], key_a, 0, a.data());
  pool.cache(first[1], key_b, key_a, b.data());

  // Another holder of the same two blocks: nothing is allocated.
  std::vector<int64_t> second, keys_tokens = a;
  keys_tokens.insert(keys_tokens.end(), b.begin(), b.end());
  EXPECT_EQ(pool.take_prefix(keys_tokens.data(), {key_a, key_b}, 2, second), 2);
  EXPECT_EQ(second, first);
  const std::vector<int64_t> held = first;
  EXPECT_EQ(pool.num_used(), 2);
  pool.release(first);
  EXPECT_EQ(pool.num_used(), 2) << "still held by the second table";
  pool.release(second);
  EXPECT_EQ(pool.num_used(), 0);
  EXPECT_EQ(pool.num_cached(), 2);
  EXPECT_EQ(pool.num_free(), 4);

  // A run stops at the first block that is not cached, or whose ids or parent differ.
  std::vector<int64_t> third;
  EXPECT_EQ(pool.take_prefix(keys_tokens.data(), {key_a, 12345}, 2, third), 1);
  pool.release(third);
  std::vector<int64_t> other = ids(7);
  EXPECT_EQ(pool.take_prefix(other.data(), {key_a}, 1, third), 0) << "same key, other ids";
  EXPECT_TRUE(third.empty());

  // Empty blocks go first; then the cached ones, the last block of a released table first.
  std::vector<int64_t> fresh;
  ASSERT_TRUE(pool.allocate(2, fresh));
  EXPECT_EQ(pool.num_cached(), 2);
  ASSERT_TRUE(pool.allocate(1, fresh));
  EXPECT_EQ(fresh.back(), held[1]) << "the second block was released before the first";
  EXPECT_EQ(pool.num_cached(), 1);
  std::vector<int64_t> again;
  EXPECT_EQ(pool.take_prefix(keys_tokens.data(), {key_a, key_b}, 2, again), 1)
      << "the prefix's end was evicted, its beginning kept";
  EXPECT_EQ(pool.num_free(), 0);
}

TEST(BlockPool, WithoutCachingNothingIsKept) {
  BlockPool pool(2);
  const std::vector<int64_t> a = ids(0);
  const uint64_t key = block_key(0, a.data());
  std::vector<int64_t> table;
  ASSERT_TRUE(pool.allocate(1, table));
  pool.cache(table[0], key, 0, a.data());
  pool.release(table);
  EXPECT_EQ(pool.num_cached(), 0);
  EXPECT_EQ(pool.take_prefix(a.data(), {key}, 1, table), 0);
}

TEST(Scheduler, ASharedPrefixIsComputedOnceAndCostsNoBudget) {
  Scheduler scheduler(/*num_blocks=*/10, /*max_batch_tokens=*/100, /*prefix_cache=*/true);
  auto a = sharing(1, 40, 5), b = sharing(2, 40, 3);
  scheduler.add(a);
  complete(scheduler, scheduler.schedule());  // a's prompt: its 2 full blocks are cached
  scheduler.add(b);
  auto step = scheduler.schedule();
  ASSERT_EQ(step.size(), 2u);
  EXPECT_EQ(step[1].sequence, b);
  EXPECT_EQ(b->computed, 32) << "two full blocks of the shared 40 tokens";
  EXPECT_EQ(step[1].rows, 11);
  EXPECT_EQ(b->blocks[0], a->blocks[0]);
  EXPECT_EQ(b->blocks[1], a->blocks[1]);
  EXPECT_NE(b->blocks[2], a->blocks[2]);
  EXPECT_EQ(scheduler.pool().num_used(), 4);
  EXPECT_EQ(scheduler.prefix_queried_tokens(), 45 + 43);
  EXPECT_EQ(scheduler.prefix_hit_tokens(), 32);
  complete(scheduler, step);
  EXPECT_EQ(scheduler.tokens_stored(), 46 + 43 - 32) << "shared blocks counted once";
}

TEST(Scheduler, AWholePromptHitStillComputesItsLastToken) {
  Scheduler scheduler(/*num_blocks=*/10, /*max_batch_tokens=*/100, /*prefix_cache=*/true);
  auto a = sharing(1, 32, 0), b = sharing(2, 32, 0);
  scheduler.add(a);
  complete(scheduler, scheduler.schedule());
  scheduler.remove(a);
  scheduler.add(b);
  auto step = scheduler.schedule();
  ASSERT_EQ(step.size(), 1u);
  EXPECT_EQ(b->computed, 16) << "the block with the last token is computed again";
  EXPECT_EQ(step[0].rows, 16);
}

TEST(Scheduler, APromptScoringSequenceTakesNoCachedBlocks) {
  Scheduler scheduler(/*num_blocks=*/10, /*max_batch_tokens=*/100, /*prefix_cache=*/true);
  auto a = sharing(1, 40, 0), b = sharing(2, 40, 0);
  b->echo = true;
  b->logprobs = 0;
  scheduler.add(a);
  complete(scheduler, scheduler.schedule());
  scheduler.add(b);
  auto step = scheduler.schedule();
  ASSERT_EQ(step.size(), 2u);
  EXPECT_EQ(step[1].rows, 40);
  EXPECT_EQ(scheduler.prefix_hit_tokens(), 0);
}

TEST(Scheduler, APreemptedSequenceFindsItsBlocksAgain) {
  Scheduler scheduler(/*num_blocks=*/3, /*max_batch_tokens=*/100, /*prefix_cache=*/true);
  auto a = sharing(1, 0, 16), b = sharing(2, 0, 20);
  scheduler.add(a);
  scheduler.add(b);
  complete(scheduler, scheduler.schedule());  // a: 1 block, b: 2 blocks (its first is full)
  auto step = scheduler.schedule();           // a needs a second block: b is preempted
  ASSERT_EQ(step.size(), 1u);
  EXPECT_EQ(scheduler.preemptions(), 1);
  EXPECT_EQ(scheduler.pool().num_cached(), 1) << "b's full block is kept";
  complete(scheduler, step);
  scheduler.remove(a);
  step = scheduler.schedule();
  ASSERT_EQ(step.size(), 1u);
  EXPECT_EQ(step[0].sequence, b);
  EXPECT_EQ(b->computed, 16) << "its first block was found again";
  EXPECT_EQ(step[0].rows, 5);
}

}  // namespace
}  // namespace strata
