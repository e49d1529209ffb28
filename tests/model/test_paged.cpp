// GPT::forward_paged, the serving forward: one step of decoding sequences and prefill chunks
// over a paged KV cache equals the whole-sequence forward for every row; both attention
// kernels, both position encodings, grouped-query ratios 1, 2 and 4; and blocks with biases
// (Qwen2's, with Llama 3's rope scaling, and GPT-2's); and a bf16 step, as bf16 serving runs.
#include <gtest/gtest.h>

#include "model_families.h"
#include "paged_step.h"
#include "test_configs.h"

namespace strata {
namespace {

TEST(GptPaged, AStepOfDecodesAndPrefillChunksEqualsTheWholeSequences) {
  for (const AttentionKernel kernel : {AttentionKernel::blockwise, AttentionKernel::eager}) {
    for (const PositionEncoding pos : {PositionEncoding::learned, PositionEncoding::rope}) {
      for (const int64_t kv_heads : {4, 2, 1}) {
        ModelConfig config = testing::gpt_config(64, 32, 2, 4, 48);
        config.attention = kernel;
        config.pos = pos;
        config.n_kv_heads = kv_heads;
        config.init_std = 0.1;
        GPT model(config, 3, at::kDouble);
        EXPECT_EQ(
            testing::check_paged_step(model, model, testing::mixed_paged_step(), 1e-10, 1e-12), "")
            << name_of(kernel) << " " << name_of(pos) << " kv heads " << kv_heads;
      }
    }
  }
}

// In bf16, as `strata serve --set train.precision=bf16` runs: the KV cache holds bf16 keys and
// values, which decode attention reads as stored (widened in the registers, summed in
// float32), and the step's logits equal the whole-sequence bf16 forward within bf16's rounding
// (logits of about 0.5; here they came out equal to the bit, the float32 sums of the two
// attention paths rounding to the same bf16).
TEST(GptPaged, ABf16StepEqualsTheWholeSequencesInBf16) {
  for (const int64_t kv_heads : {4, 2}) {
    ModelConfig config = testing::gpt_config(64, 32, 2, 4, 48);
    config.pos = PositionEncoding::rope;
    config.n_kv_heads = kv_heads;
    config.init_std = 0.1;
    GPT model(config, 3, at::kBFloat16);
    EXPECT_EQ(testing::check_paged_step(model, model, testing::mixed_paged_step(), 1e-2, 1e-2), "")
        << "kv heads " << kv_heads;
  }
}

TEST(GptPaged, BlocksWithBiasesEqualTheWholeSequences) {
  BlockSpec qwen2 = testing::qwen2_like_block();
  qwen2.rope_scaling = {RopeScalingType::llama3, 8.0, 1.0, 4.0, 32};
  for (const BlockSpec& block : {qwen2, testing::gpt2_like_block()}) {
    ModelConfig config = testing::gpt_config(64, 32, 2, 4, 48);
    config.n_kv_heads = 2;
    config.init_std = 0.1;
    GPT model(config, block, 3, at::kDouble);
    testing::randomize_biases(model, 4, 0.1);
    EXPECT_EQ(testing::check_paged_step(model, model, testing::mixed_paged_step(), 1e-10, 1e-12),
              "")
        << name_of(block.position);
  }
}

}  // namespace
}  // namespace strata
