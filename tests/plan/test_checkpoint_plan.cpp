// `strata plan --mtbf-hours`: Young's checkpoint interval sqrt(2 delta MTBF) with delta the
// stall of a synchronous write (the node's state over its storage bandwidth) or of an
// asynchronous snapshot (over PCIe), the expected throughput lost, and the command's output.
#include <gtest/gtest.h>

#include <cmath>
#include <fstream>
#include <nlohmann/json.hpp>

#include "command_runner.h"
#include "strata/cli/plan.h"
#include "strata/core/error.h"
#include "strata/plan/checkpoint_plan.h"
#include "test_support.h"

namespace strata {
namespace {

TEST(CheckpointPlan, YoungsIntervalAndTheLossAreTheClosedForms) {
  ClusterProfile cluster = load_cluster("a100-80gb");
  cluster.nodes = 128;
  Prediction prediction;
  prediction.step_time_s = 10;
  prediction.memory.params = 4e9;
  prediction.memory.optimizer = 6e9;
  CheckpointCosts costs;
  costs.mtbf_hours_per_node = 12800;  // 100 h for 128 nodes
  costs.write_gbs_per_node = 2;
  costs.restart_s = 60;
  const CheckpointPlan plan = plan_checkpoints(prediction, cluster, costs);
  EXPECT_DOUBLE_EQ(plan.bytes_per_device, 10e9);
  EXPECT_DOUBLE_EQ(plan.job_mtbf_s, 100 * 3600.0);
  // A node writes 8 x 10 GB at 2 GB/s: 40 s of stall; Young: sqrt(2 x 40 x 360000) = 5367 s.
  EXPECT_DOUBLE_EQ(plan.sync.stall_s, 40);
  EXPECT_EQ(plan.sync.interval_steps, std::llround(std::sqrt(2 * 40 * 360000.0) / 10));
  const double tau = static_cast<double>(plan.sync.interval_steps) * 10;
  EXPECT_NEAR(plan.sync.lost_fraction, 40 / (tau + 40) + (tau / 2 + 60) / 360000, 1e-12);
  // Asynchronous: the snapshot of 10 GB over PCIe (25 GB/s) stalls 0.4 s, so checkpoints are
  // 10x more frequent and the loss much smaller, and the write still ends before the next one.
  EXPECT_DOUBLE_EQ(plan.async.stall_s, 0.4);
  EXPECT_GE(plan.async.interval_s, plan.async.write_s);
  EXPECT_LT(plan.async.interval_s, plan.sync.interval_s / 5);
  EXPECT_LT(plan.async.lost_fraction, plan.sync.lost_fraction / 3);
  costs.mtbf_hours_per_node = 0;
  EXPECT_THROW(plan_checkpoints(prediction, cluster, costs), UserError);
}

TEST(CheckpointPlan, TheCommandAddsTheCheckpointsToAPrediction) {
  testing::TempDir dir;
  const std::string model = dir.file("model.toml");
  std::ofstream(model) << "[model]\nvocab_size = 51200\nd_model = 4096\nn_layers = 32\n"
                          "n_heads = 32\nseq_len = 2048\n";
  auto run = [](const std::vector<std::string>& args) {
    return testing::run_subcommand("plan", add_plan_command, args);
  };
  const testing::CommandResult text =
      run({"--model", model, "--cluster", "a100-80gb", "--nodes", "16", "--global-batch", "512",
           "--layout", "tp=8", "--mtbf-hours", "2000"});
  ASSERT_EQ(text.exit_code, 0) << text.err;
  for (const char* fragment :
       {"checkpoints (MTBF 2000 h per node: a failure every 125.00 h", "sync:   stalls",
        "Young's interval", "async:  stalls", "checkpoint.async = true"}) {
    EXPECT_NE(text.out.find(fragment), std::string::npos) << fragment << " in:\n" << text.out;
  }
  const testing::CommandResult json =
      run({"--model", model, "--cluster", "a100-80gb", "--nodes", "16", "--global-batch", "512",
           "--layout", "tp=8", "--mtbf-hours", "2000", "--json"});
  ASSERT_EQ(json.exit_code, 0) << json.err;
  const nlohmann::json parsed = nlohmann::json::parse(json.out);
  EXPECT_GT(parsed["checkpoints"]["sync"]["interval_steps"].get<int64_t>(), 1);
  EXPECT_LT(parsed["checkpoints"]["async"]["lost_fraction"].get<double>(),
            parsed["checkpoints"]["sync"]["lost_fraction"].get<double>());
  testing::expect_usage_error(run({"--model", model, "--cluster", "a100-80gb", "--global-batch",
                                   "64", "--layout", "tp=8", "--mtbf-hours", "soon"}),
                              {"--mtbf-hours 'soon' must be a number"});
  // Checked with the other flags, before any planning, for a search as for a layout.
  testing::expect_usage_error(run({"--model", model, "--cluster", "a100-80gb", "--nodes", "16",
                                   "--global-batch", "512", "--mtbf-hours", "0"}),
                              {"--mtbf-hours must be > 0"});
}

}  // namespace
}  // namespace strata
