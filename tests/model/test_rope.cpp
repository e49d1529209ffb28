// Rotary positions with Llama 3's rope scaling: the inverse frequencies against Hugging Face
// transformers' formula, the rotation by them, and a GPT that uses them.
#include <gtest/gtest.h>

#include <ATen/core/grad_mode.h>

#include <cmath>

#include "strata/core/error.h"
#include "strata/model/gpt.h"
#include "strata/model/rope.h"
#include "test_configs.h"
#include "test_support.h"

namespace strata {
namespace {

RopeScaling llama3(double factor, double low, double high, int64_t original) {
  return {RopeScalingType::llama3, factor, low, high, original};
}

// The reference values were computed once with python3-torch 1.13 by transformers'
// _compute_llama3_parameters, run in float64:
//   inv_freq = 1 / base ** (torch.arange(0, dim, 2).double() / dim)
//   wavelen = 2 * math.pi / inv_freq
//   inv_freq_llama = torch.where(wavelen > old / low, inv_freq / factor, inv_freq)
//   smooth = (old / wavelen - low) / (high - low)
//   smoothed = (1 - smooth) * inv_freq_llama / factor + smooth * inv_freq_llama
//   medium = ~(wavelen < old / high) * ~(wavelen > old / low)
//   inv_freq_llama = torch.where(medium, smoothed, inv_freq_llama)
TEST(RopeScaling, Llama3InverseFrequenciesEqualTransformers) {
  // dim 16, base 500000, factor 8, low 1, high 4, old 64: frequency 0 kept (wavelength 6.3 <
  // 16), 1 interpolated (32.4), the rest divided by 8 (> 64).
  const std::vector<double> small = {1.0,
                                     0.0794030091792082,
                                     0.004700753866357992,
                                     0.0009115830921521386,
                                     0.00017677669529663688,
                                     3.428102195952591e-05,
                                     6.647869871181236e-06,
                                     1.2891731721515574e-06};
  const at::Tensor got = rope_inverse_frequencies(16, 500000.0, llama3(8, 1, 4, 64));
  ASSERT_EQ(got.size(0), 8);
  for (int64_t i = 0; i < 8; ++i) {
    EXPECT_NEAR(got[i].item<double>(), small[i], 1e-14 * small[i]) << "frequency " << i;
  }
  // Llama 3.1 8B's head (dim 128, base 500000, factor 8, low 1, high 4, old 8192): kept up to
  // 28, interpolated 29..34, divided from 35 on.
  const std::vector<std::pair<int64_t, double>> llama31 = {{0, 1.0},
                                                           {28, 0.0032114459947525913},
                                                           {29, 0.002166570763503359},
                                                           {31, 0.0008567514129196321},
                                                           {34, 0.00017850781276799638},
                                                           {35, 9.556212353964683e-05},
                                                           {63, 3.068925988914511e-07}};
  const at::Tensor frequencies = rope_inverse_frequencies(128, 500000.0, llama3(8, 1, 4, 8192));
  for (const auto& [i, want] : llama31) {
    EXPECT_NEAR(frequencies[i].item<double>(), want, 1e-14 * want) << "frequency " << i;
  }
  // Without scaling: base^(-2i/dim).
  const at::Tensor plain = rope_inverse_frequencies(128, 500000.0, {});
  EXPECT_NEAR(plain[35].item<double>(), 0.0007644969883171747, 1e-14);
}

TEST(RopeScaling, RotatesByTheScaledFrequencies) {
  const RopeScaling scaling = llama3(8, 1, 4, 64);
  const RotaryEmbedding rope(16, 40, 500000.0, scaling, at::kDouble);
  const at::Tensor frequencies = rope_inverse_frequencies(16, 500000.0, scaling);
  const at::Tensor x = at::arange(16, at::kDouble).add(1).view({1, 1, 1, 16});
  const int64_t position = 37;
  const at::Tensor y = rope.rotate(x, at::full({1}, position, at::kLong));
  for (int64_t i = 0; i < 8; ++i) {
    const double angle = position * frequencies[i].item<double>();
    const double x1 = i + 1, x2 = i + 9;
    EXPECT_NEAR(y[0][0][0][i].item<double>(), x1 * std::cos(angle) - x2 * std::sin(angle), 1e-12);
    EXPECT_NEAR(y[0][0][0][i + 8].item<double>(), x1 * std::sin(angle) + x2 * std::cos(angle),
                1e-12);
  }
}

TEST(RopeScaling, TheGptRunsTheScaledFrequencies) {
  ModelConfig config = testing::gpt_config(32, 32, 2, 2, 24);
  config.pos = PositionEncoding::rope;
  config.init_std = 0.3;
  const at::Tensor tokens = at::arange(24, at::kLong).remainder(7).view({1, -1});
  at::NoGradGuard no_grad;
  const at::Tensor plain = GPT(config, 3, at::kDouble).logits(tokens);
  // Factor 1 changes no frequency; factor 8 changes the low ones (head_dim 16, theta 10000:
  // wavelengths 6.3 to 2.2e4, old 64).
  BlockSpec block = block_spec_of(config);
  block.rope_scaling = llama3(1, 1, 4, 64);
  EXPECT_EQ(testing::compare_tensors(GPT(config, block, 3, at::kDouble).logits(tokens), plain,
                                     1e-12, 1e-14),
            "");
  block.rope_scaling = llama3(8, 1, 4, 64);
  EXPECT_GT((GPT(config, block, 3, at::kDouble).logits(tokens) - plain).abs().max().item<double>(),
            1e-4);
}

TEST(BlockSpecCheck, ABlockThatCannotRunIsRefused) {
  const ModelConfig config = testing::gpt_config(32, 32, 2, 2, 24);  // learned positions
  BlockSpec block = block_spec_of(config);
  block.rope_scaling = llama3(8, 1, 4, 64);
  EXPECT_THROW(GPT(config, block, 1, at::kFloat), UserError);
  block.position = PositionEncoding::rope;
  EXPECT_NO_THROW(GPT(config, block, 1, at::kFloat));
  block.rope_scaling = llama3(8, 4, 4, 64);  // low == high: no interpolation range
  EXPECT_THROW(GPT(config, block, 1, at::kFloat), UserError);
  block.rope_scaling = llama3(0, 1, 4, 64);
  EXPECT_THROW(GPT(config, block, 1, at::kFloat), UserError);
  block.rope_scaling = llama3(8, 1, 4, 0);
  EXPECT_THROW(GPT(config, block, 1, at::kFloat), UserError);
  block.rope_scaling = {};
  block.biases.mlp_out = true;
  block.moe.num_experts = 2;
  EXPECT_THROW(GPT(config, block, 1, at::kFloat), UserError);
}

}  // namespace
}  // namespace strata
