// The layout rule book: each rule in the words of each caller (a config's keys, --layout's
// keys), the sequence-parallel rule with context parallelism, dp and microbatches derived, and
// the quick yes/no the search uses agreeing with the messages on every small layout.
#include <gtest/gtest.h>

#include <algorithm>

#include "expect_error.h"
#include "strata/core/config.h"
#include "strata/core/layout_rules.h"

namespace strata {
namespace {

// 12 heads, MLP width 48, 24 tokens, 8 layers, dense.
ModelShape model_shape(int64_t experts = 0) {
  ModelShape shape;
  shape.n_heads = 12;
  shape.d_ff = 48;
  shape.seq_len = 24;
  shape.n_layers = 8;
  shape.moe.num_experts = experts;
  return shape;
}

std::string problems_of(const Layout& layout, int64_t ranks, int64_t global_batch,
                        const LayoutVocabulary& names, const ModelShape& shape) {
  std::string text;
  for (const std::string& problem :
       check_layout(layout, shape, ranks, global_batch, names).problems) {
    text += problem + "\n";
  }
  return text;
}

TEST(LayoutRules, EachCallerReadsItsOwnKeys) {
  Layout layout;
  layout.tp = 5;
  layout.micro_batch = 3;
  layout.vpp = 2;
  layout.pp = 2;
  layout.schedule = PipelineSchedule::one_f_one_b;
  layout.sequence_parallel = true;
  const std::string config = problems_of(layout, 10, 8, LayoutVocabulary::config(), model_shape());
  EXPECT_CONTAINS(config, "parallel.tp (5) must divide model.n_heads (12)");
  EXPECT_CONTAINS(config, "parallel.tp (5) must divide the MLP width 48");
  EXPECT_CONTAINS(config,
                  "parallel.sequence_parallel = true needs parallel.tp (5) to divide "
                  "model.seq_len (24)");
  EXPECT_CONTAINS(config, "parallel.vpp (2) > 1 needs parallel.schedule = \"interleaved-1f1b\"");
  EXPECT_CONTAINS(config,
                  "train.global_batch (8) must be divisible by parallel.dp * "
                  "train.micro_batch = 1*3 = 3 (dp = -1 resolved to the ranks left "
                  "over); train.global_batch = 6 or 9, or train.micro_batch = 1, 2, 4 "
                  "or 8 would work");
  const std::string flag =
      problems_of(layout, 10, 8, LayoutVocabulary::layout_flag(), model_shape());
  EXPECT_CONTAINS(flag, "tp (5) must divide model.n_heads (12)");
  EXPECT_CONTAINS(flag, "sequence_parallel=true needs tp (5) to divide model.seq_len (24)");
  EXPECT_CONTAINS(flag, "vpp (2) > 1 needs schedule=interleaved-1f1b");
  EXPECT_CONTAINS(flag,
                  "--global-batch (8) must be divisible by dp * micro_batch = 1*3 = 3 (dp = "
                  "-1 resolved to the devices left over); --global-batch 6 or 9, or "
                  "micro_batch=1, 2, 4 or 8 would work");
  EXPECT_NOT_CONTAINS(flag, "parallel.");
  EXPECT_NOT_CONTAINS(flag, "train.");

  Layout wrong_world;
  wrong_world.tp = 2;
  wrong_world.dp = 2;
  EXPECT_CONTAINS(problems_of(wrong_world, 8, 8, LayoutVocabulary::config(), model_shape()),
                  "parallel.tp*pp*dp*cp = 2*1*2*1 = 4 does not match 8 ranks; choose sizes whose "
                  "product is 8, or parallel.dp = -1 for the ranks left over");
  EXPECT_CONTAINS(problems_of(wrong_world, 8, 8, LayoutVocabulary::layout_flag(), model_shape()),
                  "tp*pp*dp*cp = 2*1*2*1 = 4 does not match the cluster's 8 devices; choose sizes "
                  "whose product is 8, or dp=-1 for the devices left over");
}

// The sequence is cut into 2 * cp chunks (cp > 1), then each rank's piece split over tp: tp * cp
// must divide it.
TEST(LayoutRules, SequenceParallelSplitsWhatContextParallelismLeaves) {
  for (int64_t seq_len : {4, 6, 8, 12, 24, 30}) {
    for (int64_t tp : {1, 2, 3, 4}) {
      for (int64_t cp : {1, 2, 3}) {
        ModelShape shape = model_shape();
        shape.seq_len = seq_len;
        Layout layout;
        layout.tp = tp;
        layout.cp = cp;
        layout.sequence_parallel = true;
        const bool expected = tp > 1 && seq_len % (tp * cp) == 0 && 12 % tp == 0 &&
                              (cp == 1 || seq_len % (2 * cp) == 0);
        const LayoutVerdict verdict =
            check_layout(layout, shape, tp * cp, 1, LayoutVocabulary::config());
        EXPECT_EQ(verdict.valid(), expected)
            << "seq_len " << seq_len << " tp " << tp << " cp " << cp << ": "
            << (verdict.problems.empty() ? "valid" : verdict.problems.front());
      }
    }
  }
  ModelShape shape = model_shape();
  shape.seq_len = 6;
  Layout layout;
  layout.tp = 2;
  layout.cp = 2;
  layout.sequence_parallel = true;
  EXPECT_CONTAINS(problems_of(layout, 4, 4, LayoutVocabulary::config(), shape),
                  "parallel.sequence_parallel = true needs parallel.tp * parallel.cp = 2 * 2 = 4 "
                  "to divide model.seq_len (6): the sequence is split over cp, then each piece "
                  "over tp");
}

TEST(LayoutRules, DerivesDpAndMicrobatches) {
  Layout layout;
  layout.tp = 2;
  layout.pp = 2;
  layout.micro_batch = 2;
  layout.schedule = PipelineSchedule::zb_h1;
  const LayoutVerdict verdict =
      check_layout(layout, model_shape(), 12, 24, LayoutVocabulary::config());
  EXPECT_TRUE(verdict.valid()) << verdict.problems.front();
  EXPECT_EQ(verdict.dp, 3);
  EXPECT_EQ(verdict.microbatches, 4);
  layout.microbatches = 4;
  EXPECT_TRUE(check_layout(layout, model_shape(), 12, 24, LayoutVocabulary::config()).valid());
  layout.microbatches = 3;
  EXPECT_CONTAINS(problems_of(layout, 12, 24, LayoutVocabulary::config(), model_shape()),
                  "parallel.microbatches (3) must equal train.global_batch / (parallel.dp * "
                  "train.micro_batch) = 24 / (3*2) = 4");
  const LayoutVerdict undivided =
      check_layout(layout, model_shape(), 10, 24, LayoutVocabulary::config());
  EXPECT_EQ(undivided.dp, -1) << "10 ranks are not a multiple of tp * pp = 4";
  EXPECT_EQ(undivided.microbatches, 0);
}

// layout_is_valid is check_layout(...).valid() on every layout of a small grid, every rule
// breaking somewhere in it.
TEST(LayoutRules, QuickAnswerAgreesWithTheMessages) {
  const PipelineSchedule schedules[] = {PipelineSchedule::one_f_one_b, PipelineSchedule::zb_h1,
                                        PipelineSchedule::interleaved_one_f_one_b,
                                        PipelineSchedule::zb_v};
  int valid = 0, invalid = 0;
  for (int64_t experts : {0, 4}) {
    for (int64_t tp : {0, 1, 2, 5}) {
      for (int64_t pp : {1, 2, 16}) {
        for (int64_t dp : {-1, 0, 2}) {
          for (int64_t ep : {1, 2, 8}) {
            for (int64_t vpp : {1, 2, 3}) {
              for (int64_t micro_batch : {1, 3}) {
                for (PipelineSchedule schedule : schedules) {
                  for (bool sp : {false, true}) {
                    Layout layout;
                    layout.tp = tp;
                    layout.pp = pp;
                    layout.dp = dp;
                    layout.ep = ep;
                    layout.vpp = vpp;
                    layout.micro_batch = micro_batch;
                    layout.schedule = schedule;
                    layout.sequence_parallel = sp;
                    const bool quick = layout_is_valid(layout, model_shape(experts), 8, 8);
                    const LayoutVerdict full = check_layout(layout, model_shape(experts), 8, 8,
                                                            LayoutVocabulary::config());
                    ASSERT_EQ(quick, full.valid())
                        << "tp " << tp << " pp " << pp << " dp " << dp << " ep " << ep;
                    ++(quick ? valid : invalid);
                  }
                }
              }
            }
          }
        }
      }
    }
  }
  EXPECT_GT(valid, 0);
  EXPECT_GT(invalid, 0);
}

// One name per setting: the config key is section.name, --layout takes name=, strata simulate
// --name; every vocabulary is made from the table.
TEST(LayoutSettings, OneNameInEveryVocabulary) {
  const std::vector<std::string> keys = config_keys();
  const LayoutVocabulary config = LayoutVocabulary::config();
  const LayoutVocabulary flag = LayoutVocabulary::layout_flag();
  const LayoutVocabulary simulate = LayoutVocabulary::simulate_flags();
  for (const LayoutSetting& setting : layout_settings()) {
    const std::string key = str(setting.section, ".", setting.name);
    EXPECT_NE(std::find(keys.begin(), keys.end(), key), keys.end()) << key << " is no config key";
    EXPECT_EQ(config.*setting.words, key);
    if (std::string(setting.name) != "microbatches") {
      EXPECT_EQ(flag.*setting.words, setting.name);
    }
    EXPECT_EQ(simulate.*setting.words,
              setting.simulate_flag ? str("--", setting.name) : std::string(setting.name));
    EXPECT_EQ(find_layout_setting(setting.name), &setting);
  }
  EXPECT_EQ(find_layout_setting("chunks"), nullptr);
  EXPECT_EQ(simulate.vpp, "--vpp");
  Layout layout;
  layout.vpp = 3;
  layout.schedule = PipelineSchedule::zb_h1;
  layout.sequence_parallel = true;
  EXPECT_EQ(setting_text(layout, *find_layout_setting("vpp")), "3");
  EXPECT_EQ(setting_text(layout, *find_layout_setting("schedule")), "zb-h1");
  EXPECT_EQ(setting_text(layout, *find_layout_setting("sequence_parallel")), "true");
}

// The pipeline's rules alone, as the schedule generators and strata simulate ask them.
TEST(LayoutRules, ScheduleProblemsNameTheFlags) {
  Layout pipeline;
  pipeline.pp = 4;
  pipeline.vpp = 2;
  pipeline.microbatches = 10;
  pipeline.schedule = PipelineSchedule::interleaved_one_f_one_b;
  const LayoutVocabulary flags = LayoutVocabulary::simulate_flags();
  auto joined = [&](const Layout& layout) {
    std::string text;
    for (const std::string& problem : schedule_problems(layout, flags)) text += problem + "\n";
    return text;
  };
  EXPECT_EQ(joined(pipeline),
            "--schedule interleaved-1f1b needs --microbatches (10) to be a multiple of --pp (4), "
            "e.g. 8 or 12\n");
  pipeline.microbatches = 8;
  EXPECT_EQ(joined(pipeline), "");
  pipeline.microbatches = 0;
  EXPECT_EQ(joined(pipeline), "--microbatches (0) must be >= 1\n");
  pipeline.microbatches = 8;
  pipeline.schedule = PipelineSchedule::one_f_one_b;
  EXPECT_EQ(joined(pipeline),
            "--vpp (2) > 1 needs --schedule interleaved-1f1b, or --schedule zb-v with --vpp 2\n");
  EXPECT_CONTAINS(testing::user_error([&] { check_schedule(pipeline, flags); }),
                  "--vpp (2) > 1 needs --schedule interleaved-1f1b");
  // ZB-V: exactly two chunks (a V has two arms), a pipeline, and any number of microbatches.
  pipeline.schedule = PipelineSchedule::zb_v;
  for (int64_t m : {1, 3, 4, 7, 8, 9}) {
    pipeline.microbatches = m;
    EXPECT_EQ(joined(pipeline), "") << "m=" << m;
  }
  pipeline.vpp = 3;
  EXPECT_EQ(joined(pipeline),
            "--schedule zb-v needs --vpp 2 (two model chunks per stage, placed in a V: stage r "
            "holds virtual stages r and 2 * pp - 1 - r), got 3\n");
  pipeline.vpp = 2;
  pipeline.pp = 1;
  EXPECT_EQ(joined(pipeline), "--schedule zb-v needs --pp > 1\n");
  pipeline.pp = 4;
  pipeline.vpp = 1;
  EXPECT_CONTAINS(
      problems_of(pipeline, 4, 8, LayoutVocabulary::config(), model_shape()),
      "parallel.schedule = \"zb-v\" needs parallel.vpp = 2 (two model chunks per stage");
  // Two chunks on each of 8 stages need 16 layers.
  pipeline.pp = 8;
  pipeline.vpp = 2;
  EXPECT_CONTAINS(problems_of(pipeline, 8, 8, LayoutVocabulary::config(), model_shape()),
                  "model.n_layers (8) must be >= parallel.pp * parallel.vpp = 8 * 2 = 16");
}

// Serving's rules: tp * pp ranks, no other split, the model split over tp; no batch rules.
TEST(LayoutRules, ServingLayout) {
  Layout layout;
  layout.tp = 2;
  layout.pp = 2;
  layout.micro_batch = 3;  // a training batch that would not divide: not serving's concern
  const LayoutVocabulary names = LayoutVocabulary::config();
  EXPECT_TRUE(serving_layout_problems(layout, model_shape(), 4, names).empty());
  layout.tp = 5;
  EXPECT_CONTAINS(serving_layout_problems(layout, model_shape(), 10, names).at(0),
                  "parallel.tp (5) must divide model.n_heads (12)");
  layout.tp = 2;
  layout.cp = 2;
  EXPECT_CONTAINS(serving_layout_problems(layout, model_shape(), 4, names).at(0),
                  "strata serve runs the model on parallel.tp * parallel.pp ranks (2 * 2 = 4, for "
                  "4 ranks); parallel.dp, parallel.cp, parallel.ep and parallel.vpp must be 1 "
                  "(got -1, 2, 1, 1)");
}

}  // namespace
}  // namespace strata
