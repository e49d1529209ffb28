// `strata plan` run in process (the command's source is compiled into this test): a layout's
// prediction and a search as text and JSON with the keys docs/planner.md promises, and exit
// status 2 with a message saying what to change for each kind of bad input.
#include <gtest/gtest.h>

#include <fstream>
#include <nlohmann/json.hpp>

#include "command_runner.h"
#include "strata/cli/plan.h"
#include "test_support.h"

namespace strata {
namespace {

using testing::CommandResult;

CommandResult run_plan(const std::vector<std::string>& args) {
  return testing::run_subcommand("plan", add_plan_command, args);
}

class PlanCommand : public ::testing::Test {
 protected:
  void SetUp() override {
    model_ = dir_.file("model.toml");
    // A training config: sections besides [model] are accepted and ignored.
    std::ofstream(model_) << "[model]\nvocab_size = 51200\nd_model = 4096\nn_layers = 32\n"
                             "n_heads = 32\nseq_len = 2048\n[train]\nsteps = 5\n[data]\n"
                             "source = \"synthetic\"\n";
  }
  testing::TempDir dir_;
  std::string model_;
};

void expect_error(const CommandResult& result, const std::string& fragment) {
  testing::expect_usage_error(result, {fragment});
}

TEST_F(PlanCommand, LayoutPredictionAsJson) {
  const CommandResult result = run_plan(
      {"--model", model_, "--cluster", "h100-80gb", "--nodes", "4", "--global-batch", "256",
       "--layout", "tp=4,pp=2,zero=1,recompute=selective,sequence_parallel=true", "--json"});
  ASSERT_EQ(result.exit_code, 0) << result.err;
  const nlohmann::json json = nlohmann::json::parse(result.out);
  for (const char* key : {"params", "grads", "optimizer", "activations", "buffers", "total"}) {
    EXPECT_TRUE(json["memory_per_device_bytes"].contains(key)) << key;
  }
  for (const char* key : {"step_time_s", "model_tflops_per_device", "hardware_tflops_per_device",
                          "mfu", "bubble_fraction", "fits", "layout", "step_time_breakdown_s",
                          "tokens_per_s", "context_parallel_bytes"}) {
    EXPECT_TRUE(json.contains(key)) << key;
  }
  EXPECT_EQ(json["layout"]["dp"], 4);
  EXPECT_EQ(json["layout"]["tp"], 4);
  EXPECT_EQ(json["layout"]["schedule"], "1f1b");
  EXPECT_EQ(json["layout"]["recompute"], "selective");
  EXPECT_EQ(json["layout"]["cp_comm"], "ring");
  EXPECT_EQ(json["fits"], true);
}

TEST_F(PlanCommand, SearchAsTextAndJson) {
  const std::vector<std::string> args = {"--model", model_, "--cluster",      "a100-80gb",
                                         "--nodes", "2",    "--global-batch", "128",
                                         "--top",   "3"};
  const CommandResult text = run_plan(args);
  ASSERT_EQ(text.exit_code, 0) << text.err;
  for (const char* fragment : {"valid layouts", "#1 ", "#3 ", "behind #1 on",
                               "why the other layouts lost", "does not fit", "MFU"}) {
    EXPECT_NE(text.out.find(fragment), std::string::npos) << fragment << " in:\n" << text.out;
  }
  std::vector<std::string> json_args = args;
  json_args.push_back("--json");
  const CommandResult json = run_plan(json_args);
  ASSERT_EQ(json.exit_code, 0) << json.err;
  const nlohmann::json list = nlohmann::json::parse(json.out);
  ASSERT_TRUE(list.is_array());
  ASSERT_EQ(list.size(), 3u);
  EXPECT_EQ(list[0]["rank"], 1);
  EXPECT_EQ(list[0]["reason"], "fastest");
  EXPECT_LE(list[0]["step_time_s"].get<double>(), list[2]["step_time_s"].get<double>());
  EXPECT_TRUE(list[2]["memory_per_device_bytes"].contains("total"));
}

// A full training config: [train] global_batch is the batch, precision the plan's precision,
// and the [parallel] keys, train.micro_batch and train.recompute it sets fix those parts of the
// layout: the search keeps them, --layout overrides them.
TEST_F(PlanCommand, ATrainingConfigFixesWhatItSets) {
  // The config of one attention kernel, and the search's top 3 layouts for it.
  auto config_of = [&](const std::string& attention) {
    const std::string path = dir_.file(attention + ".toml");
    std::ofstream(path) << "[model]\nvocab_size = 51200\nd_model = 4096\nn_layers = 32\n"
                           "n_heads = 32\nseq_len = 2048\nattention = \""
                        << attention
                        << "\"\n[train]\nglobal_batch = 64\nmicro_batch = 2\n"
                           "recompute = \"selective\"\nprecision = \"bf16\"\n"
                           "[parallel]\ntp = 2\npp = 2\n[data]\nsource = \"synthetic\"\n";
    return path;
  };
  auto top_3 = [&](const std::string& path) {
    const CommandResult search =
        run_plan({"--model", path, "--cluster", "a100-80gb", "--top", "3", "--json"});
    EXPECT_EQ(search.exit_code, 0) << search.err;
    return search.exit_code == 0 ? nlohmann::json::parse(search.out) : nlohmann::json::array();
  };
  // The eager kernel: selective recomputation repeats its attention core.
  const std::string config = config_of("eager");
  const nlohmann::json list = top_3(config);
  ASSERT_EQ(list.size(), 3u);
  for (const nlohmann::json& ranked : list) {
    EXPECT_EQ(ranked["layout"]["tp"], 2);
    EXPECT_EQ(ranked["layout"]["pp"], 2);
    EXPECT_EQ(ranked["layout"]["dp"], 2);
    EXPECT_EQ(ranked["layout"]["micro_batch"], 2);
    EXPECT_EQ(ranked["layout"]["recompute"], "selective");
  }
  const CommandResult text = run_plan({"--model", config, "--cluster", "a100-80gb", "--top", "1"});
  ASSERT_EQ(text.exit_code, 0) << text.err;
  EXPECT_NE(text.out.find("tp=2 pp=2 micro_batch=2 recompute=selective (the search keeps these)"),
            std::string::npos)
      << text.out;

  // The blockwise kernel keeps only its log-sum-exp besides its output: selective repeats its
  // core only with cp > 1 and is the same run as none elsewhere, which the search keeps.
  const std::string blockwise = config_of("blockwise");
  const nlohmann::json none_list = top_3(blockwise);
  ASSERT_FALSE(none_list.empty());
  for (const nlohmann::json& ranked : none_list) {
    const bool selective_repeats_the_core = ranked["layout"]["cp"].get<int64_t>() > 1;
    EXPECT_EQ(ranked["layout"]["recompute"], selective_repeats_the_core ? "selective" : "none");
  }
  const CommandResult none_text =
      run_plan({"--model", blockwise, "--cluster", "a100-80gb", "--top", "1"});
  EXPECT_NE(none_text.out.find("recompute=selective repeats the blockwise kernel's attention "
                               "core only with cp > 1; elsewhere it runs as none"),
            std::string::npos)
      << none_text.out;

  const CommandResult layout = run_plan({"--model", config, "--cluster", "a100-80gb", "--layout",
                                         "pp=1,zero=1,recompute=full", "--json"});
  ASSERT_EQ(layout.exit_code, 0) << layout.err;
  const nlohmann::json prediction = nlohmann::json::parse(layout.out);
  EXPECT_EQ(prediction["layout"]["tp"], 2);  // from the config
  EXPECT_EQ(prediction["layout"]["pp"], 1);  // --layout wins
  EXPECT_EQ(prediction["layout"]["dp"], 4);
  EXPECT_EQ(prediction["layout"]["zero"], 1);
  EXPECT_EQ(prediction["layout"]["recompute"], "full");
  EXPECT_EQ(prediction["layout"]["microbatches"], 8);  // 64 / (dp 4 x micro_batch 2)

  // The config's precision is the plan's: fp32 states take (4 + 4 + 8) bytes per parameter
  // against bf16's (2 + 2 + 12), so the same layout's parameters double.
  const std::string fp32 = dir_.file("fp32.toml");
  std::ofstream(fp32) << "[model]\nvocab_size = 51200\nd_model = 4096\nn_layers = 32\n"
                         "n_heads = 32\nseq_len = 2048\n[train]\nglobal_batch = 64\n"
                         "precision = \"fp32\"\n";
  const CommandResult single =
      run_plan({"--model", fp32, "--cluster", "a100-80gb", "--layout", "tp=8", "--json"});
  ASSERT_EQ(single.exit_code, 0) << single.err;
  EXPECT_NE(single.err.find("train.precision = fp32 on a profile whose peak_tflops is its bf16"),
            std::string::npos)
      << single.err;
  const CommandResult bf16 = run_plan({"--model", model_, "--cluster", "a100-80gb",
                                       "--global-batch", "64", "--layout", "tp=8", "--json"});
  ASSERT_EQ(bf16.exit_code, 0) << bf16.err;
  EXPECT_DOUBLE_EQ(
      nlohmann::json::parse(single.out)["memory_per_device_bytes"]["params"].get<double>(),
      2 * nlohmann::json::parse(bf16.out)["memory_per_device_bytes"]["params"].get<double>());
}

// parallel.pp_layers = "auto" in the config (or pp_layers=auto in --layout): the plan prints the
// split it prices, what costed it, and the predicted bubble; without it, the FLOP split.
TEST_F(PlanCommand, PrintsTheSplitAndTheBubble) {
  const std::string config = dir_.file("auto.toml");
  std::ofstream(config) << "[model]\nvocab_size = 32000\nd_model = 256\nn_layers = 8\n"
                           "n_heads = 8\nseq_len = 128\n[train]\nglobal_batch = 8\n"
                           "micro_batch = 1\n[parallel]\npp = 2\npp_layers = \"auto\"\n";
  const CommandResult automatic =
      run_plan({"--model", config, "--cluster", "h100-80gb", "--layout", "pp=2"});
  ASSERT_EQ(automatic.exit_code, 0) << automatic.err;
  for (const char* fragment :
       {"pp=2 micro_batch=1 pp_layers=auto\n", "pp_layers=auto (2 microbatches per step)",
        "split: layers per virtual stage ",
        "balanced by time (pp_layers=auto, costed by the cost model, "
        "cluster profile 'h100-80gb')",
        "; predicted bubble "}) {
    EXPECT_NE(automatic.out.find(fragment), std::string::npos) << fragment << " in\n"
                                                               << automatic.out;
  }
  const CommandResult flops = run_plan(
      {"--model", model_, "--cluster", "h100-80gb", "--global-batch", "8", "--layout", "pp=2"});
  ASSERT_EQ(flops.exit_code, 0) << flops.err;
  EXPECT_NE(
      flops.out.find("split: layers per virtual stage 16 16, balanced by FLOPs (the default)"),
      std::string::npos)
      << flops.out;
  const CommandResult json =
      run_plan({"--model", config, "--cluster", "h100-80gb", "--layout", "pp=2", "--json"});
  ASSERT_EQ(json.exit_code, 0) << json.err;
  const nlohmann::json prediction = nlohmann::json::parse(json.out);
  EXPECT_EQ(prediction["layout"]["pp_layers"], "auto");
  EXPECT_EQ(prediction["stage_layers"].size(), 2u);
  expect_error(run_plan({"--model", model_, "--cluster", "h100-80gb", "--global-batch", "8",
                         "--layout", "pp=2,pp_layers=even"}),
               "--layout: pp_layers=even must be auto");
}

TEST_F(PlanCommand, ExplainBreaksTheStepDown) {
  const CommandResult result =
      run_plan({"--model", model_, "--cluster", "a100-80gb", "--nodes", "2", "--global-batch", "64",
                "--layout", "tp=8,pp=2,recompute=full", "--explain"});
  ASSERT_EQ(result.exit_code, 0) << result.err;
  for (const char* fragment :
       {"where the ", "weight multiplies", "recomputation", "train.recompute = full",
        "tensor-parallel communication", "exposed, tp 8, intra-node", "pipeline bubble",
        "pp 2, 1f1b, 64 microbatches", "kernel overhead", "pipeline p2p", "inter-node"}) {
    EXPECT_NE(result.out.find(fragment), std::string::npos) << fragment << " in:\n" << result.out;
  }
  const CommandResult search = run_plan({"--model", model_, "--cluster", "a100-80gb", "--nodes",
                                         "2", "--global-batch", "64", "--top", "2", "--explain"});
  ASSERT_EQ(search.exit_code, 0) << search.err;
  const size_t first = search.out.find("where the ");
  ASSERT_NE(first, std::string::npos) << search.out;
  EXPECT_EQ(search.out.find("where the ", first + 1), std::string::npos)
      << "only the fastest layout is explained";
}

TEST_F(PlanCommand, ClusterFromAFile) {
  const std::string path = dir_.file("cluster.toml");
  std::ofstream(path)
      << "[cluster]\nnodes = 1\ndevices_per_node = 8\n[device]\nname = \"G\"\n"
         "peak_tflops = 500.0\nmemory_gb = 96.0\nmemory_bandwidth_gbs = 3000.0\n"
         "[network]\nintra_node_gbs = 400.0\ninter_node_gbs = 50.0\nlatency_us = 5.0\n";
  const CommandResult result =
      run_plan({"--model", model_, "--cluster", path, "--global-batch", "64", "--layout", "tp=8"});
  ASSERT_EQ(result.exit_code, 0) << result.err;
  EXPECT_NE(result.out.find("96.0 GB"), std::string::npos) << result.out;
  // No efficiency keys and a chip no preset calibrates: one warning that the plan is a bound.
  const std::string warning = "strata: warning: " + path + " sets no matmul_efficiency, ";
  const size_t first = result.err.find(warning);
  ASSERT_NE(first, std::string::npos) << result.err;
  EXPECT_EQ(result.err.find(warning, first + 1), std::string::npos) << result.err;
  EXPECT_NE(result.err.find("upper bound"), std::string::npos) << result.err;
}

// The same file on an H100: its preset's efficiency keys, named on stderr, and the prediction
// of the h100-80gb preset itself (the other keys are the preset's too).
TEST_F(PlanCommand, ClusterFileWithoutEfficiencyTakesTheCalibratedPreset) {
  const std::string path = dir_.file("h100.toml");
  std::ofstream(path)
      << "[cluster]\nnodes = 1\ndevices_per_node = 8\n[device]\nname = \"NVIDIA H100 80GB\"\n"
         "peak_tflops = 989.0\nmemory_gb = 80.0\nmemory_bandwidth_gbs = 3350.0\n"
         "[network]\nintra_node_gbs = 450.0\ninter_node_gbs = 50.0\nlatency_us = 5.0\n"
         "intra_node_latency_us = 2.0\n";
  const std::vector<std::string> args = {"--model",  model_, "--global-batch", "64",
                                         "--layout", "tp=8", "--json"};
  auto with_cluster = [&](const std::string& cluster) {
    std::vector<std::string> full = {"--cluster", cluster};
    full.insert(full.end(), args.begin(), args.end());
    return run_plan(full);
  };
  const CommandResult file = with_cluster(path);
  const CommandResult preset = with_cluster("h100-80gb");
  ASSERT_EQ(file.exit_code, 0) << file.err;
  ASSERT_EQ(preset.exit_code, 0) << preset.err;
  EXPECT_NE(file.err.find("strata: note: " + path +
                          " leaves out device efficiency keys; took "
                          "matmul_efficiency = "),
            std::string::npos)
      << file.err;
  EXPECT_NE(file.err.find("from the calibrated preset h100-80gb"), std::string::npos) << file.err;
  EXPECT_EQ(preset.err, "");
  EXPECT_EQ(nlohmann::json::parse(file.out)["step_time_s"],
            nlohmann::json::parse(preset.out)["step_time_s"]);
}

TEST_F(PlanCommand, BadInputSaysWhatToChange) {
  const std::vector<std::string> base = {"--model",   model_,           "--cluster",
                                         "h100-80gb", "--global-batch", "64"};
  auto with = [&](std::vector<std::string> extra) {
    std::vector<std::string> args = base;
    args.insert(args.end(), extra.begin(), extra.end());
    return run_plan(args);
  };
  // A layout that does not divide the cluster.
  expect_error(with({"--layout", "tp=3"}), "does not divide the cluster's 8 devices");
  expect_error(with({"--layout", "tp=2,dp=2"}), "does not match the cluster's 8 devices");
  expect_error(with({"--layout", "tp=8,pp=2"}), "does not divide the cluster's 8 devices");
  expect_error(with({"--layout", "tp=5"}), "tp (5) must divide model.n_heads (32)");
  expect_error(with({"--layout", "tp=2,micro_batch=3"}), "must be divisible by dp * micro_batch");
  expect_error(with({"--layout", "pp=2,vpp=2,schedule=1f1b"}),
               "vpp (2) > 1 needs schedule=interleaved-1f1b");
  expect_error(with({"--layout", "ep=2"}), "needs a mixture-of-experts model");
  expect_error(with({"--layout", "tq=2"}), "unknown key 'tq'");
  expect_error(with({"--layout", "pp=2,schedule=zb-h2"}),
               "schedule=zb-h2 must be gpipe, 1f1b, interleaved-1f1b, zb-h1, zb-v");
  expect_error(with({"--layout", "pp=2,schedule=zb-v"}), "schedule=zb-v needs vpp=2");
  expect_error(with({"--layout", "tp=two"}), "tp=two is not a whole number");
  expect_error(with({"--layout", "cp=2,cp_comm=ulysses"}),
               "cp_comm=ulysses must be ring, all-gather, all-to-all");
  expect_error(with({"--layout", "recompute=some"}),
               "recompute=some must be none, selective, full");
  // A model that fits nowhere.
  {
    const std::string big = dir_.file("big.toml");
    std::ofstream(big)
        << "[model]\nvocab_size = 51200\nd_model = 25600\nn_layers = 128\nn_heads = 160\n"
           "seq_len = 2048\n";
    expect_error(run_plan({"--model", big, "--cluster", "a100-80gb", "--global-batch", "64"}),
                 "no layout fits");
  }
  // Missing or broken inputs.
  expect_error(run_plan({"--cluster", "h100-80gb", "--global-batch", "8"}), "--model is required");
  expect_error(run_plan({"--model", model_, "--global-batch", "8"}), "--cluster is required");
  expect_error(run_plan({"--model", model_, "--cluster", "h100-80gb"}),
               "--global-batch is required");
  expect_error(with({"--top", "0"}), "--top '0' must be a whole number >= 1");
  expect_error(run_plan({"--model", dir_.file("none.toml"), "--cluster", "h100-80gb",
                         "--global-batch", "8"}),
               "is not a readable file");
  {
    const std::string typo = dir_.file("typo.toml");
    std::ofstream(typo) << "[model]\nd_modle = 512\n";
    expect_error(run_plan({"--model", typo, "--cluster", "h100-80gb", "--global-batch", "8"}),
                 "d_modle");
    const std::string invalid = dir_.file("invalid.toml");
    std::ofstream(invalid) << "[model]\nd_model = 100\nn_heads = 3\n";
    expect_error(run_plan({"--model", invalid, "--cluster", "h100-80gb", "--global-batch", "8"}),
                 "model.d_model (100) must be divisible by model.n_heads (3)");
  }
  {
    const std::string cluster = dir_.file("partial.toml");
    std::ofstream(cluster)
        << "[cluster]\nnodes = 1\ndevices_per_node = 8\n[device]\nname = \"G\"\n";
    expect_error(run_plan({"--model", model_, "--cluster", cluster, "--global-batch", "8"}),
                 "device.peak_tflops is missing");
  }
  expect_error(run_plan({"--model", model_, "--cluster", "tpu", "--global-batch", "8"}),
               "neither a preset (a100-80gb, h100-80gb, h200)");
}

}  // namespace
}  // namespace strata
