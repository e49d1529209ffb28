// GPT::forward_paged split over tp ranks (2 and 4): the keys and values cached by heads, or
// every kv head on every rank when tp does not divide them (1 or 2 kv heads over 4 ranks), and
// one step of decodes and prefill chunks equals the whole model's forward on one rank; and
// generation's cache decoding, split the same way, equals the whole model's full forward; both
// also for blocks with biases (Qwen2's q, k, v with Llama 3's rope scaling; GPT-2's on every
// projection).
#include <gtest/gtest.h>

#include <string>

#include "model_families.h"
#include "paged_step.h"
#include "strata/dist/comm.h"
#include "test_configs.h"
#include "test_support.h"

namespace strata {
namespace {

// check(split, whole, what) for the test model with 4, 2 and 1 kv heads, and for the two
// blocks with biases: whole on this rank, and split over the world as tp.
template <typename Check>
void for_each_kv_split(Comm& world, Check&& check) {
  for (const int64_t kv_heads : {4, 2, 1}) {
    ModelConfig config = testing::gpt_config(64, 32, 2, 4, 48);
    config.pos = PositionEncoding::rope;
    config.n_kv_heads = kv_heads;
    config.init_std = 0.1;
    GPT whole(config, 3, at::kDouble);
    GPT split(config, 3, at::kDouble, TensorParallel{&world, false});
    check(split, whole,
          "tp " + std::to_string(world.size()) + " kv heads " + std::to_string(kv_heads));
  }
  BlockSpec qwen2 = testing::qwen2_like_block();
  qwen2.rope_scaling = {RopeScalingType::llama3, 8.0, 1.0, 4.0, 32};
  for (const BlockSpec& block : {qwen2, testing::gpt2_like_block()}) {
    ModelConfig config = testing::gpt_config(64, 32, 2, 4, 48);
    config.n_kv_heads = 2;  // replicated over 4 ranks
    config.init_std = 0.1;
    GPT whole(config, block, 3, at::kDouble);
    GPT split(config, block, 3, at::kDouble, TensorParallel{&world, false});
    testing::randomize_biases(whole, 4, 0.1);
    testing::randomize_biases(split, 4, 0.1);
    check(split, whole,
          "tp " + std::to_string(world.size()) + " biases, " + name_of(block.position) +
              " positions");
  }
}

TEST(GptPagedTensorParallel, AStepEqualsTheWholeModel) {
  Comm world = Comm::world();
  for_each_kv_split(world, [](GPT& split, GPT& whole, const std::string& what) {
    EXPECT_EQ(testing::check_paged_step(split, whole, testing::mixed_paged_step(), 1e-10, 1e-12),
              "")
        << what;
  });
}

TEST(GptCacheTensorParallel, DecodingEqualsTheWholeForward) {
  Comm world = Comm::world();
  for_each_kv_split(world, [](GPT& split, GPT& whole, const std::string& what) {
    at::NoGradGuard no_grad;
    const int64_t T = whole.config().seq_len, V = whole.config().vocab_size;
    const at::Tensor tokens = (at::arange(2 * T, at::kLong) * 5).remainder(V).view({2, -1});
    KVCache cache;
    std::vector<at::Tensor> pieces{split.logits(tokens.narrow(1, 0, 5), &cache)};
    for (int64_t t = 5; t < T; ++t) pieces.push_back(split.logits(tokens.narrow(1, t, 1), &cache));
    EXPECT_EQ(testing::compare_tensors(at::cat(pieces, 1), whole.logits(tokens), 1e-10, 1e-12), "")
        << what;
  });
}

}  // namespace
}  // namespace strata
