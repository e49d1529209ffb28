// GPT::forward_paged split over tp ranks (2 and 4): the keys and values cached by heads, or
// every kv head on every rank when tp does not divide them (1 or 2 kv heads over 4 ranks), and
// one step of decodes and prefill chunks equals the whole model's forward on one rank.
#include <gtest/gtest.h>

#include "paged_step.h"
#include "strata/dist/comm.h"
#include "test_configs.h"

namespace strata {
namespace {

TEST(GptPagedTensorParallel, AStepEqualsTheWholeModel) {
  Comm world = Comm::world();
  for (const int64_t kv_heads : {4, 2, 1}) {
    ModelConfig config = testing::gpt_config(64, 32, 2, 4, 48);
    config.pos = PositionEncoding::rope;
    config.n_kv_heads = kv_heads;
    config.init_std = 0.1;
    GPT whole(config, 3, at::kDouble);
    GPT split(config, 3, at::kDouble, TensorParallel{&world, false});
    EXPECT_EQ(testing::check_paged_step(split, whole, testing::mixed_paged_step(), 1e-10, 1e-12),
              "")
        << "tp " << world.size() << " kv heads " << kv_heads;
  }
}

}  // namespace
}  // namespace strata
