// `strata plan calibrate`'s measurements on 1 and 2 ranks: every rank gets the same report, the
// numbers are positive and finite, and the profile it makes reads back as a valid cluster file.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdlib>
#include <cstring>
#include <filesystem>

#include "strata/dist/comm.h"
#include "strata/plan/calibrate.h"
#include "strata/plan/cost_model.h"
#include "test_support.h"

namespace strata {
namespace {

TEST(Calibrate, MakesAValidLocalProfile) {
  Comm world = Comm::world();
  const CalibrationReport report = calibrate_local(world);
  const ClusterProfile& profile = report.profile;
  EXPECT_EQ(profile.nodes, 1);
  EXPECT_EQ(profile.devices_per_node, world.size());
  EXPECT_EQ(profile.device.precision, "fp32");
  for (double value : {report.matmul_tflops, report.memory_bandwidth_gbs, profile.device.memory_gb,
                       profile.network.intra_node_gbs, profile.network.latency_us}) {
    EXPECT_TRUE(std::isfinite(value) && value > 0) << value;
  }
  if (world.size() > 1) {
    EXPECT_GT(report.p2p_bandwidth_gbs, 0);
    EXPECT_GT(report.allreduce_bandwidth_gbs, 0);
  }
  // The slowest rank's numbers: the same report everywhere.
  at::Tensor rate = at::full({1}, report.matmul_tflops, at::kDouble);
  at::Tensor low = rate.clone(), high = rate.clone();
  world.all_reduce(low, ReduceOp::Min);
  world.all_reduce(high, ReduceOp::Max);
  EXPECT_EQ(low.item<double>(), high.item<double>());

  const ClusterProfile back = parse_cluster(cluster_to_toml(profile), "calibrated");
  EXPECT_EQ(back.device.peak_tflops, profile.device.peak_tflops);
  EXPECT_EQ(back.network.intra_node_gbs, profile.network.intra_node_gbs);
  EXPECT_FALSE(calibration_to_text(report).empty());
  // The planner takes it: a one-layer model on these ranks.
  TransformerSpec spec = megatron_gpt(1, 64, 4, 256, 32);
  PlanLayout layout;
  const Prediction prediction = predict_layout(plan_inputs(spec, back, world.size()), layout);
  EXPECT_GT(prediction.step_time_s, 0);
}

// The profile parallel.auto plans with: measured and saved when missing, read back after.
TEST(Calibrate, LocalProfileOnRanksMeasuresOnceThenReads) {
  Comm world = Comm::world();
  testing::TempDir local("strata-cache");
  const std::string cache = testing::rank0_path(world, local.path());  // one for every rank
  testing::ScopedEnv cache_dir("STRATA_CACHE_DIR", cache.c_str());
  ASSERT_EQ(local_profile_path(), cache + "/clusters/local.toml");

  std::string note;
  const ClusterProfile measured = local_profile_on_ranks(world, &note);
  EXPECT_NE(note.find("measured this machine"), std::string::npos) << note;
  EXPECT_TRUE(std::filesystem::is_regular_file(local_profile_path()));
  EXPECT_EQ(measured.devices_per_node, world.size());

  const ClusterProfile read = local_profile_on_ranks(world, &note);
  EXPECT_NE(note.find("planned with the local profile"), std::string::npos) << note;
  EXPECT_EQ(read.device.peak_tflops, measured.device.peak_tflops);
  EXPECT_EQ(read.network.intra_node_gbs, measured.network.intra_node_gbs);
  world.barrier();
}

}  // namespace
}  // namespace strata
