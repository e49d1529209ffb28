// The dynamic loss-scale policy of fp16 training: hysteresis before a backoff, growth after a
// run of clean steps, skipped steps counted, and the state a checkpoint carries.
#include <gtest/gtest.h>

#include "strata/optim/loss_scale.h"

namespace strata {
namespace {

LossScaler::Policy small_policy() {
  LossScaler::Policy policy;
  policy.initial = 1024;
  policy.growth_interval = 3;
  return policy;
}

TEST(LossScaler, DisabledNeverScalesOrSkips) {
  LossScaler scaler;
  EXPECT_FALSE(scaler.enabled());
  EXPECT_EQ(scaler.scale(), 1.0);
  EXPECT_FALSE(scaler.update(false));
  EXPECT_EQ(scaler.scale(), 1.0);
  EXPECT_TRUE(scaler.state().is_null());
}

TEST(LossScaler, DefaultsAreTheIssuedPolicy) {
  const LossScaler::Policy policy;
  EXPECT_EQ(policy.initial, 65536.0);
  EXPECT_EQ(policy.growth, 2.0);
  EXPECT_EQ(policy.backoff, 0.5);
  EXPECT_EQ(policy.growth_interval, 1000);
  EXPECT_EQ(policy.hysteresis, 2);
  EXPECT_EQ(LossScaler(true, policy).scale(), 65536.0);
}

TEST(LossScaler, BacksOffAfterHysteresisOverflowsAndGrowsAfterCleanRuns) {
  LossScaler scaler(true, small_policy());
  // The first overflow is tolerated (hysteresis 2), the second halves the scale; both skip.
  EXPECT_TRUE(scaler.update(true));
  EXPECT_EQ(scaler.scale(), 1024);
  EXPECT_TRUE(scaler.update(true));
  EXPECT_EQ(scaler.scale(), 512);
  // Without a growth in between, every further overflow backs off.
  EXPECT_TRUE(scaler.update(true));
  EXPECT_EQ(scaler.scale(), 256);
  EXPECT_EQ(scaler.skipped_steps(), 3);
  // Three clean steps in a row grow it and restore the hysteresis.
  EXPECT_FALSE(scaler.update(false));
  EXPECT_FALSE(scaler.update(false));
  EXPECT_EQ(scaler.scale(), 256);
  EXPECT_FALSE(scaler.update(false));
  EXPECT_EQ(scaler.scale(), 512);
  EXPECT_TRUE(scaler.update(true));
  EXPECT_EQ(scaler.scale(), 512);  // tolerated again
  // An overflow restarts the count of clean steps.
  EXPECT_FALSE(scaler.update(false));
  EXPECT_FALSE(scaler.update(false));
  EXPECT_TRUE(scaler.update(true));
  EXPECT_EQ(scaler.scale(), 256);
  EXPECT_EQ(scaler.skipped_steps(), 5);
}

TEST(LossScaler, NeverFallsBelowTheMinimum) {
  LossScaler::Policy policy = small_policy();
  policy.initial = 4;
  policy.hysteresis = 1;
  LossScaler scaler(true, policy);
  for (int i = 0; i < 10; ++i) scaler.update(true);
  EXPECT_EQ(scaler.scale(), policy.min_scale);
}

TEST(LossScaler, StateRoundTripsThroughACheckpoint) {
  LossScaler scaler(true, small_policy());
  for (bool overflow : {true, false, false, true, true, false}) scaler.update(overflow);
  LossScaler resumed(true, small_policy());
  resumed.load_state(nlohmann::json::parse(scaler.state().dump()));
  EXPECT_EQ(resumed.scale(), scaler.scale());
  EXPECT_EQ(resumed.skipped_steps(), scaler.skipped_steps());
  for (bool overflow : {false, false, true, false, true, true}) {
    EXPECT_EQ(resumed.update(overflow), scaler.update(overflow));
    EXPECT_EQ(resumed.scale(), scaler.scale());
  }
  // A checkpoint without scaler state (an fp32 or bf16 run) leaves the initial scale.
  LossScaler fresh(true, small_policy());
  fresh.load_state(nullptr);
  EXPECT_EQ(fresh.scale(), 1024);
}

}  // namespace
}  // namespace strata
