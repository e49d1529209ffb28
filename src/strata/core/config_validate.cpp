// Cross-key checks of a parsed config for a run on a given number of ranks, resolution of
// the derived values (dp = -1, microbatches = 0; the layout's rules are core/layout_rules.h's,
// the stage partition's core/stages.h's),
// and the one list of features this release cannot run yet. Every problem is collected, so one run
// of `strata` reports all of them.
#include <algorithm>
#include <cmath>
#include <filesystem>
#include <limits>
#include <string>
#include <type_traits>
#include <vector>

#include "strata/core/config.h"
#include "strata/core/config_keys.h"
#include "strata/core/error.h"
#include "strata/core/layout_rules.h"
#include "strata/core/stages.h"

namespace strata {
namespace {

using config_detail::format_double;
using config_detail::quote;

using Problems = std::vector<std::string>;

// Doubles print in their exact TOML spelling (3e-05, 1.0), integers as usual.
template <typename T>
std::string number(T value) {
  if constexpr (std::is_floating_point_v<T>) {
    return format_double(value);
  } else {
    return std::to_string(value);
  }
}

template <typename T>
void require_at_least(Problems& problems, const char* key, T value, T minimum,
                      const char* note = "") {
  if (!(value >= minimum)) {
    problems.push_back(str(key, " (", number(value), ") must be >= ", number(minimum), note));
  }
}

void require_positive(Problems& problems, const char* key, double value) {
  // Written so that nan fails too.
  if (!(value > 0)) problems.push_back(str(key, " (", number(value), ") must be > 0"));
}

void require_fraction(Problems& problems, const char* key, double value) {
  if (!(value >= 0 && value < 1)) {
    problems.push_back(str(key, " (", number(value), ") must be in [0, 1)"));
  }
}

void check_moe(const ModelConfig& model, Problems& problems) {
  const MoeConfig& moe = model.moe;
  require_at_least<int64_t>(problems, "model.moe.num_experts", moe.num_experts, 0,
                            " (0 = a dense model)");
  if (moe.num_experts <= 0) return;
  if (moe.top_k != 1 && moe.top_k != 2) {
    problems.push_back(str("model.moe.top_k (", moe.top_k, ") must be 1 or 2"));
  } else if (moe.top_k > moe.num_experts) {
    problems.push_back(str("model.moe.top_k (", moe.top_k, ") must be <= model.moe.num_experts (",
                           moe.num_experts, ")"));
  }
  require_at_least<int64_t>(problems, "model.moe.every", moe.every, 1,
                            " (1 = every layer is a mixture of experts)");
  if (moe.every >= 1 && model.n_layers >= 1 && moe.every > model.n_layers) {
    problems.push_back(str("model.moe.every (", moe.every, ") must be <= model.n_layers (",
                           model.n_layers, "), else no layer is a mixture of experts"));
  }
  require_at_least(problems, "model.moe.capacity_factor", moe.capacity_factor, 0.0,
                   " (0 = dropless)");
  require_at_least(problems, "model.moe.aux_loss_coef", moe.aux_loss_coef, 0.0);
  require_at_least(problems, "model.moe.z_loss_coef", moe.z_loss_coef, 0.0);
}

// model.init names a Hugging Face model directory (its contents are read by with_hf_model).
void check_model_init(const std::string& init, Problems& problems) {
  if (!init.empty() && !std::filesystem::is_regular_file(init + "/config.json")) {
    problems.push_back(
        str("model.init (\"", init, "\") must be a Hugging Face model directory: ",
            std::filesystem::is_directory(init) ? "it has no config.json" : "no such directory"));
  }
}

void check_model(const ModelConfig& model, Problems& problems) {
  require_at_least<int64_t>(problems, "model.vocab_size", model.vocab_size, 2);
  require_at_least<int64_t>(problems, "model.d_model", model.d_model, 1);
  require_at_least<int64_t>(problems, "model.n_layers", model.n_layers, 1);
  require_at_least<int64_t>(problems, "model.n_heads", model.n_heads, 1);
  require_at_least<int64_t>(problems, "model.n_kv_heads", model.n_kv_heads, 0,
                            " (0 means the same as model.n_heads)");
  require_at_least<int64_t>(problems, "model.d_ff", model.d_ff, 0, " (0 means 4 * model.d_model)");
  require_at_least<int64_t>(problems, "model.seq_len", model.seq_len, 2);
  require_positive(problems, "model.init_std", model.init_std);
  require_positive(problems, "model.norm_eps", model.norm_eps);
  require_positive(problems, "model.rope_theta", model.rope_theta);

  require_at_least<int64_t>(problems, "model.head_dim", model.head_dim_key, 0,
                            " (0 means model.d_model / model.n_heads)");
  if (model.d_model >= 1 && model.n_heads >= 1 && model.head_dim_key >= 0) {
    if (model.head_dim_key == 0 && model.d_model % model.n_heads != 0) {
      problems.push_back(str("model.d_model (", model.d_model,
                             ") must be divisible by model.n_heads (", model.n_heads,
                             "), or model.head_dim set"));
    } else if (model.pos == PositionEncoding::rope && model.head_dim() % 2 != 0) {
      problems.push_back(str("model.pos = \"rope\" needs an even head dimension (",
                             model.head_dim_key > 0
                                 ? std::string("model.head_dim")
                                 : str("d_model / n_heads = ", model.d_model, " / ", model.n_heads),
                             " = ", model.head_dim(), ")"));
    }
  }
  if (model.n_heads >= 1 && model.n_kv_heads >= 1 && model.n_heads % model.n_kv_heads != 0) {
    problems.push_back(str("model.n_heads (", model.n_heads,
                           ") must be divisible by model.n_kv_heads (", model.n_kv_heads, ")"));
  }
  check_moe(model, problems);
}

void check_train(const TrainConfig& train, Problems& problems) {
  require_at_least<int64_t>(problems, "train.steps", train.steps, 1);
  require_at_least(problems, "train.min_lr", train.min_lr, 0.0);
  if (!(train.lr >= train.min_lr)) {
    problems.push_back(str("train.lr (", number(train.lr), ") must be >= train.min_lr (",
                           number(train.min_lr), ")"));
  }
  require_at_least<int64_t>(problems, "train.warmup_steps", train.warmup_steps, 0);
  if (train.warmup_steps > train.steps) {
    problems.push_back(str("train.warmup_steps (", train.warmup_steps, ") must be <= train.steps (",
                           train.steps, ")"));
  }
  require_at_least(problems, "train.weight_decay", train.weight_decay, 0.0);
  require_fraction(problems, "train.beta1", train.beta1);
  require_fraction(problems, "train.beta2", train.beta2);
  require_positive(problems, "train.eps", train.eps);
  require_at_least(problems, "train.grad_clip", train.grad_clip, 0.0, " (0 = no clipping)");
  // TOML integers are signed 64-bit: a larger seed could not be written back by to_toml.
  const auto max_seed = static_cast<uint64_t>(std::numeric_limits<int64_t>::max());
  if (train.seed > max_seed) {
    problems.push_back(str("train.seed (", train.seed, ") must be <= ", max_seed));
  }
  require_at_least<int64_t>(problems, "train.eval_every", train.eval_every, 0, " (0 = never)");
  require_at_least<int64_t>(problems, "train.eval_batches", train.eval_batches, 1);
  require_at_least<int64_t>(problems, "train.threads", train.threads, 0,
                            " (0 = cores / ranks on this machine)");
  require_at_least<int64_t>(problems, "train.recompute_layers", train.recompute_layers, 0,
                            " (0 = every layer)");
}

void check_data(const Config& config, Problems& problems) {
  const DataConfig& data = config.data;
  if (data.source == DataSource::shards && data.path.empty()) {
    problems.push_back("data.source = \"shards\" needs data.path (the directory of token shards)");
  }
  if (data.tokenizer.empty()) problems.push_back("data.tokenizer must not be empty");
  require_fraction(problems, "data.eval_fraction", data.eval_fraction);
  if (data.document_mask && data.source == DataSource::synthetic) {
    problems.push_back(
        "data.document_mask needs document boundaries, but data.source = \"synthetic\" has "
        "none; use data.source = \"corpus\" or \"shards\", or set data.document_mask = false");
  }
  if (config.train.eval_every > 0 && !(data.eval_fraction > 0)) {
    problems.push_back(str("train.eval_every (", config.train.eval_every,
                           ") needs held-out tokens: data.eval_fraction (",
                           number(data.eval_fraction), ") must be > 0"));
  }
}

void check_checkpoint_fault_and_log(const Config& config, Problems& problems) {
  const CheckpointConfig& checkpoint = config.checkpoint;
  require_at_least<int64_t>(problems, "checkpoint.every", checkpoint.every, 0,
                            " (0 = only at the end)");
  require_at_least<int64_t>(problems, "checkpoint.keep", checkpoint.keep, 0, " (0 = keep all)");
  if (checkpoint.resume.empty()) {
    problems.push_back(
        "checkpoint.resume must be \"auto\", \"none\" or a checkpoint directory, got \"\"");
  }
  if (checkpoint.every > 0 && checkpoint.dir.empty()) {
    problems.push_back(str("checkpoint.every (", checkpoint.every,
                           ") needs checkpoint.dir, the directory to write checkpoints to"));
  }
  const FaultConfig& fault = config.fault;
  require_at_least<int64_t>(problems, "fault.max_restarts", fault.max_restarts, 0,
                            " (0 = no restarts)");
  require_at_least<double>(problems, "fault.restart_backoff_s", fault.restart_backoff_s, 0.0);
  require_at_least<double>(problems, "fault.step_timeout_s", fault.step_timeout_s, 0.0,
                           " (0 = no step watchdog)");
  require_at_least<int64_t>(problems, "fault.min_hosts", fault.min_hosts, 1);
  const LogConfig& log = config.log;
  if (log.dir.empty()) problems.push_back("log.dir must not be empty");
  require_at_least<int64_t>(problems, "log.every", log.every, 1);
  if (log.profile_step < 0 || log.profile_step > config.train.steps) {
    problems.push_back(str("log.profile_step (", log.profile_step,
                           ") must be a step of the run, 1 to ", "train.steps (",
                           config.train.steps, "), or 0 for none"));
  }
}

void check_serve(const ServeConfig& serve, Problems& problems) {
  if (serve.host.empty()) problems.push_back("serve.host must not be empty (e.g. \"127.0.0.1\")");
  if (serve.port < 0 || serve.port > 65535) {
    problems.push_back(
        str("serve.port (", serve.port, ") must be in [0, 65535] (0 = any free port)"));
  }
  require_positive(problems, "serve.kv_cache_mb", serve.kv_cache_mb);
  require_at_least<int64_t>(problems, "serve.max_batch_tokens", serve.max_batch_tokens, 1);
  require_at_least<int64_t>(problems, "serve.max_queue", serve.max_queue, 1);
  require_positive(problems, "serve.request_timeout_s", serve.request_timeout_s);
  require_positive(problems, "serve.max_request_mb", serve.max_request_mb);
  require_at_least<int64_t>(problems, "serve.threads", serve.threads, 0,
                            " (0 = cores / ranks on this machine)");
}

// The keys of [parallel] that are not the layout's sizes.
void check_parallel_settings(const Config& config, Problems& problems) {
  const ParallelConfig& parallel = config.parallel;
  require_positive(problems, "parallel.comm_timeout_s", parallel.comm_timeout_s);
  require_positive(problems, "parallel.bucket_mb", parallel.bucket_mb);
}

// [compression], its layout-independent keys; resolves start_step = -1.
void check_compression_settings(Config& config, Problems& problems) {
  CompressionConfig& compression = config.compression;
  const GradientCompression gradients = compression.gradients;
  require_at_least<int64_t>(problems, "compression.powersgd_rank", compression.powersgd_rank, 1,
                            " (the columns of PowerSGD's low-rank factors)");
  if (compression.start_step < -1) {
    problems.push_back(str("compression.start_step (", compression.start_step,
                           ") must be >= 0, or -1 for the default (0 for \"none\" and \"bf16\", "
                           "train.steps / 10 for \"powersgd\", and for \"onebit\" no sooner "
                           "than train.warmup_steps + 2 / (1 - train.beta2))"));
  } else if (compression.start_step > config.train.steps) {
    problems.push_back(str("compression.start_step (", compression.start_step,
                           ") must be <= train.steps (", config.train.steps,
                           "): the steps before it run uncompressed"));
  }
  if (compression.start_step == -1) {
    const TrainConfig& train = config.train;
    const bool warms_up =
        gradients == GradientCompression::powersgd || gradients == GradientCompression::onebit;
    compression.start_step = warms_up ? train.steps / 10 : 0;
    if (gradients == GradientCompression::onebit) {
      // Adam's variance averages about the last 1 / (1 - beta2) steps' squared gradients:
      // frozen sooner than two of those after the learning rate's warm-up, it still holds the
      // warm-up's large gradients and leaves every later step too small.
      const int64_t memory =
          train.beta2 < 1 ? static_cast<int64_t>(std::ceil(1.0 / (1.0 - train.beta2))) : 0;
      compression.start_step =
          std::min(train.steps,
                   std::max({int64_t{1}, compression.start_step, train.warmup_steps + 2 * memory}));
    }
  }
  if (gradients == GradientCompression::onebit && compression.start_step == 0) {
    problems.push_back(
        "compression.gradients = \"onebit\" freezes Adam's variance after the "
        "compression.start_step uncompressed steps, so compression.start_step (0) must be >= 1");
  }
  const Precision precision = config.train.precision;
  // fp64 runs are the exact references: nothing of theirs travels rounded to bf16.
  if (gradients == GradientCompression::bf16 && precision == Precision::fp64) {
    problems.push_back(
        "compression.gradients = \"bf16\" needs train.precision \"fp32\", \"bf16\" or \"fp16\"; "
        "train.precision = \"fp64\" reduces in fp64 (set compression.gradients = \"none\")");
  }
  // The error-feedback residuals carry gradients from one step to the next, which fp16's
  // changing loss scale would mix up.
  if ((gradients == GradientCompression::powersgd || gradients == GradientCompression::onebit) &&
      precision == Precision::fp16) {
    problems.push_back(str("compression.gradients = ", quote(name_of(gradients)),
                           " keeps an error-feedback residual across steps, which fp16's loss "
                           "scaling would corrupt; use train.precision = \"bf16\" or \"fp32\""));
  }
  if (compression.zero_gather == GatherCompression::bf16 &&
      (precision == Precision::fp64 || precision == Precision::fp16)) {
    problems.push_back(
        str("compression.zero_gather = \"bf16\" needs train.precision \"fp32\" or "
            "\"bf16\" (got ",
            quote(name_of(precision)), "); use \"int8\" or \"none\""));
  }
}

// [compression] against the resolved layout: there must be something to compress.
void check_compression_layout(const Config& config, Problems& problems) {
  const CompressionConfig& compression = config.compression;
  const ParallelConfig& parallel = config.parallel;
  const int64_t data_parallel = parallel.dp * parallel.cp;
  if (parallel.dp < 1) return;  // the layout's own problem, reported already
  if (compression.gradients != GradientCompression::none && data_parallel == 1) {
    problems.push_back(str("compression.gradients = ", quote(name_of(compression.gradients)),
                           " compresses the data-parallel gradient exchange, but dp x cp = 1 (dp ",
                           parallel.dp, ", cp ", parallel.cp,
                           ") has none; run on more data-parallel ranks or set "
                           "compression.gradients = \"none\""));
  }
  if (compression.zero_gather != GatherCompression::none) {
    if (parallel.zero != 3) {
      problems.push_back(str("compression.zero_gather = ", quote(name_of(compression.zero_gather)),
                             " compresses ZeRO-3's parameter all-gathers and needs parallel.zero = "
                             "3 (got ",
                             parallel.zero, "); set compression.zero_gather = \"none\""));
    } else if (data_parallel == 1) {
      problems.push_back(str("compression.zero_gather = ", quote(name_of(compression.zero_gather)),
                             " needs data-parallel ranks to gather from, but dp x cp = 1; set "
                             "compression.zero_gather = \"none\""));
    }
  }
}

// Context parallelism merges attention over key blocks by their log-sum-exp, which only the
// blockwise kernel returns.
void check_context_parallel(const Config& config, Problems& problems) {
  if (config.parallel.cp > 1 && config.model.attention != AttentionKernel::blockwise) {
    problems.push_back(str("parallel.cp = ", config.parallel.cp,
                           " needs model.attention = \"blockwise\" (context-parallel attention ",
                           "is computed by the blockwise kernel); got \"",
                           name_of(config.model.attention), "\""));
  }
}

// The layout against the model, the ranks and the batch (core/layout_rules.h); leaves dp and
// microbatches resolved.
void check_parallel_layout(Config& config, int64_t world_size, Problems& problems) {
  ParallelConfig& parallel = config.parallel;
  const LayoutVerdict verdict = check_layout(parallel, config.model.shape(), world_size,
                                             config.train.global_batch, LayoutVocabulary::config());
  problems.insert(problems.end(), verdict.problems.begin(), verdict.problems.end());
  parallel.dp = verdict.dp;
  if (verdict.microbatches > 0) parallel.microbatches = verdict.microbatches;
}

// parallel.pp_layers, when given, against the stages and the layers (core/stages.h); "auto"
// needs at least one layer per stage, as every split does.
void check_pp_layers(const Config& config, Problems& problems) {
  const PipelineLayers& pp_layers = config.parallel.pp_layers;
  const int64_t stages = config.parallel.pp * config.parallel.vpp;
  if (config.parallel.pp < 1 || config.parallel.vpp < 1) return;
  if (pp_layers.automatic && !pp_layers.layers.empty()) {
    problems.push_back(str("parallel.pp_layers is both \"auto\" and a list of ",
                           pp_layers.layers.size(), " layer counts; give one of them"));
    return;
  }
  if (pp_layers.automatic && stages > config.model.n_layers) {
    problems.push_back(
        str("parallel.pp_layers = \"auto\" needs a layer per pipeline stage, but model.n_layers (",
            config.model.n_layers, ") < parallel.pp * parallel.vpp (", stages,
            "); use fewer stages or more layers"));
  }
  if (pp_layers.layers.empty()) return;
  try {
    check_partition(pp_layers.layers, config.model.n_layers, stages);
  } catch (const UserError& error) {
    problems.push_back(error.what());
  }
}

[[noreturn]] void throw_problems(const Problems& problems) {
  if (problems.size() == 1) throw UserError(problems.front());
  std::string message = str("the config has ", problems.size(), " problems:");
  for (const std::string& problem : problems) message += "\n  - " + problem;
  throw UserError(message);
}

// parallel.auto = true: the planner chooses the layout, so the keys it sets must be unset.
void check_auto(const Config& config, Problems& problems) {
  const ParallelConfig& parallel = config.parallel;
  const ParallelConfig unset;
  std::vector<std::string> given;
  if (parallel.tp != unset.tp) given.push_back(str("parallel.tp = ", parallel.tp));
  if (parallel.pp != unset.pp) given.push_back(str("parallel.pp = ", parallel.pp));
  if (parallel.dp != unset.dp) given.push_back(str("parallel.dp = ", parallel.dp));
  if (parallel.cp != unset.cp) given.push_back(str("parallel.cp = ", parallel.cp));
  if (parallel.ep != unset.ep) given.push_back(str("parallel.ep = ", parallel.ep));
  if (parallel.zero != unset.zero) given.push_back(str("parallel.zero = ", parallel.zero));
  if (parallel.vpp != unset.vpp) given.push_back(str("parallel.vpp = ", parallel.vpp));
  if (parallel.sequence_parallel) given.push_back("parallel.sequence_parallel = true");
  if (parallel.schedule != unset.schedule) {
    given.push_back(str("parallel.schedule = ", quote(name_of(parallel.schedule))));
  }
  if (parallel.microbatches != unset.microbatches) {
    given.push_back(str("parallel.microbatches = ", parallel.microbatches));
  }
  // "auto" is resolved once the planner has chosen the stages.
  if (!parallel.pp_layers.layers.empty()) given.push_back("parallel.pp_layers");
  if (!given.empty()) {
    std::string list;
    for (const std::string& item : given) list += (list.empty() ? "" : ", ") + item;
    problems.push_back(str("parallel.auto = true chooses the layout, but the config also sets ",
                           list, "; remove those keys, or set parallel.auto = false to keep them"));
  }
  require_positive(problems, "parallel.comm_timeout_s", parallel.comm_timeout_s);
  require_at_least<int64_t>(problems, "train.global_batch", config.train.global_batch, 1);
}

Problems collect_consistency(Config& config, int64_t world_size) {
  STRATA_CHECK(world_size >= 1, "world_size = ", world_size);
  Problems problems;
  check_model(config.model, problems);
  check_model_init(config.model_init, problems);
  check_train(config.train, problems);
  check_data(config, problems);
  check_checkpoint_fault_and_log(config, problems);
  check_serve(config.serve, problems);
  check_compression_settings(config, problems);
  if (config.parallel.auto_layout) {  // the layout is checked once the planner chose it
    check_auto(config, problems);
    return problems;
  }
  check_parallel_settings(config, problems);
  check_context_parallel(config, problems);
  check_parallel_layout(config, world_size, problems);
  check_pp_layers(config, problems);
  check_compression_layout(config, problems);
  return problems;
}

}  // namespace

Config validate_config(Config config, int64_t world_size) {
  const Problems problems = collect_consistency(config, world_size);
  if (!problems.empty()) throw_problems(problems);
  return config;
}

Config validate_serving_config(Config config, int64_t world_size) {
  STRATA_CHECK(world_size >= 1, "world_size = ", world_size);
  Problems problems;
  check_model(config.model, problems);
  check_model_init(config.model_init, problems);
  check_serve(config.serve, problems);
  check_parallel_settings(config, problems);
  const std::vector<std::string> layout = serving_layout_problems(
      config.parallel, config.model.shape(), world_size, LayoutVocabulary::config());
  problems.insert(problems.end(), layout.begin(), layout.end());
  const MoeConfig& moe = config.model.moe;
  if (moe.num_experts > 0 && moe.capacity_factor != 0) {
    problems.push_back(str("strata serve batches tokens of many sequences together, so ",
                           "model.moe.capacity_factor (", number(moe.capacity_factor),
                           ") must be 0 (dropless): --set model.moe.capacity_factor=0.0"));
  }
  if (layout.empty()) check_pp_layers(config, problems);
  if (config.parallel.pp_layers.automatic) {
    problems.push_back(
        "parallel.pp_layers = \"auto\" balances training's forward and backward; "
        "strata serve takes the layers of each stage as a list (e.g. --set "
        "parallel.pp_layers=[3,1]), or none for the default split");
  }
  if (!problems.empty()) throw_problems(problems);
  config.parallel.dp = 1;
  return config;
}

}  // namespace strata
