// The GPT: gradients against finite differences (double precision), layout-independent
// initialization, the parameter count in closed form, and KV-cache decoding equal to the full
// forward pass.
#include <gtest/gtest.h>

#include <ATen/CPUGeneratorImpl.h>
#include <ATen/core/grad_mode.h>

#include <cmath>

#include "model_families.h"
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

// Every parameter's gradient (up to 12 elements of each, spread over it) against central
// differences of the loss.
void expect_gradients_match_finite_differences(GPT& model, const at::Tensor& tokens,
                                               const at::Tensor& targets) {
  model.loss(tokens, targets).backward();
  const double h = 1e-6;
  for (auto& parameter : model.parameters()) {
    at::Tensor flat = parameter.value.detach().view(-1);  // shares storage with the parameter
    at::Tensor grad = parameter.value.grad().view(-1);
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

  expect_gradients_match_finite_differences(model, tokens, targets);
}

INSTANTIATE_TEST_SUITE_P(
    Variants, GptGradient,
    ::testing::Values(
        Variant{PositionEncoding::learned, Norm::layernorm, Activation::gelu, true, 4},
        Variant{PositionEncoding::rope, Norm::rmsnorm, Activation::swiglu, false, 2},
        Variant{PositionEncoding::rope, Norm::layernorm, Activation::gelu, false, 1},
        Variant{PositionEncoding::learned, Norm::rmsnorm, Activation::swiglu, true, 4}),
    variant_name);

// Blocks of other families (model/block_spec.h), their biases drawn nonzero: Qwen2's (q, k, v
// biases; with Llama 3's rope scaling) and GPT-2's (every projection).
BlockSpec qwen2_llama3_block() {
  BlockSpec block = testing::qwen2_like_block();
  block.rope_scaling = {RopeScalingType::llama3, 4.0, 1.0, 4.0, 16};
  return block;
}

TEST(GptBlockSpec, GradientsWithBiasesMatchFiniteDifferences) {
  for (const BlockSpec& block : {qwen2_llama3_block(), testing::gpt2_like_block()}) {
    ModelConfig config = tiny_model();
    config.n_heads = 4;
    config.n_kv_heads = 2;
    GPT model(config, block, /*seed=*/7, at::kDouble);
    testing::randomize_biases(model, 8);
    auto generator = at::make_generator<at::CPUGeneratorImpl>(3);
    at::Tensor tokens = at::randint(config.vocab_size, {2, config.seq_len}, generator, at::kLong);
    at::Tensor targets = at::randint(config.vocab_size, {2, config.seq_len}, generator, at::kLong);
    expect_gradients_match_finite_differences(model, tokens, targets);
  }
}

TEST(GptBlockSpec, EachBiasFlagAddsItsBias) {
  // One flag at a time: the model gains that bias (and only it), and a nonzero value of it
  // changes the logits. Rotary positions: without them a key bias adds the same q.b to every
  // score of a query and the softmax cancels it.
  const std::vector<std::pair<std::string, bool LinearBiases::*>> flags = {
      {"attn.q.bias", &LinearBiases::q},      {"attn.k.bias", &LinearBiases::k},
      {"attn.v.bias", &LinearBiases::v},      {"attn.out.bias", &LinearBiases::attention_out},
      {"mlp.fc.bias", &LinearBiases::mlp_in}, {"mlp.out.bias", &LinearBiases::mlp_out}};
  ModelConfig config = tiny_model();
  config.pos = PositionEncoding::rope;
  config.norm = Norm::rmsnorm;  // no norm biases: every bias is a projection's
  config.activation = Activation::swiglu;
  const at::Tensor tokens = at::arange(config.seq_len, at::kLong).remainder(5).view({1, -1});
  at::NoGradGuard no_grad;
  const at::Tensor plain = GPT(config, 5, at::kDouble).logits(tokens);
  for (const auto& [name, flag] : flags) {
    BlockSpec block = block_spec_of(config);
    block.biases.*flag = true;
    GPT model(config, block, 5, at::kDouble);
    int64_t biases = 0;
    for (const Parameter& parameter : model.parameters()) {
      if (parameter.name.find(".bias") == std::string::npos) continue;
      EXPECT_NE(parameter.name.find(name), std::string::npos) << parameter.name;
      EXPECT_FALSE(parameter.weight_decay) << parameter.name;
      ++biases;
    }
    EXPECT_EQ(biases, config.n_layers) << name;
    EXPECT_TRUE(at::equal(model.logits(tokens), plain)) << name << ": a zero bias changes nothing";
    testing::randomize_biases(model, 2);
    EXPECT_GT((model.logits(tokens) - plain).abs().max().item<double>(), 1e-3) << name;
  }
}

TEST(GptBlockSpec, DescribesTheConfigsModelAndReportsItsOwn) {
  ModelConfig config = tiny_model();
  config.pos = PositionEncoding::rope;
  config.rope_theta = 500.0;
  config.moe.num_experts = 2;
  const BlockSpec derived = block_spec_of(config);
  EXPECT_EQ(derived.position, PositionEncoding::rope);
  EXPECT_EQ(derived.rope_theta, 500.0);
  EXPECT_EQ(derived.norm, Norm::layernorm);
  EXPECT_EQ(derived.moe.num_experts, 2);
  EXPECT_FALSE(derived.biases.q || derived.biases.k || derived.biases.v ||
               derived.biases.attention_out || derived.biases.mlp_in || derived.biases.mlp_out);
  EXPECT_EQ(derived.rope_scaling.type, RopeScalingType::none);
  // An explicit block wins over the config's description, and config() says so.
  GPT model(config, testing::gpt2_like_block(), 1, at::kFloat);
  EXPECT_EQ(model.config().pos, PositionEncoding::learned);
  EXPECT_EQ(model.config().moe.num_experts, 0);
  EXPECT_TRUE(model.block().biases.mlp_out);
  EXPECT_NO_THROW(model.parameter("embedding.position.weight"));
}

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

// A shard for loading is left for the loader to fill, but its padding rows (in no global
// tensor, so no loader writes them) must be zero: the vocabulary's padded logits and the fused
// SwiGLU blocks read them. The memory is dirtied first so that a shard whose padding is not
// zeroed does not pass by the luck of fresh pages.
TEST(GptInit, ShardsForLoadingZeroTheirPaddingRows) {
  ShardSpec spec;
  spec.global_shape = {10, 3};
  spec.split_dim = 0;
  spec.split_axis = ShardAxis::Tp;
  spec.split_count = 2;
  spec.split_index = 1;
  spec.split_blocks = {5, 5};  // each rank holds 3 rows of each block; rank 1 has 2 real
  for (int round = 0; round < 4; ++round) {
    at::full({6, 3}, 7.0f).fill_(std::nanf(""));  // freed at once, for the shard to reuse
    const Parameter parameter =
        make_parameter("w", spec, InitKind::Loaded, 0.0, 1, at::kFloat, true);
    ASSERT_EQ(parameter.value.sizes(), (at::IntArrayRef{6, 3}));
    EXPECT_TRUE(parameter.value[2].eq(0).all().item<bool>()) << "block 0's padding row";
    EXPECT_TRUE(parameter.value[5].eq(0).all().item<bool>()) << "block 1's padding row";
  }
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
  // GPT-2's biases: q, k, v (3h), attention out (h), MLP in (F) and out (h) per layer.
  EXPECT_EQ(GPT(config, testing::gpt2_like_block(), 1, at::kFloat).num_parameters(),
            l * (4 * h * h + 2 * h * F + 4 * h + 5 * h + F) + 2 * V * h + s * h + 2 * h);
}

TEST(GptShape, FlopsPerTokenFormula) {
  // 6 * (matmul parameters) + 12 * l * h * s for a standard GPT (d_ff = 4h, multi-head).
  const ModelConfig config = testing::gpt_config(1000, 64, 2, 4, 32);
  const double h = 64, l = 2, V = 1000, s = 32;
  EXPECT_DOUBLE_EQ(training_flops_per_token(config.shape()),
                   6 * (12 * l * h * h + V * h) + 12 * l * h * s);
}

// "" when decoding `tokens` (B, T) from a KV cache (a prefix of 3, then one token at a time)
// gives the full forward's logits, and the cache then refuses a token past model.seq_len.
std::string cache_decoding_difference(GPT& model, const at::Tensor& tokens) {
  at::NoGradGuard no_grad;
  const at::Tensor full = model.logits(tokens);
  KVCache cache;
  std::vector<at::Tensor> pieces{model.logits(tokens.narrow(1, 0, 3), &cache)};
  for (int64_t t = 3; t < tokens.size(1); ++t) {
    pieces.push_back(model.logits(tokens.narrow(1, t, 1), &cache));
  }
  EXPECT_EQ(cache.length, tokens.size(1));
  EXPECT_THROW(model.logits(tokens.narrow(1, 0, 1), &cache), UserError);
  return testing::compare_tensors(at::cat(pieces, 1), full, 1e-10, 1e-12);
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
      at::Tensor tokens = (at::arange(B * config.seq_len, at::kLong) * 7)
                              .remainder(config.vocab_size)
                              .view({B, -1});
      EXPECT_EQ(cache_decoding_difference(model, tokens), "") << name_of(pos) << " batch " << B;
    }
}

TEST(GptDecode, KvCacheWithBiasesAndRopeScalingMatchesFullForward) {
  for (const BlockSpec& block : {qwen2_llama3_block(), testing::gpt2_like_block()}) {
    ModelConfig config = tiny_model();
    config.n_heads = 4;
    config.n_kv_heads = 2;
    GPT model(config, block, 9, at::kDouble);
    testing::randomize_biases(model, 10);
    at::Tensor tokens =
        (at::arange(2 * config.seq_len, at::kLong) * 7).remainder(config.vocab_size).view({2, -1});
    EXPECT_EQ(cache_decoding_difference(model, tokens), "") << name_of(block.position);
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
