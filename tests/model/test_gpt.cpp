// The GPT: gradients against finite differences (double precision), layout-independent
// initialization, the parameter count in closed form, and KV-cache decoding equal to the full
// forward pass.
#include <gtest/gtest.h>

#include <ATen/CPUGeneratorImpl.h>
#include <ATen/core/grad_mode.h>

#include <cmath>

#include "strata/core/error.h"
#include "strata/core/stages.h"
#include "strata/kernels/attention.h"
#include "strata/model/gpt.h"
#include "test_configs.h"
#include "test_support.h"

namespace strata {
namespace {

using testing::tiny_model;

struct Variant {
  PositionEncoding pos;
  Norm norm;
  Activation activation;
  bool tie;
  int64_t n_kv_heads;
};

std::string variant_name(const ::testing::TestParamInfo<Variant>& info) {
  const Variant& v = info.param;
  return str(name_of(v.pos), "_", name_of(v.norm), "_", name_of(v.activation),
             v.tie ? "_tied" : "_untied", "_kv", v.n_kv_heads);
}

class GptGradient : public ::testing::TestWithParam<Variant> {};

TEST_P(GptGradient, MatchesFiniteDifferences) {
  ModelConfig config = tiny_model();
  config.pos = GetParam().pos;
  config.norm = GetParam().norm;
  config.activation = GetParam().activation;
  config.tie_embeddings = GetParam().tie;
  config.n_heads = 4;
  config.n_kv_heads = GetParam().n_kv_heads;
  GPT model(config, /*seed=*/7, at::kDouble);

  auto generator = at::make_generator<at::CPUGeneratorImpl>(3);
  at::Tensor tokens = at::randint(config.vocab_size, {2, config.seq_len}, generator, at::kLong);
  at::Tensor targets = at::randint(config.vocab_size, {2, config.seq_len}, generator, at::kLong);

  model.loss(tokens, targets).backward();
  const double h = 1e-6;
  for (auto& parameter : model.parameters()) {
    at::Tensor flat = parameter.value.detach().view(-1);  // shares storage with the parameter
    at::Tensor grad = parameter.value.grad().view(-1);
    // Up to 12 elements per tensor, spread over it.
    const int64_t stride = std::max<int64_t>(1, flat.numel() / 12);
    for (int64_t i = 0; i < flat.numel(); i += stride) {
      const double original = flat[i].item<double>();
      flat[i] = original + h;
      const double plus = model.loss(tokens, targets).item<double>();
      flat[i] = original - h;
      const double minus = model.loss(tokens, targets).item<double>();
      flat[i] = original;
      const double numeric = (plus - minus) / (2 * h);
      const double analytic = grad[i].item<double>();
      EXPECT_NEAR(analytic, numeric, 1e-6 + 1e-5 * std::abs(numeric))
          << parameter.name << " element " << i;
    }
  }
}

INSTANTIATE_TEST_SUITE_P(
    Variants, GptGradient,
    ::testing::Values(
        Variant{PositionEncoding::learned, Norm::layernorm, Activation::gelu, true, 4},
        Variant{PositionEncoding::rope, Norm::rmsnorm, Activation::swiglu, false, 2},
        Variant{PositionEncoding::rope, Norm::layernorm, Activation::gelu, false, 1},
        Variant{PositionEncoding::learned, Norm::rmsnorm, Activation::swiglu, true, 4}),
    variant_name);

TEST(GptInit, DependsOnlyOnSeedAndName) {
  ModelConfig two = tiny_model();
  ModelConfig three = tiny_model();
  three.n_layers = 3;
  GPT a(two, 5, at::kFloat), b(three, 5, at::kFloat), c(two, 6, at::kFloat);
  for (auto& parameter : a.parameters()) {
    auto& same = b.parameter(parameter.name);
    // Projections into the residual stream are scaled by 1/sqrt(2 * n_layers) (GPT-2): the
    // same draws, another scale.
    const bool residual = parameter.name.find("out.weight") != std::string::npos;
    const double scale = residual ? std::sqrt(2.0 / 3.0) : 1.0;
    EXPECT_EQ(testing::compare_tensors(parameter.value * scale, same.value, 1e-6), "")
        << parameter.name;
  }
  EXPECT_FALSE(at::equal(a.parameter("blocks.0.attn.q.weight").value,
                         c.parameter("blocks.0.attn.q.weight").value));
  // Float64 models start from the same (float32-drawn) values.
  GPT d(two, 5, at::kDouble);
  EXPECT_TRUE(at::equal(d.parameter("blocks.1.mlp.fc.weight").value.to(at::kFloat),
                        a.parameter("blocks.1.mlp.fc.weight").value));
}

TEST(GptShape, ParameterCountInClosedForm) {
  // Pre-norm GPT without linear biases, LayerNorm with bias:
  // per layer 4h^2 (qkv + out) + 2*h*F (mlp) + 4h (two norms); plus V*h, s*h, 2h final norm.
  ModelConfig config = tiny_model();
  config.vocab_size = 50;
  config.d_model = 16;
  config.n_heads = 4;
  config.d_ff = 0;  // 4h
  config.n_layers = 3;
  const int64_t h = 16, F = 64, l = 3, V = 50, s = config.seq_len;
  EXPECT_EQ(GPT(config, 1, at::kFloat).num_parameters(),
            l * (4 * h * h + 2 * h * F + 4 * h) + V * h + s * h + 2 * h);
  config.tie_embeddings = false;
  EXPECT_EQ(GPT(config, 1, at::kFloat).num_parameters(),
            l * (4 * h * h + 2 * h * F + 4 * h) + 2 * V * h + s * h + 2 * h);
}

TEST(GptShape, FlopsPerTokenFormula) {
  // 6 * (matmul parameters) + 12 * l * h * s for a standard GPT (d_ff = 4h, multi-head).
  const ModelConfig config = testing::gpt_config(1000, 64, 2, 4, 32);
  const double h = 64, l = 2, V = 1000, s = 32;
  EXPECT_DOUBLE_EQ(training_flops_per_token(config.shape()),
                   6 * (12 * l * h * h + V * h) + 12 * l * h * s);
}

TEST(GptDecode, KvCacheMatchesFullForward) {
  // Batches of 1 and 2 rows (decode steps run the decode kernel per row of the cache).
  for (const int64_t B : {1, 2})
    for (const PositionEncoding pos : {PositionEncoding::learned, PositionEncoding::rope}) {
      ModelConfig config = tiny_model();
      config.pos = pos;
      config.n_heads = 4;
      config.n_kv_heads = 2;
      GPT model(config, 9, at::kDouble);
      at::NoGradGuard no_grad;
      at::Tensor tokens = (at::arange(B * config.seq_len, at::kLong) * 7)
                              .remainder(config.vocab_size)
                              .view({B, -1});
      at::Tensor full = model.logits(tokens);
      KVCache cache;
      at::Tensor prefix = model.logits(tokens.narrow(1, 0, 3), &cache);
      std::vector<at::Tensor> pieces{prefix};
      for (int64_t t = 3; t < config.seq_len; ++t)
        pieces.push_back(model.logits(tokens.narrow(1, t, 1), &cache));
      EXPECT_EQ(testing::compare_tensors(at::cat(pieces, 1), full, 1e-10, 1e-12), "")
          << name_of(pos) << " batch " << B;
      EXPECT_EQ(cache.length, config.seq_len);
      EXPECT_THROW(model.logits(tokens.narrow(1, 0, 1), &cache), UserError);
    }
}

// The blockwise kernel is the default; eager attention (the T x T scores) is the reference.
// Sequences past one query tile (64 rows), grouped-query ratios 1, 2 and 4, both position
// encodings, training and decoding from a cache.
TEST(GptAttention, BlockwiseEqualsEager) {
  for (const int64_t kv_heads : {4, 2, 1}) {
    for (const PositionEncoding pos : {PositionEncoding::learned, PositionEncoding::rope}) {
      ModelConfig config = tiny_model();
      config.pos = pos;
      config.n_heads = 4;
      config.n_kv_heads = kv_heads;
      config.seq_len = kAttentionQueryTile + 6;
      const std::string what = str(name_of(pos), " kv heads ", kv_heads);
      ModelConfig eager_config = config;
      eager_config.attention = AttentionKernel::eager;
      ASSERT_EQ(config.attention, AttentionKernel::blockwise) << "the default";
      GPT blockwise(config, 4, at::kDouble), eager(eager_config, 4, at::kDouble);

      auto generator = at::make_generator<at::CPUGeneratorImpl>(5);
      at::Tensor tokens = at::randint(config.vocab_size, {2, config.seq_len}, generator, at::kLong);
      at::Tensor targets =
          at::randint(config.vocab_size, {2, config.seq_len}, generator, at::kLong);
      at::Tensor loss = blockwise.loss(tokens, targets), reference = eager.loss(tokens, targets);
      EXPECT_NEAR(loss.item<double>(), reference.item<double>(), 1e-12) << what;
      loss.backward();
      reference.backward();
      for (auto& parameter : blockwise.parameters()) {
        EXPECT_EQ(
            testing::compare_tensors(parameter.value.grad(),
                                     eager.parameter(parameter.name).value.grad(), 1e-10, 1e-12),
            "")
            << what << " " << parameter.name;
      }

      at::NoGradGuard no_grad;
      KVCache blockwise_cache, eager_cache;
      const int64_t T = config.seq_len;
      for (const auto& [first, length] :
           {std::pair<int64_t, int64_t>{0, T - 4}, {T - 4, 1}, {T - 3, 3}}) {
        at::Tensor piece = tokens.narrow(1, first, length);
        EXPECT_EQ(testing::compare_tensors(blockwise.logits(piece, &blockwise_cache),
                                           eager.logits(piece, &eager_cache), 1e-10, 1e-12),
                  "")
            << what << " decoding tokens " << first << "+" << length;
      }
    }
  }
}

}  // namespace
}  // namespace strata
