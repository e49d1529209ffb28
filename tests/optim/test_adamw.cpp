// AdamW against the update written out by hand, decay exemptions, and the LR schedule.
#include <gtest/gtest.h>

#include <cmath>

#include "strata/optim/adamw.h"
#include "test_support.h"

namespace strata {
namespace {

TEST(AdamW, MatchesClosedFormUpdate) {
  TrainConfig config;
  config.beta1 = 0.9;
  config.beta2 = 0.99;
  config.eps = 1e-8;
  config.weight_decay = 0.1;
  std::vector<Parameter> parameters(2);
  parameters[0].name = "w";
  parameters[0].value = at::tensor({1.0, -2.0, 3.0}, at::kDouble).set_requires_grad(true);
  parameters[1].name = "norm";
  parameters[1].value = at::tensor({0.5}, at::kDouble).set_requires_grad(true);
  parameters[1].weight_decay = false;
  AdamW optimizer(std::vector<Parameter*>{&parameters[0], &parameters[1]}, config);

  std::vector<double> w = {1.0, -2.0, 3.0}, m(3, 0.0), v(3, 0.0);
  double n = 0.5, mn = 0, vn = 0;
  const double lr = 0.01;
  for (int step = 1; step <= 3; ++step) {
    std::vector<double> g = {0.1 * step, -0.2, 0.3 / step};
    const double gn = 0.05 * step;
    parameters[0].value.mutable_grad() = at::tensor(g, at::kDouble);
    parameters[1].value.mutable_grad() = at::tensor({gn}, at::kDouble);
    optimizer.step(lr);
    const double bc1 = 1 - std::pow(0.9, step), bc2 = 1 - std::pow(0.99, step);
    for (int i = 0; i < 3; ++i) {
      w[i] *= 1 - lr * 0.1;
      m[i] = 0.9 * m[i] + 0.1 * g[i];
      v[i] = 0.99 * v[i] + 0.01 * g[i] * g[i];
      w[i] -= lr / bc1 * m[i] / (std::sqrt(v[i] / bc2) + 1e-8);
    }
    mn = 0.9 * mn + 0.1 * gn;
    vn = 0.99 * vn + 0.01 * gn * gn;
    n -= lr / bc1 * mn / (std::sqrt(vn / bc2) + 1e-8);  // no decay on norms
  }
  EXPECT_EQ(testing::compare_tensors(parameters[0].value, at::tensor(w, at::kDouble), 1e-12), "");
  EXPECT_NEAR(parameters[1].value.item<double>(), n, 1e-12);
  EXPECT_EQ(optimizer.step_count(), 3);
  EXPECT_EQ(optimizer.state_bytes(), 2 * (3 + 1) * 8);
}

TEST(LearningRate, WarmupThenCosineToMin) {
  TrainConfig config;
  config.lr = 1.0;
  config.min_lr = 0.1;
  config.warmup_steps = 4;
  config.steps = 14;
  EXPECT_DOUBLE_EQ(learning_rate(config, 0), 0.25);
  EXPECT_DOUBLE_EQ(learning_rate(config, 3), 1.0);
  EXPECT_DOUBLE_EQ(learning_rate(config, 4), 1.0);
  EXPECT_NEAR(learning_rate(config, 13), 0.1, 1e-12);
  // Halfway through the decay: the midpoint of lr and min_lr (steps 4..13, midpoint 8.5).
  EXPECT_NEAR((learning_rate(config, 8) + learning_rate(config, 9)) / 2, 0.55, 1e-2);
  for (int64_t step = 5; step < 14; ++step) {
    EXPECT_LT(learning_rate(config, step), learning_rate(config, step - 1)) << step;
  }
}

}  // namespace
}  // namespace strata

namespace strata {
namespace {

// Why mixed precision keeps float32 master weights: an update smaller than half a unit in the
// last place of a bfloat16 weight (2^-8 at 1.0) is rounded away when the weight itself is
// updated, every step; a float32 master accumulates it (data_parallel/sharded_optimizer.h).
TEST(AdamW, UpdatesBelowBf16ResolutionVanishWithoutMasterWeights) {
  TrainConfig config;
  config.weight_decay = 0;
  std::vector<Parameter> parameters(2);
  parameters[0].value = at::ones({64}, at::kBFloat16).set_requires_grad(true);
  parameters[1].value = at::ones({64}, at::kFloat).set_requires_grad(true);  // a master
  AdamW optimizer(std::vector<Parameter*>{&parameters[0], &parameters[1]}, config);
  const double lr = 1e-3;  // Adam's first steps move each weight by about lr
  for (int step = 0; step < 10; ++step) {
    for (auto& parameter : parameters) {
      parameter.value.mutable_grad() = at::full({64}, 0.5, parameter.value.options());
    }
    optimizer.step(lr);
  }
  EXPECT_TRUE(parameters[0].value.eq(1.0).all().item<bool>()) << parameters[0].value;
  const at::Tensor master = parameters[1].value.detach();
  EXPECT_NEAR(master[0].item<double>(), 1.0 - 10 * lr, 1e-5);
  // Rounded to bfloat16 the master has moved: that is what the model computes with.
  EXPECT_TRUE(master.to(at::kBFloat16).lt(1.0).all().item<bool>());
}

}  // namespace
}  // namespace strata
