// The mixture-of-experts layer on one rank: router and expert gradients against finite
// differences (double precision, auxiliary losses included), deterministic tie-breaking and
// capacity in closed form, and cached decoding equal to the full forward (capacity is
// causal).
#include <gtest/gtest.h>

#include <ATen/CPUGeneratorImpl.h>
#include <ATen/core/grad_mode.h>

#include "strata/core/stages.h"
#include "strata/model/gpt.h"
#include "strata/model/moe.h"
#include "test_configs.h"
#include "test_support.h"

namespace strata {
namespace {

ModelConfig moe_model(int64_t experts, int64_t top_k, double capacity_factor) {
  ModelConfig config = testing::tiny_model();
  config.vocab_size = 13;
  config.seq_len = 8;
  config.moe.num_experts = experts;
  config.moe.top_k = top_k;
  config.moe.capacity_factor = capacity_factor;
  config.moe.aux_loss_coef = 0.1;
  config.moe.z_loss_coef = 0.01;
  return config;
}

// The objective training minimizes: cross-entropy plus the weighted auxiliary losses.
double objective(GPT& model, const at::Tensor& tokens, const at::Tensor& targets) {
  at::NoGradGuard no_grad;
  double value = model.loss(tokens, targets).item<double>();
  for (const MoeLayerStats& layer : model.take_moe_stats()) {
    value += model.config().moe.aux_loss_coef * layer.aux_loss +
             model.config().moe.z_loss_coef * layer.z_loss;
  }
  return value;
}

struct GradientCase {
  int64_t experts, top_k;
  double capacity_factor;
  Activation activation;
};

class MoeGradient : public ::testing::TestWithParam<GradientCase> {};

TEST_P(MoeGradient, RouterAndExpertsMatchFiniteDifferences) {
  const GradientCase& c = GetParam();
  ModelConfig config = moe_model(c.experts, c.top_k, c.capacity_factor);
  config.moe.activation = c.activation;
  GPT model(config, /*seed=*/5, at::kDouble);
  auto generator = at::make_generator<at::CPUGeneratorImpl>(9);
  at::Tensor tokens = at::randint(config.vocab_size, {3, config.seq_len}, generator, at::kLong);
  at::Tensor targets = at::randint(config.vocab_size, {3, config.seq_len}, generator, at::kLong);

  model.loss(tokens, targets).backward();
  const std::vector<MoeLayerStats> stats = model.take_moe_stats();
  ASSERT_EQ(stats.size(), 2u);
  if (c.capacity_factor > 0) {
    EXPECT_GT(stats[0].dropped + stats[1].dropped, 0) << "no drops";
  }
  const double h = 1e-6;
  int checked = 0;
  for (auto& parameter : model.parameters()) {
    if (parameter.name.find("moe.") == std::string::npos) continue;
    at::Tensor flat = parameter.value.detach().view(-1);
    at::Tensor grad = parameter.value.grad().view(-1);
    for (int64_t i = 0; i < flat.numel(); i += std::max<int64_t>(1, flat.numel() / 7)) {
      const double saved = flat[i].item<double>();
      flat[i] = saved + h;
      const double up = objective(model, tokens, targets);
      flat[i] = saved - h;
      const double down = objective(model, tokens, targets);
      flat[i] = saved;
      const double numeric = (up - down) / (2 * h);
      EXPECT_NEAR(grad[i].item<double>(), numeric, 1e-6 + 1e-5 * std::abs(numeric))
          << parameter.name << "[" << i << "]";
      ++checked;
    }
  }
  EXPECT_GE(checked, 6 * 7);
  // The router learns from the language-model loss too (not only the auxiliary losses).
  at::Tensor router_grad = model.parameter("blocks.0.moe.router.weight").value.grad();
  EXPECT_GT(router_grad.abs().max().item<double>(), 0.0);
}

INSTANTIATE_TEST_SUITE_P(Cases, MoeGradient,
                         ::testing::Values(GradientCase{4, 1, 0.0, Activation::gelu},
                                           GradientCase{4, 2, 1.0, Activation::gelu},
                                           GradientCase{8, 2, 0.0, Activation::swiglu},
                                           GradientCase{8, 1, 1.25, Activation::swiglu}));

MoeWeights random_weights(const ModelConfig& config, uint64_t seed) {
  auto generator = at::make_generator<at::CPUGeneratorImpl>(seed);
  const int64_t E = config.moe.num_experts, C = config.d_model, F = config.ff_dim();
  auto randn = [&](std::vector<int64_t> shape) {
    return at::normal(0.0, 0.3, shape, generator, at::TensorOptions(at::kDouble));
  };
  return {randn({E, C}), randn({E, F, C}), randn({E, C, F})};
}

TEST(MoeRouting, TiesGoToTheLowestExpertAndCapacityKeepsTheEarliestTokens) {
  for (int64_t top_k : {1, 2}) {
    ModelConfig config = moe_model(4, top_k, 1.0);
    MoeWeights weights = random_weights(config, 3);
    weights.router.zero_();  // every probability 1/4: a four-way tie for every token
    auto generator = at::make_generator<at::CPUGeneratorImpl>(4);
    const int64_t B = 2, T = config.seq_len, C = config.d_model;
    at::Tensor x = at::normal(0.0, 1.0, {B, T, C}, generator, at::TensorOptions(at::kDouble));
    MoeOutput out = moe_forward(x, weights, config, nullptr);

    // capacity = ceil(1.0 * top_k * 8 / 4) = 2 * top_k tokens of each sequence per expert.
    const int64_t capacity = 2 * top_k;
    EXPECT_EQ(moe_capacity(config), capacity);
    std::vector<int64_t> expected_load{B * T, top_k == 2 ? B * T : 0, 0, 0};
    EXPECT_EQ(out.stats.load, expected_load);
    EXPECT_EQ(out.stats.dropped, top_k * B * (T - capacity));
    // The Switch loss of a uniform router: E * sum_e share_e / E = 1.
    EXPECT_NEAR(out.stats.aux_loss, 1.0, 1e-12);
    EXPECT_NEAR(out.stats.z_loss, std::pow(std::log(4.0), 2), 1e-12);

    // Kept tokens get expert 0 (weight 1/4 for top_k = 1) or the mean of experts 0 and 1.
    auto ffn = [&](int64_t e, const at::Tensor& rows) {
      return at::matmul(at::gelu(at::matmul(rows, weights.fc[e].t()), "tanh"), weights.out[e].t());
    };
    at::Tensor expected = top_k == 1 ? 0.25 * ffn(0, x) : 0.5 * (ffn(0, x) + ffn(1, x));
    expected.narrow(1, capacity, T - capacity).zero_();  // dropped: the residual passes alone
    EXPECT_EQ(testing::compare_tensors(out.y, expected, 1e-12, 1e-14), "") << "top_k " << top_k;
  }
}

TEST(MoeRouting, DecodingWithACacheEqualsTheFullForward) {
  ModelConfig config = moe_model(4, 2, 0.5);  // capacity 2 of 8 positions: many drops
  GPT model(config, 21, at::kDouble);
  at::NoGradGuard no_grad;
  auto generator = at::make_generator<at::CPUGeneratorImpl>(8);
  at::Tensor tokens = at::randint(config.vocab_size, {2, config.seq_len}, generator, at::kLong);
  at::Tensor full = model.logits(tokens);
  ASSERT_GT(model.take_moe_stats().at(0).dropped, 0);
  KVCache cache;
  at::Tensor prefix = model.logits(tokens.narrow(1, 0, 3), &cache);
  EXPECT_EQ(testing::compare_tensors(prefix, full.narrow(1, 0, 3), 1e-10, 1e-12), "");
  for (int64_t t = 3; t < config.seq_len; ++t) {
    at::Tensor step = model.logits(tokens.narrow(1, t, 1), &cache);
    EXPECT_EQ(testing::compare_tensors(step, full.narrow(1, t, 1), 1e-10, 1e-12), "")
        << "position " << t;
  }
}

TEST(MoeModel, ParametersAndFlops) {
  ModelConfig config = moe_model(4, 2, 0.0);
  config.moe.every = 2;  // layer 1 is MoE, layer 0 dense
  GPT model(config, 1, at::kFloat);
  const int64_t C = config.d_model, F = config.ff_dim(), E = 4;
  EXPECT_EQ(model.parameter("blocks.1.moe.experts.fc.weight").value.sizes().vec(),
            (std::vector<int64_t>{E, F, C}));
  EXPECT_EQ(model.parameter("blocks.1.moe.experts.fc.weight").spec.split_axis, ShardAxis::Ep);
  EXPECT_EQ(model.parameter("blocks.0.mlp.fc.weight").value.sizes().vec(),
            (std::vector<int64_t>{F, C}));
  ModelConfig dense = config;
  dense.moe.num_experts = 0;
  // One MoE layer instead of a dense one: + E * C router, + (top_k - 1) FFNs per token, and
  // + (E - 1) FFNs' parameters.
  EXPECT_DOUBLE_EQ(
      training_flops_per_token(config.shape()) - training_flops_per_token(dense.shape()),
      6.0 * (E * C + (2 - 1) * 2.0 * F * C));
  EXPECT_EQ(
      GPT(config, 1, at::kFloat).num_parameters() - GPT(dense, 1, at::kFloat).num_parameters(),
      E * C + (E - 1) * 2 * F * C);
}

}  // namespace
}  // namespace strata
