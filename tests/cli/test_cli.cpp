// The `strata` binary as a user runs it: config errors, a two-rank training run through the
// launcher with its metrics, generation from the checkpoint, and refusal of a corrupt one.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <set>

#include "strata/data/prepare.h"
#include "test_configs.h"
#include "test_support.h"

namespace strata {
namespace {

const std::string kStrata = STRATA_BINARY;

std::string write_config(const testing::TempDir& dir) {
  const std::string path = dir.file("run.toml");
  std::ofstream(path) << testing::tiny_run_toml(6) << R"(eval_every = 3
[data]
source = "synthetic"
[log]
progress = "lines"
trace = true
dir = ")" + dir.file("log") + R"("
[checkpoint]
dir = ")" + dir.file("ckpt") + "\"\n";
  return path;
}

TEST(Cli, ConfigErrorsNameTheKey) {
  testing::TempDir dir;
  std::string output;
  EXPECT_EQ(testing::run_command(kStrata + " config " + write_config(dir) + " --set model.n_head=3",
                                 &output),
            2);
  EXPECT_NE(output.find("model.n_head"), std::string::npos) << output;
  EXPECT_EQ(testing::run_command(kStrata + " config " + write_config(dir) + " --set parallel.tp=3",
                                 &output),
            2);
  EXPECT_NE(output.find("parallel.tp"), std::string::npos) << output;
  EXPECT_EQ(testing::run_command(kStrata + " config " + dir.file("missing.toml"), &output), 2);
  EXPECT_NE(output.find("missing.toml"), std::string::npos) << output;
  EXPECT_EQ(testing::run_command(kStrata + " train " + write_config(dir) + " --nproc 3", &output),
            2);
  EXPECT_NE(output.find("global_batch"), std::string::npos) << output;
}

// `strata data prepare` killed after 3 shards (STRATA_PREPARE_KILL_AFTER_SHARDS) leaves an
// unfinished directory; the same command again finishes it, byte for byte as one run.
TEST(Cli, DataPrepareResumesAnInterruptedRun) {
  testing::TempDir dir;
  std::string records;
  for (int i = 0; i < 2000; ++i) {
    records += "{\"prompt\": \"Q" + std::to_string(i) + "?\", \"completion\": \" A" +
               std::to_string(i * i) + ".\"}\n";
  }
  testing::write_bytes(dir.file("sft.jsonl"), records);
  const std::string command = kStrata + " data prepare " + dir.file("sft.jsonl") +
                              " --prompt-completion --threads 2 --shard-mib 0.01 --out ";
  std::string output;
  ASSERT_EQ(testing::run_command(command + dir.file("whole"), &output), 0) << output;
  EXPECT_NE(output.find("(2000 documents)"), std::string::npos) << output;
  EXPECT_NE(output.find("data.loss_mask = \"completion\""), std::string::npos) << output;
  EXPECT_EQ(testing::run_command(
                "STRATA_PREPARE_KILL_AFTER_SHARDS=3 " + command + dir.file("resumed"), &output),
            128 + 9)
      << output;
  EXPECT_TRUE(std::filesystem::exists(dir.file("resumed/progress.json")));
  ASSERT_EQ(testing::run_command(command + dir.file("resumed"), &output), 0) << output;
  int files = 0;
  for (const auto& entry : std::filesystem::directory_iterator(dir.file("whole"))) {
    const std::string name = entry.path().filename().string();
    EXPECT_EQ(testing::read_bytes(entry.path().string()),
              testing::read_bytes(dir.file("resumed/" + name)))
        << name;
    ++files;
  }
  EXPECT_GT(files, 4);
  EXPECT_FALSE(std::filesystem::exists(dir.file("resumed/progress.json")));
  EXPECT_EQ(testing::run_command(kStrata + " data prepare " + dir.file("sft.jsonl") +
                                     " --field body --out " + dir.file("bad"),
                                 &output),
            2);
  EXPECT_NE(output.find(dir.file("sft.jsonl") + ":1 has no field \"body\""), std::string::npos)
      << output;
}

// `strata data prepare --chat`: a chat template from --chat-template (with the byte
// tokenizer), a loss mask on the assistant turns; no template, or --prompt-completion too, is
// refused before any work.
TEST(Cli, DataPrepareChatMasksTheAssistantTurns) {
  testing::TempDir dir;
  testing::write_bytes(dir.file("chatml.jinja"),
                       "{%- for m in messages %}{{- '<|im_start|>' + m['role'] + '\\n' + "
                       "m['content'] + '<|im_end|>\\n' }}{%- endfor %}{%- if "
                       "add_generation_prompt %}{{- '<|im_start|>assistant\\n' }}{%- endif %}\n");
  testing::write_bytes(dir.file("chat.jsonl"),
                       "{\"messages\": [{\"role\": \"user\", \"content\": \"hi\"}, "
                       "{\"role\": \"assistant\", \"content\": \"hello\"}]}\n");
  const std::string command = kStrata + " data prepare " + dir.file("chat.jsonl") + " --chat ";
  std::string output;
  ASSERT_EQ(testing::run_command(command + "--chat-template " + dir.file("chatml.jinja") +
                                     " --out " + dir.file("out"),
                                 &output),
            0)
      << output;
  EXPECT_NE(output.find("data.loss_mask = \"completion\""), std::string::npos) << output;
  const TokenStream stream = load_token_shards(dir.file("out"));
  const std::string text = "<|im_start|>user\nhi<|im_end|>\n<|im_start|>assistant\nhello<|im_end|>";
  ASSERT_EQ(stream.tokens.size(), text.size() + 2);  // the trailing "\n" trimmed, then "\n\n"
  const size_t loss_from = text.find("hello");
  for (size_t i = 0; i < stream.loss_mask.size(); ++i) {
    EXPECT_EQ(stream.loss_mask[i], i >= loss_from ? 1 : 0) << i;
  }
  EXPECT_EQ(testing::run_command(command + "--out " + dir.file("none"), &output), 2);
  EXPECT_NE(output.find("--chat needs a chat template"), std::string::npos) << output;
  EXPECT_FALSE(std::filesystem::exists(dir.file("none")));
  EXPECT_NE(
      testing::run_command(command + "--prompt-completion --out " + dir.file("both"), &output), 0);
  EXPECT_NE(output.find("excludes"), std::string::npos) << output;
}

TEST(Cli, ConfigPrintsEffectiveValues) {
  testing::TempDir dir;
  std::string output;
  ASSERT_EQ(testing::run_command(kStrata + " config " + write_config(dir) + " --ranks 2", &output),
            0)
      << output;
  EXPECT_NE(output.find("dp = 2"), std::string::npos) << output;
  EXPECT_NE(output.find("microbatches = 1"), std::string::npos) << output;
}

TEST(Cli, ConfigNprocNamesItsNewSpelling) {
  testing::TempDir dir;
  std::string output;
  EXPECT_EQ(testing::run_command(kStrata + " config " + write_config(dir) + " --nproc 2", &output),
            2)
      << output;
  EXPECT_NE(output.find("--nproc is now --ranks"), std::string::npos) << output;
  EXPECT_NE(output.find("use --ranks 2"), std::string::npos) << output;
}

// A local profile of a 2-rank machine in DIR/cache, as `strata plan calibrate` would leave it;
// returns the environment setting that points strata at it.
std::string write_local_profile(const testing::TempDir& dir) {
  std::filesystem::create_directories(dir.file("cache/clusters"));
  std::ofstream(dir.file("cache/clusters/local.toml")) << R"([cluster]
nodes = 1
devices_per_node = 2
[device]
name = "test machine"
peak_tflops = 0.05
memory_gb = 8.0
memory_bandwidth_gbs = 10.0
precision = "fp32"
[network]
intra_node_gbs = 5.0
inter_node_gbs = 5.0
latency_us = 5.0
)";
  return "STRATA_CACHE_DIR=" + dir.file("cache") + " ";
}

// parallel.pp_layers = "auto": `strata config` needs this machine's profile, prints the list it
// resolves to (which reads back as itself), and `strata train` resolves it at the start and
// logs the split.
TEST(Cli, PipelineLayersAutoResolvesToAList) {
  testing::TempDir dir;
  const std::string config = write_config(dir);
  const std::string set = " --set parallel.pp=2 --set parallel.pp_layers=auto";
  std::string output;
  EXPECT_EQ(testing::run_command("STRATA_CACHE_DIR=" + dir.file("empty") + " " + kStrata +
                                     " config " + config + " --ranks 2" + set,
                                 &output),
            2);
  EXPECT_NE(output.find("run `strata plan calibrate`"), std::string::npos) << output;

  const std::string env = write_local_profile(dir);
  ASSERT_EQ(testing::run_command(env + kStrata + " config " + config + " --ranks 2" + set, &output),
            0)
      << output;
  EXPECT_EQ(output.rfind("# parallel.pp_layers = \"auto\": [", 0), 0u) << output;
  EXPECT_NE(output.find("costed by the cost model, cluster profile 'local'"), std::string::npos)
      << output;
  const size_t line = output.find("\npp_layers = [");
  ASSERT_NE(line, std::string::npos) << output;
  const std::string resolved = output.substr(line + 1, output.find('\n', line + 1) - line);
  std::ofstream(dir.file("resolved.toml")) << output;
  std::string again;
  ASSERT_EQ(testing::run_command(
                env + kStrata + " config " + dir.file("resolved.toml") + " --ranks 2", &again),
            0)
      << again;
  EXPECT_NE(again.find(resolved), std::string::npos) << resolved << " in\n" << again;
  EXPECT_EQ(again.find("# parallel.pp_layers"), std::string::npos) << "a list needs no resolving";

  ASSERT_EQ(testing::run_command(
                env + kStrata + " train " + config + " --nproc 2" + set + " --set log.trace=false",
                &output),
            0)
      << output;
  EXPECT_NE(output.find("parallel.pp_layers = \"auto\": ["), std::string::npos) << output;
  EXPECT_NE(output.find("step 6/6"), std::string::npos) << output;
}

TEST(Cli, AutoLayoutPlansThenTrains) {
  testing::TempDir dir;
  // A local profile of a 2-rank machine, as `strata plan calibrate` would leave it.
  const std::string env = write_local_profile(dir);
  std::string output;
  ASSERT_EQ(testing::run_command(env + kStrata + " train " + write_config(dir) +
                                     " --nproc 2 --set parallel.auto=true",
                                 &output),
            0)
      << output;
  EXPECT_NE(output.find("parallel.auto: "), std::string::npos) << output;
  EXPECT_NE(output.find("on 2 ranks (profile 'local')"), std::string::npos) << output;
  EXPECT_NE(output.find("planned with the local profile"), std::string::npos) << output;
  EXPECT_NE(output.find("step 6/6"), std::string::npos) << output;

  // The planner chooses the layout: a config that also sets it is refused before launch.
  EXPECT_EQ(testing::run_command(env + kStrata + " train " + write_config(dir) +
                                     " --nproc 2 --set parallel.auto=true --set parallel.tp=2",
                                 &output),
            2);
  EXPECT_NE(output.find("parallel.auto = true chooses the layout, but the config also sets "
                        "parallel.tp = 2"),
            std::string::npos)
      << output;
}

TEST(Cli, TensorParallelCheckpointServesSplitOrWhole) {
  testing::TempDir dir;
  std::string output;
  ASSERT_EQ(testing::run_command(kStrata + " train " + write_config(dir) +
                                     " --nproc 2 --set parallel.tp=2 --set log.trace=false",
                                 &output),
            0)
      << output;
  const std::string generate = kStrata + " generate --checkpoint " +
                               dir.file("ckpt/step_00000006") +
                               " --prompt 'The ' --max-new-tokens 24 --temperature 0";
  std::string whole, split;
  ASSERT_EQ(testing::run_command(generate, &whole), 0) << whole;
  ASSERT_EQ(testing::run_command(generate + " --nproc 2", &split), 0) << split;
  EXPECT_EQ(whole.rfind("The ", 0), 0u) << whole;
  EXPECT_GT(whole.size(), 4u + 20u) << whole;
  EXPECT_EQ(split, whole) << "greedy decoding of the tp=2 checkpoint on 2 ranks and on 1";
  // The same prompt as ids, as JSON: the ids, their text and each new token's logprob.
  const std::string scored = kStrata + " generate --checkpoint " + dir.file("ckpt/step_00000006") +
                             " --prompt-ids 84,104,101,32 --max-new-tokens 24 --temperature 0" +
                             " --json";
  std::string json_whole, json_split;
  ASSERT_EQ(testing::run_command(scored, &json_whole), 0) << json_whole;
  ASSERT_EQ(testing::run_command(scored + " --nproc 2", &json_split), 0) << json_split;
  const nlohmann::json one = nlohmann::json::parse(json_whole),
                       two = nlohmann::json::parse(json_split);
  EXPECT_EQ(one["prompt_ids"], nlohmann::json({84, 104, 101, 32}));
  ASSERT_EQ(one["generated_ids"].size(), 24u) << json_whole;
  std::string bytes;  // byte ids: the text (JSON carries invalid UTF-8 as U+FFFD)
  for (const auto& id : one["generated_ids"]) bytes.push_back(static_cast<char>(id.get<int>()));
  EXPECT_EQ("The " + bytes + "\n", whole);
  EXPECT_EQ(two["generated_ids"], one["generated_ids"]);
  ASSERT_EQ(one["logprobs"].size(), 24u);
  for (size_t i = 0; i < 24; ++i) {
    EXPECT_LT(one["logprobs"][i].get<double>(), 0.0);
    EXPECT_NEAR(two["logprobs"][i].get<double>(), one["logprobs"][i].get<double>(), 1e-4);
  }
  EXPECT_EQ(testing::run_command(kStrata + " generate --checkpoint " +
                                     dir.file("ckpt/step_00000006") + " --prompt-ids 1,x",
                                 &output),
            2);
  EXPECT_NE(output.find("--prompt-ids: 'x' is not a token id"), std::string::npos) << output;
  EXPECT_EQ(testing::run_command(kStrata + " generate --checkpoint " +
                                     dir.file("ckpt/step_00000006") + " --prompt-ids 1,256",
                                 &output),
            2);
  EXPECT_NE(output.find("prompt token id 256 is outside the model's vocabulary [0, 256)"),
            std::string::npos)
      << output;
  // The float32 checkpoint computes in bf16 when asked; a precision it does not know is refused.
  std::string bf16;
  ASSERT_EQ(testing::run_command(generate + " --precision bf16", &bf16), 0) << bf16;
  EXPECT_EQ(bf16.rfind("The ", 0), 0u) << bf16;
  EXPECT_GT(bf16.size(), 4u + 20u) << bf16;
  EXPECT_EQ(testing::run_command(generate + " --precision half", &output), 2) << output;
  EXPECT_NE(output.find("--precision must be one of fp32, bf16, fp16, fp64, got 'half'"),
            std::string::npos)
      << output;
}

// A context-parallel checkpoint holds the same global tensors: one rank generates from it.
TEST(Cli, ContextParallelCheckpointGenerates) {
  testing::TempDir dir;
  std::string output;
  ASSERT_EQ(testing::run_command(kStrata + " train " + write_config(dir) +
                                     " --nproc 2 --set parallel.cp=2 --set parallel.cp_comm=ring",
                                 &output),
            0)
      << output;
  EXPECT_NE(output.find("CP(2)"), std::string::npos) << output;
  // The trace shows each rank's ring steps: block compute, and waits for the next hop.
  std::ifstream trace_file(dir.file("log/trace.json"));
  ASSERT_TRUE(trace_file.good());
  std::map<std::string, std::set<int>> ranks_with;
  const nlohmann::json trace = nlohmann::json::parse(trace_file);
  for (const auto& event : trace["traceEvents"]) {
    if (event["ph"] == "X") {
      ranks_with[event["name"].get<std::string>()].insert(event["tid"].get<int>());
    }
  }
  EXPECT_EQ(ranks_with["cp_ring_compute"], (std::set<int>{0, 1}));
  EXPECT_EQ(ranks_with["cp_ring_wait"], (std::set<int>{0, 1}));
  ASSERT_EQ(
      testing::run_command(kStrata + " generate --checkpoint " + dir.file("ckpt/step_00000006") +
                               " --prompt 'The ' --max-new-tokens 16 --temperature 0",
                           &output),
      0)
      << output;
  EXPECT_EQ(output.rfind("The ", 0), 0u) << output;
  EXPECT_GT(output.size(), 4u + 12u) << output;
}

TEST(Cli, TrainTwoRanksThenGenerateAndRefuseCorruption) {
  testing::TempDir dir;
  std::string output;
  ASSERT_EQ(testing::run_command(kStrata + " train " + write_config(dir) + " --nproc 2", &output),
            0)
      << output;
  EXPECT_NE(output.find("step 6/6"), std::string::npos) << output;

  std::ifstream metrics(dir.file("log/metrics.jsonl"));
  std::string line;
  int steps = 0, evals = 0;
  while (std::getline(metrics, line)) {
    auto json = nlohmann::json::parse(line);
    if (json.contains("eval_loss")) {
      ++evals;
      continue;
    }
    ++steps;
    for (const char* key :
         {"step", "loss", "lr", "grad_norm", "step_time_s", "tokens_per_s", "mfu"}) {
      EXPECT_TRUE(json.contains(key)) << key << " missing in " << line;
    }
    for (const char* key : {"params", "grads", "optimizer", "activations_peak", "rss_peak"}) {
      EXPECT_GT(json["mem"][key].get<int64_t>(), 0) << key << " in " << line;
    }
    EXPECT_GT(json["comm_bytes"]["all_reduce"].get<int64_t>(), 0) << line;
  }
  EXPECT_EQ(steps, 6);
  EXPECT_EQ(evals, 2);

  // The Chrome trace holds one track per rank, each with its forward ("F") events.
  std::ifstream trace_file(dir.file("log/trace.json"));
  ASSERT_TRUE(trace_file.good());
  auto trace = nlohmann::json::parse(trace_file);
  std::set<int> ranks_with_events;
  for (const auto& event : trace["traceEvents"]) {
    if (event["ph"] == "X" && event["name"] == "F")
      ranks_with_events.insert(event["tid"].get<int>());
  }
  EXPECT_EQ(ranks_with_events, (std::set<int>{0, 1}));

  const std::string checkpoint = dir.file("ckpt/step_00000006");
  ASSERT_TRUE(std::filesystem::exists(checkpoint + "/COMPLETE"));
  ASSERT_EQ(testing::run_command(kStrata + " generate --checkpoint " + checkpoint +
                                     " --prompt 'The ' --max-new-tokens 20 --seed 1",
                                 &output),
            0)
      << output;
  EXPECT_EQ(output.rfind("The ", 0), 0u) << output;

  // Flip one byte of the rank file: the checkpoint must be refused, naming the file.
  std::string victim;
  for (const auto& entry : std::filesystem::directory_iterator(checkpoint)) {
    if (entry.path().extension() == ".safetensors") victim = entry.path();
  }
  ASSERT_FALSE(victim.empty());
  {
    std::fstream file(victim, std::ios::in | std::ios::out | std::ios::binary);
    file.seekg(-5, std::ios::end);
    char byte = 0;
    file.read(&byte, 1);
    byte = static_cast<char>(byte ^ 0x5a);
    file.seekp(-5, std::ios::end);
    file.write(&byte, 1);
  }
  EXPECT_EQ(testing::run_command(kStrata + " generate --checkpoint " + checkpoint, &output), 2);
  EXPECT_NE(output.find(std::filesystem::path(victim).filename().string()), std::string::npos)
      << output;
}

TEST(Cli, TrainMixtureOfExpertsOverTwoExpertRanksThenGenerate) {
  testing::TempDir dir;
  std::string output;
  ASSERT_EQ(testing::run_command(kStrata + " train " + write_config(dir) +
                                     " --nproc 2 --set model.moe.num_experts=4"
                                     " --set model.moe.capacity_factor=1.0 --set parallel.ep=2"
                                     " --set log.trace=false",
                                 &output),
            0)
      << output;
  std::ifstream metrics(dir.file("log/metrics.jsonl"));
  std::string line;
  int steps = 0;
  while (std::getline(metrics, line)) {
    auto json = nlohmann::json::parse(line);
    if (json.contains("eval_loss")) continue;
    ++steps;
    ASSERT_TRUE(json.contains("moe")) << line;
    const auto& moe = json["moe"];
    ASSERT_EQ(moe["load"].size(), 2u) << line;  // both layers
    int64_t assignments = 0;
    for (const auto& count : moe["load"][0]) assignments += count.get<int64_t>();
    EXPECT_EQ(assignments, 4 * 32 * 2) << "global_batch * seq_len * top_k in " << line;
    EXPECT_GE(moe["load_imbalance"].get<double>(), 1.0) << line;
    EXPECT_GE(moe["dropped_fraction"].get<double>(), 0.0) << line;
    EXPECT_GT(moe["aux_loss"].get<double>(), 0.0) << line;
    EXPECT_GT(json["comm_bytes"]["all_to_all"].get<int64_t>(), 0) << line;
  }
  EXPECT_EQ(steps, 6);
  // The checkpoint holds every expert as slices of the global tensors: one rank generates.
  const std::string checkpoint = dir.file("ckpt/step_00000006");
  ASSERT_EQ(testing::run_command(kStrata + " generate --checkpoint " + checkpoint +
                                     " --prompt 'The ' --max-new-tokens 20 --seed 1",
                                 &output),
            0)
      << output;
  EXPECT_EQ(output.rfind("The ", 0), 0u) << output;
}

}  // namespace
}  // namespace strata
