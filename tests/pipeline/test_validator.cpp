// The validator: it accepts the generated schedules (test_generators.cpp sweeps them) and
// catches each kind of broken schedule, naming the rank, the action index and the problem.
#include <gtest/gtest.h>

#include <algorithm>

#include "expect_error.h"
#include "strata/core/error.h"
#include "strata/pipeline/generators.h"
#include "strata/pipeline/validator.h"

namespace strata {
namespace {

int find_action(const Schedule& schedule, int rank, const Action& action) {
  const auto& actions = schedule.ranks[rank];
  const auto found = std::find(actions.begin(), actions.end(), action);
  EXPECT_NE(found, actions.end()) << "rank " << rank << " has no " << to_string(action);
  return static_cast<int>(found - actions.begin());
}

// The problems as text, one per line, for failure messages and substring checks.
std::string report(const std::vector<ScheduleProblem>& problems) {
  std::string text;
  for (const auto& problem : problems) text += to_string(problem) + "\n";
  return text;
}

// Expects a problem on (rank, index) whose message contains `fragment`.
void expect_problem(const Schedule& schedule, int rank, int index, const std::string& fragment) {
  const auto problems = validate_schedule(schedule);
  const bool found = std::any_of(problems.begin(), problems.end(), [&](const ScheduleProblem& p) {
    return p.rank == rank && p.action_index == index &&
           p.message.find(fragment) != std::string::npos;
  });
  EXPECT_TRUE(found) << "expected rank " << rank << " action " << index << ": '" << fragment
                     << "'; got:\n"
                     << report(problems);
}

TEST(Validator, AcceptsAGeneratedSchedule) {
  const Schedule schedule = make_1f1b_schedule(3, 4);
  EXPECT_TRUE(validate_schedule(schedule).empty()) << report(validate_schedule(schedule));
  EXPECT_NO_THROW(require_valid_schedule(schedule));
}

TEST(Validator, DetectsDeadlockAndSaysWhoWaitsForWhom) {
  // Rank 0 waits for the gradient of microbatch 0 before it sends that microbatch forward.
  Schedule schedule = make_1f1b_schedule(3, 3);
  auto& rank0 = schedule.ranks[0];
  const int index = find_action(schedule, 0, Action{ActionKind::RecvGrad, 0, 0, 1});
  std::rotate(rank0.begin(), rank0.begin() + index, rank0.begin() + index + 1);
  const auto problems = validate_schedule(schedule);
  expect_problem(schedule, 0, 0, "deadlock");
  expect_problem(schedule, 0, 0, "waits for RecvGrad(mb 0, chunk 0, from stage 1) from rank 1");
  expect_problem(schedule, 1, 0, "is itself waiting at action 0: RecvGrad(mb 0");
  EXPECT_CONTAINS(testing::user_error([&] { require_valid_schedule(schedule); }),
                  "rank 0 action 0: deadlock");
}

// A receive of a message nobody sends would block forever: caught before any execution.
TEST(Validator, DetectsAMessageNeverSent) {
  Schedule schedule = make_gpipe_schedule(2, 2);
  auto& rank0 = schedule.ranks[0];
  const int send = find_action(schedule, 0, Action{ActionKind::SendActivation, 1, 0, 1});
  rank0.erase(rank0.begin() + send);
  expect_problem(schedule, 0, -1, "mb 1, chunk 0 (virtual stage 0): its output is never sent");
  expect_problem(schedule, 1, -1, "receives 2 activations from rank 0, which sends 1");
}

TEST(Validator, DetectsMissingAndDuplicatedWork) {
  Schedule missing = make_1f1b_schedule(2, 3);
  auto& rank1 = missing.ranks[1];
  rank1.erase(rank1.begin() + find_action(missing, 1, Action{ActionKind::Backward, 2, 0, -1}));
  expect_problem(missing, 1, -1, "mb 2, chunk 0 (virtual stage 1): no backward");

  Schedule duplicated = make_1f1b_schedule(2, 3);
  auto& rank0 = duplicated.ranks[0];
  rank0.push_back(Action{ActionKind::Forward, 1, 0, -1});
  expect_problem(duplicated, 0, static_cast<int>(rank0.size()) - 1,
                 "F(mb 1, chunk 0): appears a second time");

  Schedule mixed = make_zb_h1_schedule(2, 2);
  mixed.ranks[0].push_back(Action{ActionKind::Backward, 0, 0, -1});
  expect_problem(mixed, 0, -1, "both a full backward and a split one");

  Schedule no_weight = make_zb_h1_schedule(2, 2);
  auto& rank = no_weight.ranks[1];
  rank.erase(rank.begin() +
             find_action(no_weight, 1, Action{ActionKind::BackwardWeight, 1, 0, -1}));
  expect_problem(no_weight, 1, -1, "mb 1, chunk 0 (virtual stage 1): a B whose W never runs");
}

TEST(Validator, DetectsBadFields) {
  Schedule schedule = make_1f1b_schedule(2, 2);
  schedule.ranks[0][0].microbatch = 2;
  expect_problem(schedule, 0, 0, "microbatch out of range [0, 2)");

  Schedule wrong_peer = make_1f1b_schedule(3, 2);
  const int index = find_action(wrong_peer, 1, Action{ActionKind::SendActivation, 0, 0, 2});
  wrong_peer.ranks[1][index].peer_stage = 0;
  expect_problem(wrong_peer, 1, index, "the peer of virtual stage 1 for this data is stage 2");

  Schedule from_last = make_1f1b_schedule(2, 1);
  from_last.ranks[1].push_back(Action{ActionKind::SendActivation, 0, 0, 2});
  expect_problem(from_last, 1, static_cast<int>(from_last.ranks[1].size()) - 1,
                 "virtual stage 1 has no receiver");

  Schedule lists = make_1f1b_schedule(2, 1);
  lists.ranks.pop_back();
  expect_problem(lists, -1, -1, "1 rank lists for p = 2");
}

TEST(Validator, DetectsActionsBeforeTheirDependencies) {
  // The forward of the second stage moved before the receive of its input.
  Schedule early_forward = make_1f1b_schedule(2, 1);
  auto& rank1 = early_forward.ranks[1];
  ASSERT_EQ(rank1[0].kind, ActionKind::RecvActivation);
  std::swap(rank1[0], rank1[1]);
  expect_problem(early_forward, 1, 0, "F(mb 0, chunk 0): runs before its input arrived");

  // A send before the forward that produces it.
  Schedule early_send = make_1f1b_schedule(2, 1);
  auto& rank0 = early_send.ranks[0];
  ASSERT_EQ(rank0[1].kind, ActionKind::SendActivation);
  std::swap(rank0[0], rank0[1]);
  expect_problem(early_send, 0, 0, "SendAct(mb 0, chunk 0, to stage 1): runs before its forward");

  // W before its B.
  Schedule early_weight = make_zb_h1_schedule(1, 2);
  auto& only = early_weight.ranks[0];
  const int weight = find_action(early_weight, 0, Action{ActionKind::BackwardWeight, 0, 0, -1});
  only.insert(only.begin(), only[weight]);
  only.erase(only.begin() + weight + 1);
  expect_problem(early_weight, 0, 0, "W(mb 0, chunk 0): runs before its B");

  // A backward before its forward, on a one-stage pipeline.
  Schedule early_backward = make_1f1b_schedule(1, 1);
  std::swap(early_backward.ranks[0][0], early_backward.ranks[0][1]);
  expect_problem(early_backward, 0, 0, "B(mb 0, chunk 0): runs before its forward");
}

TEST(Validator, DetectsMessagesReceivedOutOfOrder) {
  // Stage 1 of GPipe receives microbatch 1 before microbatch 0 while stage 0 sends 0 first.
  Schedule schedule = make_gpipe_schedule(2, 2);
  auto& rank1 = schedule.ranks[1];
  const int first = find_action(schedule, 1, Action{ActionKind::RecvActivation, 0, 0, 0});
  const int second = find_action(schedule, 1, Action{ActionKind::RecvActivation, 1, 0, 0});
  // Swap the two (receive, forward) pairs.
  std::swap_ranges(rank1.begin() + first, rank1.begin() + first + 2, rank1.begin() + second);
  expect_problem(schedule, 1, first, "receive #0 of activations from rank 0 expects mb 1");
}

TEST(Validator, InterleavedMessagesWrapFromTheLastRankToTheFirst) {
  const Schedule schedule = make_interleaved_1f1b_schedule(2, 2, 2);
  // Rank 0's chunk 1 (virtual stage 2) takes its input from rank 1's chunk 0 (stage 1).
  find_action(schedule, 0, Action{ActionKind::RecvActivation, 0, 1, 1});
  find_action(schedule, 1, Action{ActionKind::SendActivation, 0, 0, 2});
  find_action(schedule, 0, Action{ActionKind::SendGrad, 0, 1, 1});
  EXPECT_TRUE(validate_schedule(schedule).empty()) << report(validate_schedule(schedule));
}

// ZB-V over the (p, m) the rule book allows: p = 2, 3, 4, 8 with m = p, 2p, odd m above and
// below 2p-1 (the microbatches its warmup is laid out for), and m = 1.
TEST(Validator, AcceptsZbVForEveryMicrobatchCount) {
  for (const int p : {2, 3, 4, 8}) {
    for (const int m : {1, p, 2 * p, 2 * p - 1, 2 * p + 1, p + (p % 2 == 0 ? 1 : 2)}) {
      const Schedule schedule = make_zb_v_schedule(p, m);
      EXPECT_TRUE(validate_schedule(schedule).empty()) << "p=" << p << " m=" << m << "\n"
                                                       << report(validate_schedule(schedule));
    }
  }
}

// The placement is part of the schedule: ZB-V's lists read as Megatron's interleaving name the
// wrong peers, and a V has exactly two arms.
TEST(Validator, ChecksTheVPlacement) {
  Schedule misread = make_zb_v_schedule(3, 6);
  misread.placement = ChunkPlacement::interleaved;
  // Rank 0's chunk 1 is virtual stage 5 in the V but 3 when interleaved, whose input is stage 2.
  const int index = find_action(misread, 0, Action{ActionKind::RecvActivation, 0, 1, 4});
  expect_problem(misread, 0, index, "the peer of virtual stage 3 for this data is stage 2");

  Schedule three_arms = make_interleaved_1f1b_schedule(2, 2, 3);
  three_arms.placement = ChunkPlacement::v_shape;
  EXPECT_CONTAINS(report(validate_schedule(three_arms)), "a V placement holds 2 chunks per rank");
}

// The turn of the V is a channel from rank p-1 to itself, ordered like any other.
TEST(Validator, ZbVTurnMessagesKeepTheirOrder) {
  Schedule schedule = make_zb_v_schedule(2, 4);
  auto& rank1 = schedule.ranks[1];
  const int first = find_action(schedule, 1, Action{ActionKind::RecvActivation, 0, 1, 1});
  const int second = find_action(schedule, 1, Action{ActionKind::RecvActivation, 1, 1, 1});
  std::swap(rank1[first], rank1[second]);
  expect_problem(schedule, 1, first, "receive #0 of activations from rank 1 expects mb 1");
}

}  // namespace
}  // namespace strata
