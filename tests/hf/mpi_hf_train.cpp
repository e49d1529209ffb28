// Fine-tuning from a Hugging Face model ([model] init = DIR): the trainer starts from its
// weights, and dp 2 x pp 2 has the losses of one rank.
#include <gtest/gtest.h>

#include "hf_test_models.h"
#include "strata/dist/comm.h"
#include "strata/hf/hf_load.h"
#include "test_configs.h"
#include "train_support.h"

namespace strata {
namespace {

TEST(HfTrain, FineTuningOnDataAndPipelineParallelMatchesOneRank) {
  Comm world = Comm::world(300);
  ASSERT_EQ(world.size(), 4);
  const std::vector<std::pair<std::string, std::string>> models = {{"llama", "--variant gqa"},
                                                                   {"gpt2", ""}};
  for (const auto& model : models) {
    const std::string& arch = model.first;
    testing::TempDir local("strata-hf-train");
    if (world.rank() == 0) testing::make_hf_model(arch, local.path(), model.second);
    const std::string dir = testing::rank0_path(world, local.path());
    world.barrier();
    Config config = testing::tiny_training_run(3, 4, 1);
    config.data.source = DataSource::synthetic;
    config.model_init = dir;
    config = with_hf_model(config);

    // One rank, checking first that the weights are the model's (the token embedding as
    // stored), not a random initialization.
    Comm self = world.split(world.rank(), 0, "self");
    const TrainResult reference = testing::train_on(self, config, nullptr, [&](Trainer& trainer) {
      HfTensorFiles files(dir);
      const HfTensorMap map = hf_tensor_map_of(files, read_hf_config(dir));
      for (const HfPiece& piece : map.pieces) {
        if (piece.parameter != "embedding.token.weight") continue;
        const at::Tensor loaded =
            trainer.chunks().front()->parameter("embedding.token.weight").value;
        EXPECT_TRUE(at::equal(loaded, files.view(piece.hf_name))) << arch;
      }
    });

    Config parallel = config;
    parallel.parallel.pp = 2;
    parallel.parallel.dp = 2;
    const TrainResult result = testing::train_on(world, parallel);
    ASSERT_EQ(result.losses.size(), reference.losses.size());
    for (size_t i = 0; i < reference.losses.size(); ++i) {
      EXPECT_NEAR(result.losses[i], reference.losses[i], 1e-4 * reference.losses[i])
          << arch << " step " << i + 1;
    }
  }
}

}  // namespace
}  // namespace strata
