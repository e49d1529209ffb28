// Cluster profiles: the presets equal the shipped configs/clusters files, a profile survives
// to_toml and back, `local` is found where calibrate writes it, and every kind of bad file gets
// a message naming the key and the file.
#include <gtest/gtest.h>

#include <cstdlib>
#include <fstream>
#include <sstream>

#include "expect_error.h"
#include "strata/core/error.h"
#include "strata/plan/cluster.h"
#include "test_support.h"

namespace strata {
namespace {

std::string read_text(const std::string& path) {
  std::ifstream file(path);
  std::stringstream text;
  text << file.rdbuf();
  return text.str();
}

std::string error_of(const std::string& text) {
  return testing::user_error([&] { parse_cluster(text, "bad.toml"); });
}

const char* kComplete = R"([cluster]
nodes = 2
devices_per_node = 4
[device]
name = "X"
peak_tflops = 100.0
memory_gb = 40.0
memory_bandwidth_gbs = 1000.0
[network]
intra_node_gbs = 200.0
inter_node_gbs = 20.0
latency_us = 4.0
)";

TEST(Cluster, PresetsAreTheShippedFiles) {
  ASSERT_EQ(cluster_preset_names(), (std::vector<std::string>{"a100-80gb", "h100-80gb", "h200"}));
  for (const std::string& name : cluster_preset_names()) {
    const std::string path = std::string(STRATA_SOURCE_DIR) + "/configs/clusters/" + name + ".toml";
    EXPECT_EQ(read_text(path), cluster_preset_toml(name)) << path;
    const ClusterProfile preset = load_cluster(name);
    EXPECT_EQ(preset.name, name);
    EXPECT_EQ(preset.devices_per_node, 8);
    EXPECT_EQ(preset.device.precision, "bf16");
    const ClusterProfile from_file = load_cluster(path);
    EXPECT_EQ(from_file.device.peak_tflops, preset.device.peak_tflops);
  }
  const ClusterProfile a100 = load_cluster("a100-80gb");
  EXPECT_EQ(a100.device.peak_tflops, 312.0);
  EXPECT_EQ(a100.memory_bytes(), 80e9);
  EXPECT_EQ(load_cluster("h200").device.memory_gb, 141.0);
}

TEST(Cluster, OptionalKeysHaveDefaultsAndTomlRoundTrips) {
  ClusterProfile cluster = parse_cluster(kComplete, "complete.toml");
  EXPECT_EQ(cluster.devices(), 8);
  EXPECT_EQ(cluster.device.matmul_efficiency, 1.0);
  EXPECT_EQ(cluster.device.precision, "bf16");
  EXPECT_EQ(cluster.network.intra_latency_us(), 4.0);
  EXPECT_EQ(cluster.device.elementwise_rate_gbs(), 1000.0);      // memory_bandwidth_gbs
  EXPECT_EQ(cluster.device.attention_matmul_efficiency(), 1.0);  // matmul_efficiency
  cluster.device.attention_efficiency = 0.3;
  EXPECT_EQ(cluster.device.blockwise_attention_rate(), 0.3);  // attention_efficiency
  cluster.device.name = "quote \" and backslash \\";
  cluster.device.elementwise_gbs = 12.5;
  cluster.device.attention_efficiency = 0.4;
  cluster.device.blockwise_attention_efficiency = 0.55;
  cluster.device.peak_tflops = 0.0123456789;
  cluster.network.intra_node_latency_us = 0.5;
  const ClusterProfile back = parse_cluster(cluster_to_toml(cluster), "round-trip");
  EXPECT_EQ(back.device.name, cluster.device.name);
  EXPECT_EQ(back.device.peak_tflops, cluster.device.peak_tflops);
  EXPECT_EQ(back.network.intra_latency_us(), 0.5);
  EXPECT_EQ(back.device.elementwise_rate_gbs(), 12.5);
  EXPECT_EQ(back.device.attention_matmul_efficiency(), 0.4);
  EXPECT_EQ(back.device.blockwise_attention_rate(), 0.55);
  EXPECT_EQ(back.nodes, 2);
}

TEST(Cluster, ADeviceNameFindsThePresetOfItsChip) {
  EXPECT_EQ(calibrated_preset_for("H100-80GB"), "h100-80gb");
  EXPECT_EQ(calibrated_preset_for("nvidia h100 sxm"), "h100-80gb");
  EXPECT_EQ(calibrated_preset_for("NVIDIA A100-SXM4-40GB"), "a100-80gb");
  EXPECT_EQ(calibrated_preset_for("h200"), "h200");
  EXPECT_EQ(calibrated_preset_for("MI300X"), "");
  EXPECT_EQ(calibrated_preset_for(""), "");
}

// A file that leaves out device efficiency keys: a calibrated chip takes those its preset has
// (keeping the ones the file sets) and says which; another chip keeps the ideal defaults and
// is warned that the prediction is an upper bound; a complete profile says nothing.
TEST(Cluster, MissingEfficiencyKeysComeFromThePresetOrWarn) {
  std::string text = kComplete;
  text.replace(text.find("name = \"X\""), 10, "name = \"H100-80GB\"\nmatmul_efficiency = 0.5");
  const ClusterProfile h100 = parse_cluster(text, "h100.toml");
  const DeviceProfile preset = load_cluster("h100-80gb").device;
  EXPECT_EQ(h100.device.matmul_efficiency, 0.5);
  EXPECT_EQ(h100.device.blockwise_attention_efficiency, preset.blockwise_attention_efficiency);
  EXPECT_EQ(h100.device.matmul_half_dim, preset.matmul_half_dim);
  EXPECT_EQ(h100.device.kernel_overhead_us, preset.kernel_overhead_us);
  EXPECT_EQ(h100.efficiency_note,
            str("note: h100.toml leaves out device efficiency keys; took "
                "blockwise_attention_efficiency = ",
                preset.blockwise_attention_efficiency, ", matmul_half_dim = ",
                preset.matmul_half_dim, ", kernel_overhead_us = ", preset.kernel_overhead_us,
                " from the calibrated preset h100-80gb (device.name \"H100-80GB\")"));

  const ClusterProfile other = parse_cluster(kComplete, "x.toml");
  EXPECT_EQ(other.device.matmul_efficiency, 1.0);
  EXPECT_EQ(other.device.blockwise_attention_rate(), 1.0);
  EXPECT_EQ(other.device.matmul_half_dim, 0.0);
  EXPECT_EQ(other.device.kernel_overhead_us, 0.0);
  EXPECT_CONTAINS(other.efficiency_note,
                  "warning: x.toml sets no matmul_efficiency, blockwise_attention_efficiency, "
                  "matmul_half_dim, kernel_overhead_us and device.name \"X\" names no "
                  "calibrated chip (a100, h100, h200)");
  EXPECT_CONTAINS(other.efficiency_note, "upper bound");

  for (const std::string& name : cluster_preset_names()) {
    EXPECT_EQ(load_cluster(name).efficiency_note, "") << name;
  }
  EXPECT_EQ(parse_cluster(cluster_to_toml(other), "written").efficiency_note, "");
}

TEST(Cluster, LocalProfileIsFoundWhereCalibrateWritesIt) {
  testing::TempDir dir;
  testing::ScopedEnv cache("STRATA_CACHE_DIR", dir.path().c_str());
  EXPECT_EQ(local_profile_path(), dir.path() + "/clusters/local.toml");
  EXPECT_CONTAINS(testing::user_error([] { load_cluster("local"); }), "strata plan calibrate");
  ASSERT_EQ(std::system(("mkdir -p " + dir.path() + "/clusters").c_str()), 0);
  std::ofstream(local_profile_path()) << kComplete;
  const ClusterProfile local = load_cluster("local");
  EXPECT_EQ(local.name, "local");
  EXPECT_EQ(local.devices(), 8);
}

TEST(Cluster, BadFilesSayWhatToChange) {
  // Missing keys: every one named.
  const std::string missing = error_of("[cluster]\nnodes = 1\n[device]\nname = \"X\"\n[network]\n");
  for (const char* key : {"cluster.devices_per_node is missing", "device.peak_tflops is missing",
                          "device.memory_gb is missing", "device.memory_bandwidth_gbs is missing",
                          "network.intra_node_gbs is missing", "network.inter_node_gbs is missing",
                          "network.latency_us is missing", "bad.toml"}) {
    EXPECT_CONTAINS(missing, key);
  }
  EXPECT_CONTAINS(error_of("[cluster]\n"), "[device] is missing");
  // Unknown keys and sections, wrong types, out-of-range values.
  std::string text = kComplete;
  EXPECT_CONTAINS(error_of(text + "[gpu]\n"), "[gpu] is not a known section");
  const std::string typo =
      error_of(std::string(kComplete).replace(text.find("peak_tflops"), 11, "peak_tflop"));
  EXPECT_CONTAINS(typo, "device.peak_tflop is not a known key");
  EXPECT_CONTAINS(typo, "device.peak_tflops is missing");
  const std::string zero_nodes =
      error_of(std::string(kComplete).replace(text.find("nodes = 2"), 9, "nodes = 0"));
  EXPECT_CONTAINS(zero_nodes, "cluster.nodes must be a whole number >= 1");
  const std::string negative =
      error_of(std::string(kComplete).replace(text.find("100.0"), 5, "-1.0"));
  EXPECT_CONTAINS(negative, "device.peak_tflops (-1) must be > 0");
  const std::string precision = error_of(text + "[device.extra]\n");
  EXPECT_CONTAINS(precision, "device.extra is not a known key");
  EXPECT_CONTAINS(error_of("[cluster\n"), "not valid TOML");
  const std::string efficiency = error_of(std::string(kComplete).replace(
      text.find("[network]"), 9, "attention_efficiency = 1.5\n[network]"));
  EXPECT_CONTAINS(efficiency, "device.attention_efficiency (1.5) must be <= 1");
  // Names that are neither presets nor files.
  EXPECT_CONTAINS(testing::user_error([] { load_cluster("a100"); }), "a100-80gb, h100-80gb, h200");
}

}  // namespace
}  // namespace strata
