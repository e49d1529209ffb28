// The block pool and the continuous-batching scheduler: budgets, chunked prefill, admission
// order, preemption by recomputation and its re-admission, exact block counts.
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

// What the engine does after a step: the rows are cached, and a sequence whose tokens are all
// cached gets one more.
void complete(const std::vector<StepEntry>& step) {
  for (const StepEntry& entry : step) {
    entry.sequence->computed += entry.rows;
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
  complete(step);
  step = scheduler.schedule();  // 8 more
  ASSERT_EQ(step.size(), 1u);
  EXPECT_EQ(step[0].rows, 8);
  EXPECT_EQ(a->blocks.size(), 1u);
  complete(step);
  step = scheduler.schedule();  // a's last 4, and b's 3 prompt tokens join
  ASSERT_EQ(step.size(), 2u);
  EXPECT_EQ(step[0].rows, 4);
  EXPECT_EQ(a->blocks.size(), 2u);
  EXPECT_EQ(step[1].sequence, b);
  EXPECT_EQ(step[1].rows, 3);
  complete(step);
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
  complete(step);
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
  complete(step);  // a: 17 tokens, 16 cached: its next step needs a second block
  step = scheduler.schedule();
  ASSERT_EQ(step.size(), 1u) << "b made room for a";
  EXPECT_EQ(step[0].sequence, a);
  EXPECT_EQ(scheduler.preemptions(), 1);
  EXPECT_EQ(b->computed, 0);
  EXPECT_TRUE(b->blocks.empty());
  ASSERT_EQ(scheduler.waiting().size(), 1u);
  EXPECT_EQ(scheduler.waiting().front(), b);
  EXPECT_EQ(a->blocks.size(), 2u);
  complete(step);
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
  complete(scheduler.schedule());  // b: 17 tokens, needs a second block; a is older
  auto step = scheduler.schedule();
  ASSERT_EQ(step.size(), 1u);
  EXPECT_EQ(step[0].sequence, a);
  EXPECT_EQ(scheduler.waiting().front(), b);
  EXPECT_EQ(scheduler.preemptions(), 1);
}

}  // namespace
}  // namespace strata
