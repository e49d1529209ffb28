// Reading TOML into Config: defaults, every type, unknown sections and keys (with the closest
// suggestion), wrong types, syntax errors with line and column, and the exact round trip
// through to_toml.
#include <gtest/gtest.h>

#include <cmath>
#include <fstream>
#include <limits>
#include <set>

#include "expect_error.h"
#include "strata/core/config.h"
#include "test_support.h"

namespace strata {
namespace {

using testing::user_error;

std::string parse_error(const std::string& text) {
  return user_error([&] { parse_config(text, "run.toml"); });
}

TEST(ConfigParse, EmptyFileGivesTheDefaults) {
  const Config config = parse_config("", "run.toml");
  EXPECT_TRUE(config == Config{});
  EXPECT_EQ(config.model.vocab_size, 256);
  EXPECT_EQ(config.model.pos, PositionEncoding::learned);
  EXPECT_EQ(config.parallel.dp, -1);
  EXPECT_EQ(config.parallel.microbatches, 0);
  EXPECT_EQ(config.train.lr, 3e-4);
  EXPECT_EQ(config.train.seed, 1234u);
  EXPECT_EQ(config.data.source, DataSource::corpus);
  EXPECT_EQ(config.checkpoint.resume, "auto");
  EXPECT_EQ(config.log.progress, ProgressDisplay::automatic);
}

TEST(ConfigParse, ReadsEveryType) {
  const Config config = parse_config(R"(
[model]
d_model = 64          # integer
pos = "rope"          # string
tie_embeddings = false
init_std = 0.01       # float
rope_theta = 500000   # an integer is accepted for a float

[train]
seed = 42             # unsigned
lr = 1e-3

[data]
path = 'C:\corpus'    # literal string
)",
                                     "run.toml");
  EXPECT_EQ(config.model.d_model, 64);
  EXPECT_EQ(config.model.pos, PositionEncoding::rope);
  EXPECT_FALSE(config.model.tie_embeddings);
  EXPECT_EQ(config.model.init_std, 0.01);
  EXPECT_EQ(config.model.rope_theta, 500000.0);
  EXPECT_EQ(config.train.seed, 42u);
  EXPECT_EQ(config.train.lr, 1e-3);
  EXPECT_EQ(config.data.path, "C:\\corpus");
  EXPECT_EQ(config.model.n_layers, ModelConfig{}.n_layers) << "untouched keys keep defaults";

