// The schedule generators: every generator passes the validator for p in 1..8, m in 1..3p and
// v in 1..3 wherever the schedule allows them; the phases have the lengths the papers give;
// requests that cannot be built fail with a message naming the parameter and what would work.
#include <gtest/gtest.h>

#include <algorithm>

#include "expect_error.h"
#include "strata/core/error.h"
#include "strata/pipeline/generators.h"
#include "strata/pipeline/validator.h"
#include "test_configs.h"

namespace strata {
namespace {

// Every valid (p, m, v) of the sweep, per schedule.
std::vector<Layout> sweep(PipelineSchedule schedule) {
  std::vector<Layout> requests;
  for (int p = 1; p <= 8; ++p) {
    for (int m = 1; m <= 3 * p; ++m) {
      for (int v = 1; v <= 3; ++v) {
        const bool interleaved = schedule == PipelineSchedule::interleaved_one_f_one_b;
        const bool v_shape = schedule == PipelineSchedule::zb_v;
        if (!interleaved && !v_shape && v != 1) continue;
        if (interleaved && (v < 2 || p < 2 || m % p != 0)) continue;
        if (v_shape && (v != 2 || p < 2)) continue;  // every m, odd ones and m < p included
        requests.push_back(testing::pipeline_layout(schedule, p, m, v));
      }
    }
  }
  return requests;
}

std::string describe(const Layout& request) {
  return str(name_of(request.schedule), " p=", request.pp, " m=", request.microbatches,
             " v=", request.vpp);
}

// The compute actions of one rank, as "F0", "B1", "Bi2", "W0" (chunk appended as ".c" if v>1).
std::vector<std::string> compute_order(const Schedule& schedule, int rank) {
  std::vector<std::string> order;
  for (const Action& action : schedule.ranks[rank]) {
    if (!is_compute(action.kind)) continue;
    std::string item = kind_name(action.kind) + std::to_string(action.microbatch);
    if (schedule.chunks > 1) item += "." + std::to_string(action.chunk);
    order.push_back(item);
  }
  return order;
}

std::string joined(const std::vector<std::string>& items) {
  std::string text;
  for (const auto& item : items) text += (text.empty() ? "" : " ") + item;
  return text;
}

TEST(Generators, EveryScheduleValidatesOverTheSweep) {
  int checked = 0;
  for (const PipelineSchedule schedule : pipeline_schedules()) {
    const auto requests = sweep(schedule);
    EXPECT_FALSE(requests.empty()) << name_of(schedule);
    for (const Layout& request : requests) {
      const Schedule schedule = build_schedule(request);
      EXPECT_EQ(schedule.stages, request.pp);
      EXPECT_EQ(schedule.microbatches, request.microbatches);
      EXPECT_EQ(schedule.chunks, request.vpp);
      EXPECT_EQ(static_cast<int64_t>(schedule.ranks.size()), request.pp);
      const auto problems = validate_schedule(schedule);
      EXPECT_TRUE(problems.empty())
          << describe(request) << ": " << to_string(problems.front()) << "\n"
          << to_string(schedule);
      ++checked;
    }
  }
  // 108 = sum of 3p over p = 1..8; interleaved 7 * 3 * 2; zb-v 105 = sum of 3p over p = 2..8.
  EXPECT_EQ(checked, 3 * 108 + 42 + 105);
}

TEST(Generators, OneFOneBOrderOnEveryStage) {
  const Schedule schedule = make_1f1b_schedule(4, 6);
  EXPECT_EQ(joined(compute_order(schedule, 0)), "F0 F1 F2 F3 B0 F4 B1 F5 B2 B3 B4 B5");
  EXPECT_EQ(joined(compute_order(schedule, 1)), "F0 F1 F2 B0 F3 B1 F4 B2 F5 B3 B4 B5");
  EXPECT_EQ(joined(compute_order(schedule, 2)), "F0 F1 B0 F2 B1 F3 B2 F4 B3 F5 B4 B5");
  EXPECT_EQ(joined(compute_order(schedule, 3)), "F0 B0 F1 B1 F2 B2 F3 B3 F4 B4 F5 B5");
}

// Stage r warms up with min(p-r-1, m) forwards before its first backward.
TEST(Generators, OneFOneBWarmupIsMinOfStagesLeftAndMicrobatches) {
  for (int p = 1; p <= 8; ++p) {
    for (int m = 1; m <= 3 * p; ++m) {
      const Schedule schedule = make_1f1b_schedule(p, m);
      for (int r = 0; r < p; ++r) {
        const auto order = compute_order(schedule, r);
        const auto first_backward = std::find_if(
            order.begin(), order.end(), [](const std::string& item) { return item[0] == 'B'; });
        const int forwards_before = static_cast<int>(first_backward - order.begin());
        EXPECT_EQ(forwards_before, std::min(p - r - 1, m) + (m > p - r - 1 ? 1 : 0))
            << "p=" << p << " m=" << m << " rank " << r;
      }
    }
  }
}

TEST(Generators, GpipeRunsAllForwardsThenAllBackwards) {
  const Schedule schedule = make_gpipe_schedule(3, 4);
  for (int r = 0; r < 3; ++r) {
    EXPECT_EQ(joined(compute_order(schedule, r)), "F0 F1 F2 F3 B0 B1 B2 B3") << "rank " << r;
  }
}

TEST(Generators, CommunicationSurroundsTheCompute) {
  const Schedule schedule = make_1f1b_schedule(3, 3);
  // The middle stage: receive before F and B, send after.
  const auto& middle = schedule.ranks[1];
  ASSERT_GE(middle.size(), 3u);
  EXPECT_EQ(middle[0], (Action{ActionKind::RecvActivation, 0, 0, 0}));
  EXPECT_EQ(middle[1], (Action{ActionKind::Forward, 0, 0, -1}));
  EXPECT_EQ(middle[2], (Action{ActionKind::SendActivation, 0, 0, 2}));
  // Every compute on the middle stage has one receive and one send.
  EXPECT_EQ(middle.size(), 3u * 2 * 3);
  // The first and last stages only talk in one direction.
  for (const Action& action : schedule.ranks[0]) {
    EXPECT_NE(action.kind, ActionKind::RecvActivation);
    EXPECT_NE(action.kind, ActionKind::SendGrad);
  }
  for (const Action& action : schedule.ranks[2]) {
    EXPECT_NE(action.kind, ActionKind::SendActivation);
    EXPECT_NE(action.kind, ActionKind::RecvGrad);
  }
  // One stage alone has no communication at all.
  const Schedule alone = make_zb_h1_schedule(1, 3);
  for (const Action& action : alone.ranks[0]) {
    EXPECT_TRUE(is_compute(action.kind)) << to_string(action);
  }
}

// Megatron's interleaving: groups of p microbatches per chunk; warmup (p-r-1)*2 + (v-1)*p.
TEST(Generators, InterleavedVisitsChunksInGroupsOfP) {
  const Schedule schedule = make_interleaved_1f1b_schedule(2, 4, 2);
  EXPECT_EQ(joined(compute_order(schedule, 0)),
            "F0.0 F1.0 F0.1 F1.1 F2.0 B0.1 F3.0 B1.1 F2.1 B0.0 F3.1 B1.0 B2.1 B3.1 B2.0 B3.0");
  EXPECT_EQ(joined(compute_order(schedule, 1)),
            "F0.0 F1.0 F0.1 B0.1 F1.1 B1.1 F2.0 B0.0 F3.0 B1.0 F2.1 B2.1 F3.1 B3.1 B2.0 B3.0");
  // m == p: every forward is warmup, as in Megatron.
  const auto order = compute_order(make_interleaved_1f1b_schedule(3, 3, 2), 2);
  EXPECT_EQ(joined(order), "F0.0 F1.0 F2.0 F0.1 F1.1 F2.1 B0.1 B1.1 B2.1 B0.0 B1.0 B2.0");
}

TEST(Generators, ZeroBubbleSplitsBackwardAndDefersWeightGradients) {
  const Schedule schedule = make_zb_h1_schedule(3, 5);
  // Stage 0 runs each W right after its B; stage r keeps up to r of them queued.
  EXPECT_EQ(joined(compute_order(schedule, 0)),
            "F0 F1 F2 Bi0 W0 F3 Bi1 W1 F4 Bi2 W2 Bi3 W3 Bi4 W4");
  EXPECT_EQ(joined(compute_order(schedule, 1)),
            "F0 F1 Bi0 F2 Bi1 W0 F3 Bi2 W1 F4 Bi3 W2 Bi4 W3 W4");
  EXPECT_EQ(joined(compute_order(schedule, 2)),
            "F0 Bi0 F1 Bi1 F2 Bi2 W0 F3 Bi3 W1 F4 Bi4 W2 W3 W4");
  for (int r = 0; r < 3; ++r) {
    for (const Action& action : schedule.ranks[r]) EXPECT_NE(action.kind, ActionKind::Backward);
  }
}

void expect_user_error(const Layout& request, const LayoutVocabulary& names,
                       const std::vector<std::string>& fragments) {
  SCOPED_TRACE(describe(request));
  testing::expect_user_error([&] { build_schedule(request, names); }, fragments);
}

// ZB-V: rank r holds virtual stage r as chunk 0 and 2p-1-r as chunk 1. Forwards run down the
// ranks on chunk 0, turn on rank p-1 (a message to itself) and come back on chunk 1; the
// backward starts on rank 0, where the last virtual stage is.
TEST(Generators, ZbVPlacesTwoChunksPerRankInAV) {
  for (int p = 2; p <= 8; ++p) {
    const Schedule schedule = make_zb_v_schedule(p, 2 * p);
    EXPECT_EQ(schedule.placement, ChunkPlacement::v_shape);
    EXPECT_EQ(schedule.chunks, 2);
    for (int r = 0; r < p; ++r) {
      EXPECT_EQ(schedule.virtual_stage(r, 0), r);
      EXPECT_EQ(schedule.virtual_stage(r, 1), 2 * p - 1 - r);
      EXPECT_EQ(schedule.rank_of(r), r);
      EXPECT_EQ(schedule.rank_of(2 * p - 1 - r), r);
    }
    // The turn: rank p-1's chunk 0 sends to its own chunk 1 (virtual stage p-1 to p).
    const auto& turn = schedule.ranks[p - 1];
    EXPECT_NE(std::find(turn.begin(), turn.end(), Action{ActionKind::SendActivation, 0, 0, p}),
              turn.end());
    EXPECT_NE(std::find(turn.begin(), turn.end(), Action{ActionKind::RecvActivation, 0, 1, p - 1}),
              turn.end());
    // Rank 0 holds both ends: nothing comes into its chunk 0 or goes out of its chunk 1.
    for (const Action& action : schedule.ranks[0]) {
      const bool receives_input = action.kind == ActionKind::RecvActivation && action.chunk == 0;
      const bool sends_output = action.kind == ActionKind::SendActivation && action.chunk == 1;
      EXPECT_FALSE(receives_input || sends_output) << to_string(action);
      EXPECT_NE(action.kind, ActionKind::Backward) << to_string(action);
    }
  }
}

// The phases of rank r (generators.cpp): 2(p-r)-1 chunk-0 forwards, r pairs (chunk 1, chunk 0),
// p-r chunk-1 triples F B W, steady rounds F B W on chunk 0 then chunk 1, cooldown.
TEST(Generators, ZbVOrderOnEveryRank) {
  const Schedule two = make_zb_v_schedule(2, 4);
  EXPECT_EQ(joined(compute_order(two, 0)),
            "F0.0 F1.0 F2.0 F0.1 Bi0.1 W0.1 F1.1 Bi1.1 W1.1 F3.0 Bi0.0 W0.0 F2.1 Bi2.1 W2.1 Bi1.0 "
            "W1.0 F3.1 Bi3.1 W3.1 Bi2.0 W2.0 Bi3.0 W3.0");
  EXPECT_EQ(joined(compute_order(two, 1)),
            "F0.0 F0.1 F1.0 F1.1 Bi0.1 W0.1 F2.0 Bi0.0 W0.0 F2.1 Bi1.1 W1.1 F3.0 Bi1.0 W1.0 F3.1 "
            "Bi2.1 W2.1 Bi2.0 Bi3.1 Bi3.0 W2.0 W3.1 W3.0");
  const Schedule three = make_zb_v_schedule(3, 5);
  EXPECT_EQ(joined(compute_order(three, 1)),
            "F0.0 F1.0 F2.0 F0.1 F3.0 F1.1 Bi0.1 W0.1 F2.1 Bi1.1 W1.1 F4.0 Bi0.0 W0.0 F3.1 Bi2.1 "
            "W2.1 Bi1.0 W1.0 F4.1 Bi3.1 W3.1 Bi2.0 Bi4.1 Bi3.0 W2.0 Bi4.0 W3.0 W4.1 W4.0");
  // Fewer microbatches than the 2p-1 the phases are laid out for: the missing ones left out.
  EXPECT_EQ(joined(compute_order(make_zb_v_schedule(3, 1), 0)), "F0.0 F0.1 Bi0.1 W0.1 Bi0.0 W0.0");
}

// The rule book's verdict (core/layout_rules.h), in the words of whoever asks.
TEST(Generators, RejectedRequestsSayWhatWouldWork) {
  const LayoutVocabulary config = LayoutVocabulary::config();
  const LayoutVocabulary flag = LayoutVocabulary::layout_flag();
  const PipelineSchedule interleaved = PipelineSchedule::interleaved_one_f_one_b;
  using testing::pipeline_layout;
  expect_user_error(pipeline_layout(interleaved, 4, 10, 2), config,
                    {"parallel.microbatches (10)", "multiple of parallel.pp (4)", "8 or 12"});
  expect_user_error(pipeline_layout(interleaved, 4, 3, 2), flag,
                    {"the microbatches (3)", "multiple of pp (4), e.g. 4"});
  expect_user_error(pipeline_layout(interleaved, 4, 8, 1), flag,
                    {"vpp >= 2", "got 1", "use schedule=1f1b"});
  expect_user_error(pipeline_layout(interleaved, 1, 4, 2), flag,
                    {"schedule=interleaved-1f1b needs pp > 1"});
  expect_user_error(pipeline_layout(PipelineSchedule::one_f_one_b, 4, 8, 2), flag,
                    {"vpp (2) > 1 needs schedule=interleaved-1f1b, or schedule=zb-v with vpp=2"});
  const PipelineSchedule zb_v = PipelineSchedule::zb_v;
  expect_user_error(pipeline_layout(zb_v, 4, 8, 1), config,
                    {"parallel.schedule = \"zb-v\" needs parallel.vpp = 2", "got 1"});
  expect_user_error(pipeline_layout(zb_v, 4, 8, 3), flag, {"schedule=zb-v needs vpp=2", "got 3"});
  expect_user_error(pipeline_layout(zb_v, 1, 8, 2), flag, {"schedule=zb-v needs pp > 1"});
  expect_user_error(pipeline_layout(PipelineSchedule::one_f_one_b, 0, 8, 1), config,
                    {"parallel.pp (0) must be >= 1"});
  expect_user_error(pipeline_layout(PipelineSchedule::gpipe, -2, 8, 1), flag, {"pp (-2)"});
  expect_user_error(pipeline_layout(PipelineSchedule::zb_h1, 2, 0, 1), flag,
                    {"the microbatches (0) must be >= 1"});
}

}  // namespace
}  // namespace strata
