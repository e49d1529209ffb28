// End-to-end training on the real MPI transport: the loss falls on the real English corpus,
// data parallelism with gradient accumulation equals one rank taking the whole batch at once,
// and a resumed run is bit-identical to an uninterrupted one.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <set>
#include <string>

#include "strata/ckpt/checkpoint.h"
#include "test_configs.h"
#include "test_support.h"
#include "train_support.h"

namespace strata {
namespace {

using testing::train_on;  // dp = -1: data parallel over every rank of the communicator

// Global batch 12: divisible by dp = 1, 2, 3.
Config tiny_run(DataSource source, int64_t steps) {
  Config config = testing::tiny_training_run(steps, 12, 2);
  config.data.source = source;
  return config;
}

TEST(Trainer, LossFallsOnEnglishCorpus) {
  Comm world = Comm::world(120);
  Config config = tiny_run(DataSource::corpus, 40);
  config.train.eval_every = 40;
  TrainResult result = train_on(world, config);
  ASSERT_EQ(result.losses.size(), 40u);
  EXPECT_NEAR(result.losses.front(), std::log(256.0), 0.3);  // uniform guess at the start
  ASSERT_EQ(result.eval_losses.size(), 1u);
  // Byte-level English has ~2.9 nats/byte of unigram entropy; 40 steps get well below ln 256.
  EXPECT_LT(result.eval_losses.back(), result.losses.front() - 1.5)
      << "first loss " << result.losses.front() << ", final eval loss "
      << result.eval_losses.back();
}

TEST(Trainer, DataParallelEqualsSingleRank) {
  Comm world = Comm::world(120);
  Config config = tiny_run(DataSource::synthetic, 20);
  Comm self = world.split(world.rank(), 0, "self");
  // The reference takes the global batch as one microbatch, so that it differs from the
  // parallel run on every world size: on one rank that run accumulates six microbatches.
  Config whole_batch = config;
  whole_batch.parallel.micro_batch = whole_batch.train.global_batch;
  TrainResult reference = train_on(self, whole_batch);
  TrainResult parallel = train_on(world, config);
  ASSERT_EQ(parallel.losses.size(), reference.losses.size());
  for (size_t i = 0; i < reference.losses.size(); ++i) {
    EXPECT_NEAR(parallel.losses[i], reference.losses[i], 1e-4 * std::abs(reference.losses[i]))
        << "step " << i + 1 << " on " << world.size() << " ranks";
  }
}

TEST(Trainer, ResumeIsBitIdentical) {
  Comm world = Comm::world(120);
  testing::TempDir local("strata-resume");
  const std::string dir = testing::rank0_path(world, local.path());
  Config config = tiny_run(DataSource::synthetic, 8);
  TrainResult uninterrupted = train_on(world, config);

  config.checkpoint.dir = dir + "/ckpt";
  config.checkpoint.every = 3;
  config.checkpoint.keep = 0;
  train_on(world, config);  // checkpoints after steps 3, 6 and 8
  world.barrier();
  // "Crash" after step 6: the newest checkpoints are lost, the one of step 3 remains.
  if (world.rank() == 0) {
    std::filesystem::remove_all(config.checkpoint.dir + "/step_00000008");
    std::filesystem::remove_all(config.checkpoint.dir + "/step_00000006");
  }
  world.barrier();
  TrainResult resumed = train_on(world, config);
  ASSERT_EQ(resumed.first_step, 3);
  ASSERT_EQ(resumed.losses.size(), 5u);
  for (size_t i = 0; i < resumed.losses.size(); ++i) {
    EXPECT_EQ(resumed.losses[i], uninterrupted.losses[3 + i]) << "step " << 4 + i;
  }
}

// A mesh that is not the config's layout is refused before any work, saying both shapes.
// log.profile_step: every rank writes the step's operators as a Chrome trace and a table, strata's
// own kernels named among ATen's operators, and only for that step.
TEST(Trainer, ProfilesTheStepItIsAskedTo) {
  Comm world = Comm::world(120);
  Config config = tiny_run(DataSource::synthetic, 3);
  config.log.dir = testing::log_dir() + "/profile";  // each rank's process has its own log_dir()
  config.log.profile_step = 2;
  train_on(world, config);
  const std::string base = config.log.dir + "/profile_step_2_rank_" + std::to_string(world.rank());
  std::ifstream trace_file(base + ".json");
  ASSERT_TRUE(trace_file.good()) << base << ".json";
  const nlohmann::json trace = nlohmann::json::parse(trace_file);
  std::set<std::string> names;
  for (const auto& event : trace.at("traceEvents")) {
    EXPECT_EQ(event.at("ph"), "X");
    EXPECT_GE(event.at("dur").get<double>(), 0.0);
    names.insert(event.at("name").get<std::string>());
  }
  for (const char* name : {"strata::product", "strata::attention_forward",
                           "strata::attention_backward", "strata::adamw_update", "aten::add_"}) {
    EXPECT_EQ(names.count(name), 1u) << name;
  }
  std::ifstream table_file(base + ".txt");
  const std::string table((std::istreambuf_iterator<char>(table_file)),
                          std::istreambuf_iterator<char>());
  EXPECT_EQ(table.rfind("step 2, rank " + std::to_string(world.rank()) + ": ", 0), 0u) << table;
  EXPECT_NE(table.find("strata::adamw_update"), std::string::npos) << table;
  EXPECT_NE(table.find("by operator and input shapes"), std::string::npos) << table;
  for (const char* other : {"/profile_step_1_rank_", "/profile_step_3_rank_"}) {
    EXPECT_FALSE(
        std::filesystem::exists(config.log.dir + other + std::to_string(world.rank()) + ".txt"));
  }
}

TEST(Trainer, RefusesAMeshThatIsNotTheConfigsLayout) {
  Comm world = Comm::world(120);
  Comm self = world.split(world.rank(), 0, "self");
  Config config = tiny_run(DataSource::synthetic, 8);
  config.parallel.dp = 2;
  config = validate_config(config, 2);  // a layout for two ranks
  Mesh mesh(self, MeshShape{});         // one rank
  try {
    Trainer trainer(config, mesh);
    FAIL() << "no error";
  } catch (const InternalError& error) {
    const std::string message = error.what();
    EXPECT_NE(message.find("the mesh PP(1)-DP(1)-CP(1)-TP(1) is not the config's layout "
                           "PP(1)-DP(2)-CP(1)-TP(1)"),
              std::string::npos)
        << message;
  }
}

}  // namespace
}  // namespace strata