  // Dotted keys and inline tables are plain TOML.
  const Config dotted =
      parse_config("model.d_model = 32\ntrain = { steps = 7, lr = 0.5 }\n", "run.toml");
  EXPECT_EQ(dotted.model.d_model, 32);
  EXPECT_EQ(dotted.train.steps, 7);
  EXPECT_EQ(dotted.train.lr, 0.5);
}

TEST(ConfigParse, UnknownKeysSuggestTheClosestAndListAllowed) {
  const std::string message = parse_error("[model]\nd_model = 64\nn_head = 4\n");
  EXPECT_CONTAINS(message, "unknown key 'model.n_head' in run.toml:3:1");
  EXPECT_CONTAINS(message, "did you mean 'model.n_heads'?");
  EXPECT_CONTAINS(
      message,
      "allowed in [model]: vocab_size, d_model, n_layers, n_heads, n_kv_heads, head_dim, d_ff, "
      "seq_len, pos, norm, activation, attention, tie_embeddings, init_std, norm_eps, "
      "rope_theta");
  EXPECT_CONTAINS(parse_error("[train]\nwramup_steps = 4\n"), "did you mean 'train.warmup_steps'?");

  const std::string far = parse_error("[parallel]\nquantum = 4\n");
  EXPECT_CONTAINS(far, "unknown key 'parallel.quantum' in run.toml:2:1; allowed in [parallel]:");
  EXPECT_NOT_CONTAINS(far, "did you mean");

  EXPECT_CONTAINS(parse_error("[model]\nsteps = 4\n"),
                  "unknown key 'model.steps' in run.toml:2:1; did you mean 'train.steps'?");
  EXPECT_CONTAINS(parse_error("[model.extra]\nsize = 1\n"), "unknown key 'model.extra'");
  // The collective timeout of hang detection is the communication timeout.
  EXPECT_CONTAINS(parse_error("[fault]\ncollective_timeout_s = 5.0\n"),
                  "key 'fault.collective_timeout_s' in run.toml:2:1 was replaced by "
                  "parallel.comm_timeout_s");
}

TEST(ConfigParse, UnknownSectionsAndKeysOutsideSections) {
  const std::string message = parse_error("[modle]\nd_model = 64\n");
  EXPECT_CONTAINS(message, "unknown section [modle] in run.toml:1");
  EXPECT_CONTAINS(message, "did you mean [model]?");
  EXPECT_CONTAINS(message,
                  "allowed sections: model, model.moe, parallel, compression, train, data, "
                  "checkpoint, fault, log, serve");

  const std::string outside = parse_error("steps = 10\n");
  EXPECT_CONTAINS(outside, "key 'steps' in run.toml:1:1 is outside any section");
  EXPECT_CONTAINS(outside, "did you mean 'train.steps'?");

  EXPECT_CONTAINS(parse_error("model = 3\n"), "[model] must be a table of keys, got integer 3");
}

TEST(ConfigParse, WrongTypesNameKeyExpectedAndActual) {
  struct Case {
    std::string text, expected;
  };
  const std::vector<Case> cases = {
      {"[train]\nlr = \"fast\"\n", "train.lr must be a number, got string \"fast\" (run.toml:2:6)"},
      {"[model]\nd_model = 64.5\n", "model.d_model must be an integer, got float 64.5"},
      {"[model]\nd_model = 64.0\n", "model.d_model must be an integer, got float 64.0"},
      {"[model]\npos = 3\n", "model.pos must be \"learned\" or \"rope\", got integer 3"},
      {"[model]\ntie_embeddings = \"yes\"\n",
       "model.tie_embeddings must be a boolean (true or false), got string \"yes\""},
      {"[log]\ntrace = 1\n", "log.trace must be a boolean (true or false), got integer 1"},
      {"[train]\nseed = -1\n", "train.seed must be a non-negative integer, got integer -1"},
      {"[model]\nn_layers = [3, 2]\n", "model.n_layers must be an integer, got array ["},
      {"[train]\nlr = true\n", "train.lr must be a number, got boolean true"},
      {"[data]\npath = 2024-01-02\n", "data.path must be a string, got date 2024-01-02"},
      {"[model]\nd_model = { x = 1 }\n", "model.d_model must be an integer, got a table"},
  };
  for (const Case& c : cases) EXPECT_CONTAINS(parse_error(c.text), c.expected);
}

// An enum key takes one of its spellings; any other is refused when the file is read, with
// the key, the spellings and the value given. Every spelling reads back as itself.
TEST(ConfigParse, EnumKeysTakeOnlyTheirSpellings) {
  EXPECT_CONTAINS(parse_error("[model]\nactivation = \"relu\"\n"),
                  "model.activation must be \"gelu\" or \"swiglu\", got \"relu\" (run.toml:2:14)");
  EXPECT_CONTAINS(parse_error("[parallel]\npp_schedule = \"1F1B\"\n"),
                  "parallel.schedule must be \"gpipe\", \"1f1b\", \"interleaved-1f1b\", "
                  "\"zb-h1\" or \"zb-v\", got \"1F1B\"");
  EXPECT_CONTAINS(parse_error("[model.moe]\nactivation = \"relu\"\n"),
                  "model.moe.activation must be \"gelu\" or \"swiglu\", got \"relu\"");
  EXPECT_CONTAINS(parse_error("[train]\nprecision = \"bfloat16\"\n"),
                  "train.precision must be \"fp32\", \"bf16\", \"fp16\" or \"fp64\", got "
                  "\"bfloat16\"");
  EXPECT_CONTAINS(parse_error("[compression]\ngradients = \"fp16\"\n"),
                  "compression.gradients must be \"none\", \"bf16\", \"powersgd\" or \"onebit\", "
                  "got \"fp16\"");
  EXPECT_CONTAINS(parse_error("[compression]\nzero_gather = \"int4\"\n"),
                  "compression.zero_gather must be \"none\", \"bf16\" or \"int8\", got \"int4\"");
  EXPECT_CONTAINS(parse_error("[parallel]\ngrad_reduce_dtype = \"bf16\"\n"),
                  "key 'parallel.grad_reduce_dtype' in run.toml:2:1 was replaced by "
                  "compression.gradients (\"bf16\"");
  // The key it replaced names its successor.
  EXPECT_CONTAINS(parse_error("[train]\ndtype = \"float64\"\n"),
                  "key 'train.dtype' in run.toml:2:1 was replaced by train.precision");
  EXPECT_CONTAINS(parse_error("[data]\nsource = \"web\"\n"),
                  "data.source must be \"corpus\", \"synthetic\" or \"shards\", got \"web\"");
  for (const char* schedule : {"gpipe", "1f1b", "interleaved-1f1b", "zb-h1", "zb-v"}) {
    const Config config =
        parse_config(str("[parallel]\npp_schedule = \"", schedule, "\"\n"), "run.toml");
    EXPECT_EQ(name_of(config.parallel.schedule), std::string(schedule));
    EXPECT_CONTAINS(to_toml(config), str("schedule = \"", schedule, "\"\n"));
  }
}

TEST(ConfigParse, SyntaxErrorsNameFileLineAndColumn) {
  const std::string message = parse_error("[model]\nd_model = 64\nn_heads = = 4\n");
  EXPECT_CONTAINS(message, "run.toml:3:");
  EXPECT_CONTAINS(message, "TOML syntax error");
  EXPECT_CONTAINS(parse_error("[train]\nsteps = 1\nsteps = 2\n"), "run.toml:3:");
  EXPECT_CONTAINS(parse_error("[model\n"), "run.toml:1:");
}

TEST(ConfigParse, LoadConfigReadsAFileAndNamesItInErrors) {
  testing::TempDir dir;
  const std::string path = dir.file("run.toml");
  std::ofstream(path) << "[model]\nd_model = 32\n";
  EXPECT_EQ(load_config(path).model.d_model, 32);
  EXPECT_EQ(load_config(path, {"model.d_model=16"}).model.d_model, 16);

  std::ofstream(path) << "[model]\nd_modle = 32\n";
  EXPECT_CONTAINS(user_error([&] { load_config(path); }),
                  "unknown key 'model.d_modle' in " + path + ":2:1");
  EXPECT_CONTAINS(user_error([&] { load_config(dir.file("missing.toml")); }),
                  "cannot read config file '" + dir.file("missing.toml") + "'");
}

// Every key set away from its default, with doubles that print awkwardly and strings that
// need escapes.
Config unusual_config() {
  Config config;
  config.model = {1000,
                  96,
                  3,
                  6,
                  2,
                  20,
                  200,
                  33,
                  PositionEncoding::rope,
                  Norm::rmsnorm,
                  Activation::swiglu,
                  AttentionKernel::eager,
                  false,
                  1.0 / 3.0,
                  1e-300,
                  123456.789,
                  MoeConfig{9, 1, 3, 1.0 / 7.0, 0.0, 1e-3, Activation::swiglu}};
  config.model_init = "models/with \"quotes\"";
  config.parallel.auto_layout = true;
  config.parallel.tp = 2;
  config.parallel.pp = 3;
  config.parallel.dp = 4;
  config.parallel.cp = 5;
  config.parallel.cp_comm = ContextParallelComm::all_to_all;
  config.parallel.ep = 6;
  config.parallel.zero = 2;
  config.parallel.bucket_mb = 0.75;
  config.parallel.sequence_parallel = true;
  config.parallel.schedule = PipelineSchedule::interleaved_one_f_one_b;
  config.parallel.vpp = 7;
  config.parallel.microbatches = 8;
  config.parallel.pp_layers.layers = {-1, 0, 4000000000};
  config.parallel.comm_timeout_s = 0.1;
  config.compression.gradients = GradientCompression::onebit;
  config.compression.start_step = 3;
  config.compression.powersgd_rank = 9;
  config.compression.zero_gather = GatherCompression::int8;
  config.train.steps = 11;
  config.train.global_batch = 12;
  config.parallel.micro_batch = 13;
  config.train.lr = 0.1 + 0.2;
  config.train.min_lr = 5e-324;
  config.train.warmup_steps = 14;
  config.train.weight_decay = 0.0;
  config.train.beta1 = 0.5;
  config.train.beta2 = 0.999;
  config.train.eps = 1e-12;
  config.train.grad_clip = 100;
  config.train.seed = static_cast<uint64_t>(std::numeric_limits<int64_t>::max());
  config.train.eval_every = 15;
  config.train.eval_batches = 16;
  config.train.precision = Precision::fp16;
  config.train.recompute = Recompute::selective;
  config.train.recompute_layers = 3;
  config.train.threads = 17;
  config.data = {DataSource::shards,
                 "dir with \"quotes\"\\back\tslash\nline\x01 caf\xc3\xa9",
                 "bpe",
                 0.25,
                 true,
                 LossMask::completion};
  config.checkpoint = {"ckpt", 18, "none", 0, true};
  config.fault = {0, 2.5, 600.0, true, 3, true};
  config.log = {"", true, ProgressDisplay::lines, 19, true, 21};
  config.serve = {"0.0.0.0", 0, 0.5, 7, 3, 2.5, 0.75, 20, false};
  return config;
}

TEST(ConfigParse, RoundTripIsExact) {
  for (const Config& config : {Config{}, unusual_config()}) {
    const std::string text = to_toml(config);
    const Config back = parse_config(text, "to_toml output");
    EXPECT_TRUE(back == config) << text << "\nread back as\n" << to_toml(back);
    EXPECT_EQ(to_toml(back), text);
  }
  EXPECT_EQ(parse_config(to_toml(unusual_config()), "x").train.lr, 0.1 + 0.2);
  Config config;
  config.train.grad_clip = std::numeric_limits<double>::infinity();
  config.model.init_std = std::nan("");
  const Config back = parse_config(to_toml(config), "x");
  EXPECT_TRUE(std::isinf(back.train.grad_clip));
  EXPECT_TRUE(std::isnan(back.model.init_std));
}

// parallel.pp_layers = "auto" reads back as itself; `strata config` prints the list it resolves
// to (plan/stage_split.h), which reads back as that list.
TEST(ConfigParse, PipelineLayersAutoRoundTrip) {
  const Config automatic = parse_config("[parallel]\npp_layers = \"auto\"\n", "auto.toml");
  EXPECT_EQ(automatic.parallel.pp_layers, (PipelineLayers{true, {}}));
  EXPECT_NE(to_toml(automatic).find("pp_layers = \"auto\"\n"), std::string::npos);
  EXPECT_TRUE(parse_config(to_toml(automatic), "x") == automatic);
  Config resolved = automatic;
  resolved.parallel.pp_layers = PipelineLayers{false, {3, 1}};
  EXPECT_NE(to_toml(resolved).find("pp_layers = [3, 1]\n"), std::string::npos);
  EXPECT_TRUE(parse_config(to_toml(resolved), "x") == resolved);
  EXPECT_FALSE(resolved == automatic);
  EXPECT_CONTAINS(user_error([] { parse_config("[parallel]\npp_layers = \"even\"\n", "x.toml"); }),
                  "parallel.pp_layers must be an array of integers or \"auto\", got string "
                  "\"even\" (x.toml:2:13)");
}

// parallel.schedule's old name is still read (configs saved in checkpoints use it); it is
// written under the new one.
TEST(ConfigParse, OldScheduleKeyIsRead) {
  const Config file = parse_config("[parallel]\npp_schedule = \"zb-h1\"\n", "old.toml");
  EXPECT_EQ(file.parallel.schedule, PipelineSchedule::zb_h1);
  const Config set = parse_config("", "x", {"parallel.pp_schedule=gpipe"});
  EXPECT_EQ(set.parallel.schedule, PipelineSchedule::gpipe);
  const std::string text = to_toml(file);
  EXPECT_NE(text.find("schedule = \"zb-h1\""), std::string::npos) << text;
  EXPECT_EQ(text.find("pp_schedule"), std::string::npos) << text;
}

TEST(ConfigParse, NestedMoeTableAndOverrides) {
  const Config config =
      parse_config("[model]\nd_model = 32\n[model.moe]\nnum_experts = 8\ntop_k = 1\n", "x.toml",
                   {"model.moe.capacity_factor=1.5", "model.moe.activation=swiglu"});
  EXPECT_EQ(config.model.d_model, 32);
  EXPECT_EQ(config.model.moe.num_experts, 8);
  EXPECT_EQ(config.model.moe.top_k, 1);
  EXPECT_EQ(config.model.moe.capacity_factor, 1.5);
  EXPECT_EQ(config.model.moe.activation, Activation::swiglu);
  // Inline tables are TOML tables too.
  EXPECT_EQ(parse_config("[model]\nmoe = { every = 2 }\n", "x").model.moe.every, 2);
  EXPECT_CONTAINS(user_error([] { parse_config("[model.moe]\nexperts = 4\n", "x.toml"); }),
                  "unknown key 'model.moe.experts' in x.toml:2:1");
  EXPECT_CONTAINS(user_error([] { parse_config("", "x", {"model.moe.top_k=two"}); }),
                  "model.moe.top_k must be an integer");
}

TEST(ConfigParse, ToTomlPrintsEverySectionAndKeyInOrder) {
  const std::string text = to_toml(Config{});
  size_t position = 0;
  std::string section;
  for (const std::string& full_name : config_keys()) {
    const std::string key_section = full_name.substr(0, full_name.rfind('.'));
    if (key_section != section) {
      section = key_section;
      position = text.find("[" + section + "]\n", position);
      ASSERT_NE(position, std::string::npos) << "no [" << section << "] after the previous one";
    }
    position = text.find("\n" + full_name.substr(section.size() + 1) + " = ", position);
    ASSERT_NE(position, std::string::npos) << full_name << " is missing or out of order:\n" << text;
  }
  EXPECT_CONTAINS(text, "[model]\nvocab_size = 256\n");
  EXPECT_CONTAINS(text, "\nlr = 0.0003\n");
  EXPECT_CONTAINS(text, "\nrope_theta = 10000.0\n");
  EXPECT_CONTAINS(text, "\npos = \"learned\"\n");
  EXPECT_CONTAINS(text, "\ntie_embeddings = true\n");
  EXPECT_CONTAINS(text, "\ndir = \"\"\n");
  const std::vector<std::string> keys = config_keys();
  EXPECT_CONTAINS(text, "[model.moe]\nnum_experts = 0\n");
  EXPECT_CONTAINS(text, "\ninit = \"\"\n");
  EXPECT_EQ(keys.size(), 93u);
  EXPECT_EQ(keys.front(), "model.vocab_size");
  EXPECT_EQ(keys.back(), "serve.threads");
  EXPECT_CONTAINS(text, "[serve]\nhost = \"127.0.0.1\"\nport = 8000\n");
  EXPECT_EQ(std::set<std::string>(keys.begin(), keys.end()).size(), keys.size());
}

// The TOML spelling of one key's value in to_toml output.
std::string value_in(const std::string& text, const std::string& full_name) {
  const std::string section = full_name.substr(0, full_name.rfind('.'));  // model.moe.top_k
  const std::string prefix = "\n" + full_name.substr(section.size() + 1) + " = ";
  const size_t start = text.find(prefix, text.find("[" + section + "]")) + prefix.size();
  return text.substr(start, text.find('\n', start) - start);
}

TEST(ConfigParse, EqualityComparesEveryKey) {
  // unusual_config differs from the defaults in every key.
  const std::string unusual = to_toml(unusual_config());
  for (const std::string& full_name : config_keys()) {
    const std::string setting = full_name + "=" + value_in(unusual, full_name);
    const Config changed = parse_config("", "x", {setting});
    EXPECT_TRUE(changed != Config{}) << setting;
    EXPECT_EQ(value_in(to_toml(changed), full_name), value_in(unusual, full_name));
  }
}

}  // namespace
}  // namespace strata
