// validate_config: every cross-key rule, with the keys and numbers each message must quote;
// resolution of dp = -1 and microbatches = 0.
#include <gtest/gtest.h>

#include "expect_error.h"
#include "strata/core/config.h"

namespace strata {
namespace {

using testing::user_error;

Config with(const std::vector<std::string>& overrides) {
  return parse_config("", "run.toml", overrides);
}

std::string validate_error(const std::vector<std::string>& overrides, int64_t world_size = 1) {
  return user_error([&] { validate_config(with(overrides), world_size); });
}

TEST(ConfigValidate, DefaultsAreValidOnOneRank) {
  const Config config = validate_config(Config{}, 1);
  EXPECT_EQ(config.parallel.dp, 1);
  EXPECT_EQ(config.parallel.microbatches, 1);
}

TEST(ConfigValidate, AutoLayoutLeavesTheLayoutToThePlanner) {
  // Any number of ranks and batch: the planner picks sizes and micro batch that divide.
  const Config config = validate_config(with({"parallel.auto=true", "train.global_batch=6"}), 4);
  EXPECT_TRUE(config.parallel.auto_layout);
  EXPECT_EQ(config.parallel.dp, -1) << "left for the planner";
  const std::string message =
      validate_error({"parallel.auto=true", "parallel.tp=2", "parallel.schedule=zb-h1"}, 4);
  EXPECT_CONTAINS(message,
                  "parallel.auto = true chooses the layout, but the config also sets "
                  "parallel.tp = 2, parallel.schedule = \"zb-h1\"; remove those keys");
  EXPECT_CONTAINS(validate_error({"parallel.auto=true", "train.lr=-1"}, 2), "train.lr");
}

// parallel.pp_layers = "auto" is checked like a split (a layer per stage), never with a list,
// and goes with parallel.auto, which picks the stages it then splits; serving takes lists only.
TEST(ConfigValidate, PipelineLayersAuto) {
  const Config config =
      validate_config(with({"parallel.pp=2", "parallel.pp_layers=auto", "model.n_layers=4"}), 2);
  EXPECT_TRUE(config.parallel.pp_layers.automatic) << "resolved at the start, not here";
  EXPECT_CONTAINS(validate_error({"parallel.pp=4", "parallel.pp_layers=auto", "model.n_layers=3",
                                  "train.global_batch=8", "train.micro_batch=1"},
                                 4),
                  "parallel.pp_layers = \"auto\" needs a layer per pipeline stage, but "
                  "model.n_layers (3) < parallel.pp * parallel.vpp (4)");
  Config both = with({"parallel.pp=2", "model.n_layers=4"});
  both.parallel.pp_layers = PipelineLayers{true, {3, 1}};
  EXPECT_CONTAINS(user_error([&] { validate_config(both, 2); }),
                  "parallel.pp_layers is both \"auto\" and a list of 2 layer counts");
  EXPECT_NO_THROW(validate_config(
      with({"parallel.auto=true", "parallel.pp_layers=auto", "train.global_batch=4"}), 2));
  EXPECT_CONTAINS(validate_error({"parallel.auto=true", "parallel.pp_layers=[1, 1]"}, 2),
                  "parallel.auto = true chooses the layout, but the config also sets "
                  "parallel.pp_layers");
  EXPECT_CONTAINS(user_error([] {
                    validate_serving_config(with({"parallel.pp=2", "parallel.pp_layers=auto"}), 2);
                  }),
                  "strata serve takes the layers of each stage as a list");
}

TEST(ConfigValidate, DataParallelSize) {
  for (int64_t world : {1, 2, 3, 4, 8}) {
    const Config config =
        validate_config(with({"train.global_batch=24", "train.micro_batch=1"}), world);
    EXPECT_EQ(config.parallel.dp, world);
    EXPECT_EQ(config.parallel.microbatches, 24 / world) << "world " << world;
  }
  const Config layout = validate_config(
      with({"parallel.tp=2", "parallel.pp=2", "train.global_batch=6", "train.micro_batch=2"}), 12);
  EXPECT_EQ(layout.parallel.dp, 3);
  EXPECT_EQ(layout.parallel.microbatches, 1);
  EXPECT_CONTAINS(validate_error({"parallel.tp=2"}, 3),
                  "parallel.tp*pp*cp = 2*1*1 = 2 does not divide 3 ranks: parallel.dp = -1 takes "
                  "the ranks left over");
  EXPECT_CONTAINS(validate_error({"parallel.tp=2", "parallel.dp=3"}, 4),
                  "parallel.tp*pp*dp*cp = 2*1*3*1 = 6 does not match 4 ranks");
  EXPECT_CONTAINS(validate_error({"parallel.dp=2", "train.micro_batch=4"}, 3),
                  "parallel.tp*pp*dp*cp = 1*1*2*1 = 2 does not match 3 ranks");
  const Config explicit_dp = validate_config(with({"parallel.dp=2", "train.micro_batch=4"}), 2);
  EXPECT_EQ(explicit_dp.parallel.dp, 2) << "plain data parallelism is implemented";
  EXPECT_EQ(explicit_dp.parallel.microbatches, 1);
}

TEST(ConfigValidate, ModelShapeRules) {
  EXPECT_CONTAINS(validate_error({"model.d_model=100", "model.n_heads=12"}),
                  "model.d_model (100) must be divisible by model.n_heads (12)");
  EXPECT_CONTAINS(validate_error({"model.d_model=120", "model.n_heads=12", "model.n_kv_heads=5"}),
                  "model.n_heads (12) must be divisible by model.n_kv_heads (5)");
  EXPECT_CONTAINS(validate_error({"model.d_model=14", "model.n_heads=2", "model.pos=rope"}),
                  "model.pos = \"rope\" needs an even head dimension (d_model / n_heads = 14 / 2 "
                  "= 7)");
  validate_config(with({"model.d_model=14", "model.n_heads=2"}), 1);  // odd is fine unrotated
  // An explicit head width frees d_model from the head count.
  const Config wide = validate_config(
      with({"model.d_model=100", "model.n_heads=12", "model.head_dim=32", "model.pos=rope"}), 1);
  EXPECT_EQ(wide.model.head_dim(), 32);
  EXPECT_EQ(wide.model.shape().q_width(), 12 * 32);
  EXPECT_CONTAINS(validate_error({"model.head_dim=-1"}),
                  "model.head_dim (-1) must be >= 0 (0 means model.d_model / model.n_heads)");
  EXPECT_CONTAINS(validate_error({"model.head_dim=7", "model.pos=rope"}),
                  "model.pos = \"rope\" needs an even head dimension (model.head_dim = 7)");
  validate_config(with({"model.d_model=120", "model.n_heads=12", "model.n_kv_heads=4"}), 1);
}

TEST(ConfigValidate, ModelParallelRules) {
  EXPECT_CONTAINS(validate_error({"model.d_model=120", "model.n_heads=12", "parallel.tp=5"}, 5),
                  "parallel.tp (5) must divide model.n_heads (12)");
  // kv heads not divisible by tp are replicated over tp: a valid layout.
  validate_config(with({"model.n_kv_heads=2", "parallel.tp=4"}), 4);
  EXPECT_CONTAINS(validate_error({"model.d_ff=30", "parallel.tp=4"}, 4),
                  "parallel.tp (4) must divide the MLP width 30");
  EXPECT_CONTAINS(
      validate_error({"model.seq_len=63", "parallel.tp=2", "parallel.sequence_parallel=true"}, 2),
      "parallel.sequence_parallel = true needs parallel.tp (2) to divide "
      "model.seq_len (63)");
  EXPECT_CONTAINS(validate_error({"parallel.sequence_parallel=true"}),
                  "parallel.sequence_parallel = true needs parallel.tp > 1");
  // With context parallelism the sequence is split over cp, then each piece over tp.
  EXPECT_CONTAINS(validate_error({"model.seq_len=6", "parallel.tp=2", "parallel.cp=2",
                                  "parallel.sequence_parallel=true"},
                                 4),
                  "parallel.sequence_parallel = true needs parallel.tp * parallel.cp = 2 * 2 = 4 "
                  "to divide model.seq_len (6)");
  validate_config(with({"model.seq_len=8", "parallel.tp=2", "parallel.cp=2",
                        "parallel.sequence_parallel=true"}),
                  4);
  // Context parallelism cuts the sequence into 2 * cp chunks (load balance).
  EXPECT_CONTAINS(validate_error({"model.seq_len=100", "parallel.cp=3"}, 3),
                  "parallel.cp (3) needs model.seq_len (100) divisible by 2 * parallel.cp = 6");
  EXPECT_CONTAINS(validate_error({"model.seq_len=100", "parallel.cp=3"}, 3),
                  "parallel.cp = 1, 2, 5 or 10, or model.seq_len = 96 or 102 would work");
  EXPECT_CONTAINS(validate_error({"model.seq_len=10", "parallel.cp=2"}, 2),
                  "divisible by 2 * parallel.cp = 4");
  validate_config(with({"model.seq_len=12", "parallel.cp=3"}), 3);
  // all-to-all re-shards heads over cp: 4 heads over tp 2 leave 2 per rank, not divisible by 4.
  EXPECT_CONTAINS(
      validate_error({"parallel.tp=2", "parallel.cp=4", "parallel.cp_comm=all-to-all"}, 8),
      "parallel.cp_comm = \"all-to-all\" re-shards each tp rank's 2 query heads and 2 kv heads "
      "(model.n_heads = 4, model.n_kv_heads = 4, over parallel.tp = 2) over parallel.cp (4)");
  EXPECT_CONTAINS(
      validate_error({"parallel.tp=2", "parallel.cp=4", "parallel.cp_comm=all-to-all"}, 8),
      "parallel.cp = 1 or 2 or parallel.cp_comm = \"ring\" would work");
  // Fewer kv heads than cp: replicated, when cp is a multiple of them.
  validate_config(with({"model.n_heads=8", "model.n_kv_heads=2", "model.d_model=64",
                        "parallel.cp=4", "parallel.cp_comm=all-to-all"}),
                  4);
  EXPECT_CONTAINS(
      validate_error({"model.n_heads=12", "model.n_kv_heads=4", "model.d_model=96",
                      "model.seq_len=96", "parallel.cp=6", "parallel.cp_comm=all-to-all"},
                     6),
      "cp and the kv heads must divide one another");
  validate_config(with({"parallel.cp=4", "parallel.cp_comm=all-gather"}), 4);
  EXPECT_CONTAINS(validate_error({"parallel.cp=2", "model.attention=eager"}, 2),
                  "parallel.cp = 2 needs model.attention = \"blockwise\"");
  EXPECT_CONTAINS(validate_error({"parallel.pp=4"}, 4),
                  "model.n_layers (2) must be >= parallel.pp * parallel.vpp = 4 * 1 = 4");
  EXPECT_CONTAINS(validate_error({"parallel.pp=2", "parallel.vpp=2"}, 2),
                  "parallel.vpp (2) > 1 needs parallel.schedule = \"interleaved-1f1b\"");
  EXPECT_CONTAINS(validate_error({"parallel.pp=2", "parallel.schedule=interleaved-1f1b"}, 2),
                  "parallel.schedule = \"interleaved-1f1b\" needs parallel.vpp >= 2");
  EXPECT_CONTAINS(validate_error({"parallel.schedule=interleaved-1f1b", "parallel.vpp=2"}),
                  "parallel.schedule = \"interleaved-1f1b\" needs parallel.pp > 1");
  EXPECT_CONTAINS(validate_error({"parallel.vpp=2"}), "parallel.vpp (2) > 1 needs parallel.pp > 1");
  EXPECT_CONTAINS(
      validate_error(
          {"model.n_layers=4", "parallel.pp=2", "parallel.vpp=2",
           "parallel.schedule=interleaved-1f1b", "train.global_batch=3", "train.micro_batch=1"},
          2),
      "parallel.schedule = \"interleaved-1f1b\" needs parallel.microbatches (3) to be a "
      "multiple of parallel.pp (2)");
  EXPECT_CONTAINS(validate_error({"parallel.ep=3", "train.micro_batch=2"}, 4),
                  "parallel.ep (3) must divide parallel.dp*cp = 4*1 = 4");
  EXPECT_CONTAINS(validate_error({"parallel.ep=2", "train.micro_batch=2"}, 4),
                  "parallel.ep (2) > 1 needs a mixture-of-experts model: set "
                  "model.moe.num_experts");
  EXPECT_CONTAINS(
      validate_error({"parallel.ep=4", "model.moe.num_experts=6", "train.micro_batch=2"}, 4),
      "parallel.ep (4) must divide model.moe.num_experts (6)");
  validate_config(with({"parallel.ep=2", "model.moe.num_experts=4", "train.micro_batch=2"}), 4);
  validate_config(with({"parallel.ep=2", "model.moe.num_experts=4", "train.micro_batch=2"}), 4);
}

TEST(ConfigValidate, MixtureOfExpertsRules) {
  EXPECT_CONTAINS(validate_error({"model.moe.num_experts=-1"}),
                  "model.moe.num_experts (-1) must be >= 0 (0 = a dense model)");
  EXPECT_CONTAINS(validate_error({"model.moe.num_experts=4", "model.moe.top_k=3"}),
                  "model.moe.top_k (3) must be 1 or 2");
  EXPECT_CONTAINS(validate_error({"model.moe.num_experts=1", "model.moe.top_k=2"}),
                  "model.moe.top_k (2) must be <= model.moe.num_experts (1)");
  EXPECT_CONTAINS(validate_error({"model.moe.num_experts=4", "model.moe.every=0"}),
                  "model.moe.every (0) must be >= 1");
  EXPECT_CONTAINS(validate_error({"model.moe.num_experts=4", "model.moe.every=3"}),
                  "model.moe.every (3) must be <= model.n_layers (2)");
  EXPECT_CONTAINS(validate_error({"model.moe.num_experts=4", "model.moe.capacity_factor=-0.5"}),
                  "model.moe.capacity_factor (-0.5) must be >= 0.0 (0 = dropless)");
  EXPECT_CONTAINS(validate_error({"model.moe.num_experts=4", "model.moe.aux_loss_coef=-1"}),
                  "model.moe.aux_loss_coef (-1.0) must be >= 0.0");
  EXPECT_CONTAINS(validate_error({"model.moe.num_experts=4", "model.moe.z_loss_coef=-1"}),
                  "model.moe.z_loss_coef (-1.0) must be >= 0.0");
  EXPECT_CONTAINS(validate_error({"model.moe.num_experts=4", "model.moe.activation=relu"}),
                  "model.moe.activation must be \"gelu\" or \"swiglu\", got \"relu\"");
  // The [model.moe] keys are ignored (and not checked) while the model is dense.
  EXPECT_NO_THROW(validate_config(with({"model.moe.top_k=3"}), 1));
}

TEST(ConfigValidate, BatchRules) {
  const std::string message =
      validate_error({"parallel.dp=2", "train.global_batch=10", "train.micro_batch=4"}, 2);
  EXPECT_CONTAINS(message,
                  "train.global_batch (10) must be divisible by parallel.dp * train.micro_batch "
                  "= 2*4 = 8; train.global_batch = 8 or 16, or train.micro_batch = 1 or 5 would "
                  "work");
  EXPECT_CONTAINS(validate_error({"train.global_batch=3", "train.micro_batch=4"}),
                  "train.global_batch = 4, or train.micro_batch = 1 or 3 would work");
  EXPECT_CONTAINS(validate_error({"train.global_batch=9", "train.micro_batch=2"}, 2),
                  "= 2*2 = 4 (dp = -1 resolved to the ranks left over); train.global_batch = 8 "
                  "or 12 would work");
  EXPECT_EQ(validate_config(with({"train.micro_batch=2"}), 1).parallel.microbatches, 4);
  EXPECT_EQ(validate_config(with({"train.micro_batch=2", "parallel.microbatches=4"}), 1)
                .parallel.microbatches,
            4);
  EXPECT_CONTAINS(validate_error({"train.micro_batch=4", "parallel.microbatches=3"}),
                  "parallel.microbatches (3) must equal train.global_batch / (parallel.dp * "
                  "train.micro_batch) = 8 / (1*4) = 2");
}

TEST(ConfigValidate, EnumsListTheAllowedValues) {
  struct Case {
    std::string setting, expected;
  };
  const std::vector<Case> cases = {
      {"model.pos=alibi", "model.pos must be \"learned\" or \"rope\", got \"alibi\""},
      {"model.norm=batchnorm",
       "model.norm must be \"layernorm\" or \"rmsnorm\", got \"batchnorm\""},
      {"model.activation=relu", "model.activation must be \"gelu\" or \"swiglu\", got \"relu\""},
      {"parallel.schedule=zb-h2",
       "parallel.schedule must be \"gpipe\", \"1f1b\", \"interleaved-1f1b\", \"zb-h1\" or "
       "\"zb-v\", got \"zb-h2\""},
      {"data.source=web",
       "data.source must be \"corpus\", \"synthetic\" or \"shards\", got \"web\""},
      {"checkpoint.resume=",
       "checkpoint.resume must be \"auto\", \"none\" or a checkpoint "
       "directory, got \"\""},
      {"log.progress=fancy",
       "log.progress must be \"auto\", \"bar\", \"lines\" or \"none\", got \"fancy\""},
      {"train.precision=float64",
       "train.precision must be \"fp32\", \"bf16\", \"fp16\" or \"fp64\", got \"float64\""},
  };
  for (const Case& c : cases) EXPECT_CONTAINS(validate_error({c.setting}), c.expected);
  for (const char* ok :
       {"model.pos=rope", "model.norm=rmsnorm", "model.activation=swiglu",
        "parallel.schedule=gpipe", "parallel.schedule=zb-h1", "data.source=synthetic",
        "checkpoint.resume=none", "checkpoint.resume=runs/x/step_10", "log.progress=none",
        "train.precision=fp64", "train.precision=bf16", "train.precision=fp16"}) {
    EXPECT_NO_THROW(validate_config(with({ok}), 1)) << ok;
  }
}

TEST(ConfigValidate, SizesAndRanges) {
  struct Case {
    std::string setting, expected;
  };
  const std::vector<Case> cases = {
      {"model.vocab_size=1", "model.vocab_size (1) must be >= 2"},
      {"model.d_model=0", "model.d_model (0) must be >= 1"},
      {"model.n_layers=0", "model.n_layers (0) must be >= 1"},
      {"model.n_heads=0", "model.n_heads (0) must be >= 1"},
      {"model.n_kv_heads=-1", "model.n_kv_heads (-1) must be >= 0"},
      {"model.d_ff=-1", "model.d_ff (-1) must be >= 0"},
      {"model.seq_len=1", "model.seq_len (1) must be >= 2"},
      {"model.init_std=0", "model.init_std (0.0) must be > 0"},
      {"model.norm_eps=-1e-5", "model.norm_eps (-1e-05) must be > 0"},
      {"model.rope_theta=0", "model.rope_theta (0.0) must be > 0"},
      {"parallel.tp=0", "parallel.tp (0) must be >= 1"},
      {"parallel.pp=0", "parallel.pp (0) must be >= 1"},
      {"parallel.cp=0", "parallel.cp (0) must be >= 1"},
      {"parallel.ep=0", "parallel.ep (0) must be >= 1"},
      {"parallel.vpp=0", "parallel.vpp (0) must be >= 1"},
      {"parallel.dp=0", "parallel.dp (0) must be >= 1, or -1"},
      {"parallel.dp=-2", "parallel.dp (-2) must be >= 1, or -1"},
      {"parallel.zero=4", "parallel.zero (4) must be 0, 1, 2 or 3"},
      {"parallel.zero=-1", "parallel.zero (-1) must be 0, 1, 2 or 3"},
      {"parallel.microbatches=-1", "parallel.microbatches (-1) must be >= 0"},
      {"parallel.comm_timeout_s=0", "parallel.comm_timeout_s (0.0) must be > 0"},
      {"parallel.bucket_mb=0", "parallel.bucket_mb (0.0) must be > 0"},
      {"parallel.bucket_mb=-1", "parallel.bucket_mb (-1.0) must be > 0"},
      {"train.steps=0", "train.steps (0) must be >= 1"},
      {"train.global_batch=0", "train.global_batch (0) must be >= 1"},
      {"train.micro_batch=0", "train.micro_batch (0) must be >= 1"},
      {"train.min_lr=-1", "train.min_lr (-1.0) must be >= 0.0"},
      {"train.lr=1e-5", "train.lr (1e-05) must be >= train.min_lr (3e-05)"},
      {"train.lr=nan", "train.lr (nan) must be >= train.min_lr (3e-05)"},
      {"train.warmup_steps=-1", "train.warmup_steps (-1) must be >= 0"},
      {"train.warmup_steps=200", "train.warmup_steps (200) must be <= train.steps (100)"},
      {"train.weight_decay=-0.1", "train.weight_decay (-0.1) must be >= 0.0"},
      {"train.beta1=1", "train.beta1 (1.0) must be in [0, 1)"},
      {"train.beta2=-0.5", "train.beta2 (-0.5) must be in [0, 1)"},
      {"train.eps=0", "train.eps (0.0) must be > 0"},
      {"train.grad_clip=-1", "train.grad_clip (-1.0) must be >= 0.0"},
      {"train.eval_every=-1", "train.eval_every (-1) must be >= 0"},
      {"train.eval_batches=0", "train.eval_batches (0) must be >= 1"},
      {"train.threads=-1", "train.threads (-1) must be >= 0"},
      {"data.eval_fraction=1", "data.eval_fraction (1.0) must be in [0, 1)"},
      {"data.tokenizer=", "data.tokenizer must not be empty"},
      {"checkpoint.every=-1", "checkpoint.every (-1) must be >= 0"},
      {"checkpoint.keep=-1", "checkpoint.keep (-1) must be >= 0"},
      {"fault.max_restarts=-1", "fault.max_restarts (-1) must be >= 0 (0 = no restarts)"},
      {"fault.restart_backoff_s=-1", "fault.restart_backoff_s (-1.0) must be >= 0.0"},
      {"fault.step_timeout_s=-5", "fault.step_timeout_s (-5.0) must be >= 0.0"},
      {"fault.min_hosts=0", "fault.min_hosts (0) must be >= 1"},
      {"log.dir=", "log.dir must not be empty"},
      {"log.every=0", "log.every (0) must be >= 1"},
      {"log.profile_step=-1", "log.profile_step (-1) must be a step of the run"},
      {"log.profile_step=1000000000",
       "log.profile_step (1000000000) must be a step of the run, 1 to"},
      {"serve.host=", "serve.host must not be empty"},
      {"serve.port=65536", "serve.port (65536) must be in [0, 65535]"},
      {"serve.port=-1", "serve.port (-1) must be in [0, 65535]"},
      {"serve.kv_cache_mb=0", "serve.kv_cache_mb (0.0) must be > 0"},
      {"serve.max_batch_tokens=0", "serve.max_batch_tokens (0) must be >= 1"},
      {"serve.max_queue=0", "serve.max_queue (0) must be >= 1"},
      {"serve.request_timeout_s=0", "serve.request_timeout_s (0.0) must be > 0"},
      {"serve.max_request_mb=0", "serve.max_request_mb (0.0) must be > 0"},
  };
  for (const Case& c : cases) EXPECT_CONTAINS(validate_error({c.setting}), c.expected);
}

// Overrides with micro batches of one, so that any dp divides the default global batch.
std::vector<std::string> batch_of_ones(std::vector<std::string> settings) {
  settings.push_back("train.micro_batch=1");
  return settings;
}

TEST(ConfigValidate, Compression) {
  auto validate_error = [](const std::vector<std::string>& settings, int64_t world) {
    return ::strata::validate_error(batch_of_ones(settings), world);
  };
  // Each problem names the key and what to change.
  EXPECT_CONTAINS(
      validate_error({"compression.gradients=powersgd", "compression.powersgd_rank=0"}, 2),
      "compression.powersgd_rank (0) must be >= 1");
  EXPECT_CONTAINS(validate_error({"compression.gradients=onebit", "compression.start_step=101"}, 2),
                  "compression.start_step (101) must be <= train.steps (100)");
  EXPECT_CONTAINS(validate_error({"compression.start_step=-2"}, 2),
                  "compression.start_step (-2) must be >= 0, or -1 for the default");
  EXPECT_CONTAINS(validate_error({"compression.gradients=onebit", "compression.start_step=0"}, 2),
                  "compression.start_step (0) must be >= 1");
  for (const char* mode : {"bf16", "powersgd", "onebit"}) {
    EXPECT_CONTAINS(validate_error({str("compression.gradients=", mode)}, 1),
                    str("compression.gradients = \"", mode,
                        "\" compresses the data-parallel gradient exchange, but dp x cp = 1 (dp 1, "
                        "cp 1) has none; run on more data-parallel ranks or set "
                        "compression.gradients = \"none\""));
  }
  // tp takes both ranks: dp = 1.
  EXPECT_CONTAINS(validate_error({"compression.gradients=powersgd", "parallel.tp=2"}, 2),
                  "but dp x cp = 1 (dp 1, cp 1)");
  EXPECT_CONTAINS(validate_error({"compression.gradients=bf16", "train.precision=fp64"}, 2),
                  "compression.gradients = \"bf16\" needs train.precision");
  EXPECT_CONTAINS(validate_error({"compression.gradients=powersgd", "train.precision=fp16"}, 2),
                  "compression.gradients = \"powersgd\" keeps an error-feedback residual");
  EXPECT_CONTAINS(validate_error({"compression.zero_gather=int8", "parallel.zero=1"}, 2),
                  "compression.zero_gather = \"int8\" compresses ZeRO-3's parameter all-gathers "
                  "and needs parallel.zero = 3 (got 1)");
  EXPECT_CONTAINS(validate_error({"compression.zero_gather=bf16", "parallel.zero=3"}, 1),
                  "compression.zero_gather = \"bf16\" needs data-parallel ranks");
  EXPECT_CONTAINS(
      validate_error({"compression.zero_gather=bf16", "parallel.zero=3", "train.precision=fp16"},
                     2),
      "compression.zero_gather = \"bf16\" needs train.precision \"fp32\" or \"bf16\"");
  // Defaults of start_step: none and bf16 compress from step 0, powersgd after 10% of the
  // steps, onebit after 10% but no sooner than two variance memories (1 / (1 - beta2) steps)
  // after the learning rate's warm-up, at least 1 and at most train.steps.
  auto start = [](const std::vector<std::string>& settings) {
    return validate_config(with(batch_of_ones(settings)), 2).compression.start_step;
  };
  EXPECT_EQ(start({}), 0);
  EXPECT_EQ(start({"compression.gradients=bf16"}), 0);
  EXPECT_EQ(start({"compression.gradients=powersgd"}), 10);
  EXPECT_EQ(start({"compression.gradients=onebit", "train.steps=5", "train.warmup_steps=1"}), 5);
  EXPECT_EQ(start({"compression.gradients=onebit", "train.steps=300", "train.warmup_steps=20",
                   "train.beta2=0.95"}),
            60);
  EXPECT_EQ(start({"compression.gradients=onebit", "train.steps=2000", "train.warmup_steps=0",
                   "train.beta2=0.9"}),
            200);
  EXPECT_EQ(start({"compression.gradients=onebit", "train.steps=5", "train.warmup_steps=0",
                   "train.beta2=0"}),
            2);
  EXPECT_EQ(start({"compression.gradients=powersgd", "compression.start_step=100"}), 100);
  EXPECT_NO_THROW(
      validate_config(with(batch_of_ones({"compression.gradients=onebit",
                                          "compression.zero_gather=int8", "parallel.zero=3"})),
                      2));
}

TEST(ConfigValidate, RulesBetweenSections) {
  EXPECT_CONTAINS(validate_error({"data.source=shards"}),
                  "data.source = \"shards\" needs data.path");
  validate_config(with({"data.source=shards", "data.path=/data/shards"}), 1);
  EXPECT_CONTAINS(validate_error({"train.eval_every=10", "data.eval_fraction=0"}),
                  "train.eval_every (10) needs held-out tokens: data.eval_fraction (0.0) must be "
                  "> 0");
  EXPECT_CONTAINS(validate_error({"checkpoint.every=10"}),
                  "checkpoint.every (10) needs checkpoint.dir");
  EXPECT_CONTAINS(validate_error({"data.document_mask=true", "data.source=synthetic"}),
                  "data.document_mask needs document boundaries, but data.source = "
                  "\"synthetic\" has none");
  validate_config(with({"data.document_mask=true", "data.source=corpus"}), 1);
  Config seed_too_large = Config{};
  seed_too_large.train.seed = ~uint64_t{0};
  EXPECT_CONTAINS(user_error([&] { validate_config(seed_too_large, 1); }),
                  "train.seed (18446744073709551615) must be <= 9223372036854775807");
}

TEST(ConfigValidate, EveryProblemIsReportedAtOnce) {
  const std::string message =
      validate_error({"model.vocab_size=1", "train.steps=0", "log.every=0"});
  EXPECT_CONTAINS(message, "the config has 4 problems:");
  EXPECT_CONTAINS(message, "\n  - model.vocab_size (1) must be >= 2");
  EXPECT_CONTAINS(message, "\n  - train.steps (0) must be >= 1");
  EXPECT_CONTAINS(message, "\n  - train.warmup_steps (10) must be <= train.steps (0)");
  EXPECT_CONTAINS(message, "\n  - log.every (0) must be >= 1");
  EXPECT_THROW(validate_config(Config{}, 0), InternalError);
}

TEST(ConfigValidate, ValidatedConfigRoundTrips) {
  const Config config = validate_config(with({"train.micro_batch=2"}), 2);
  const Config back = parse_config(to_toml(config), "x");
  EXPECT_TRUE(back == config);
  EXPECT_TRUE(validate_config(back, 2) == config) << "validating twice changes nothing";
}

}  // namespace
}  // namespace strata
