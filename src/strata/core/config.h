// The run configuration: the TOML sections [model] [parallel] [compression] [train] [data]
// [checkpoint] [fault] [log] [serve], parsed, overridden by --set, validated, and printed back. The
// key names are the public interface (docs/config.md); every field below is one key.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "strata/core/config_enums.h"
#include "strata/core/layout.h"

namespace strata {

// [model.moe]: mixture-of-experts feed-forward layers (docs/config.md, docs/parallelism.md).
struct MoeConfig {
  int64_t num_experts = 0;       // 0 = dense model; > 0: every `every`-th layer is MoE
  int64_t top_k = 2;             // experts per token: 1 or 2
  int64_t every = 1;             // layer l is MoE when (l + 1) % every == 0
  double capacity_factor = 0.0;  // 0 = dropless; else ceil(cf * top_k * seq_len / E) per
                                 // expert per sequence, later tokens dropped
  double aux_loss_coef = 0.01;   // Switch load-balancing loss weight
  double z_loss_coef = 0.0;      // router z-loss weight
  Activation activation = Activation::gelu;  // expert FFN
};

struct ModelConfig {
  int64_t vocab_size = 256;
  int64_t d_model = 128;
  int64_t n_layers = 2;
  int64_t n_heads = 4;
  int64_t n_kv_heads = 0;    // 0 = same as n_heads (multi-head); fewer = grouped-query attention
  int64_t head_dim_key = 0;  // model.head_dim: 0 = d_model / n_heads (head_dim() resolves it)
  int64_t d_ff = 0;          // 0 = 4 * d_model
  int64_t seq_len = 128;
  PositionEncoding pos = PositionEncoding::learned;
  Norm norm = Norm::layernorm;
  Activation activation = Activation::gelu;
  // blockwise: tiles with an online softmax, no T x T scores (kernels/attention.h); eager:
  // the scores materialized (the reference).
  AttentionKernel attention = AttentionKernel::blockwise;
  bool tie_embeddings = true;
  double init_std = 0.02;
  double norm_eps = 1e-5;
  double rope_theta = 10000.0;
  MoeConfig moe;

  bool is_moe_layer(int64_t layer) const {
    return moe.num_experts > 0 && (layer + 1) % moe.every == 0;
  }
  int64_t kv_heads() const { return n_kv_heads > 0 ? n_kv_heads : n_heads; }
  int64_t ff_dim() const { return d_ff > 0 ? d_ff : 4 * d_model; }
  int64_t head_dim() const { return head_dim_key > 0 ? head_dim_key : d_model / n_heads; }
  // The shape the layout rules, the stage partition and the FLOP count read (core/layout.h).
  ModelShape shape() const;
};

// Key parallel.pp_layers: the layers of each virtual pipeline stage (pp * vpp entries, in
// virtual-stage order), or "auto": balanced by the time of a layer, the embedding and the head
// and loss on this machine (plan/stage_split.h), which the run's start resolves into the list
// before any rank builds its stages. Neither (the default): balanced by FLOPs (core/stages.h).
struct PipelineLayers {
  bool automatic = false;       // "auto"; `layers` is then empty
  std::vector<int64_t> layers;  // given, or resolved from "auto"
  bool operator==(const PipelineLayers& other) const {
    return automatic == other.automatic && layers == other.layers;
  }
};

// [parallel] and train.micro_batch: the layout (core/layout.h; its settings are the keys
// parallel.tp ... parallel.schedule, and train.micro_batch) plus the keys that are not the
// layout's.
struct ParallelConfig : Layout {
  ParallelConfig() { micro_batch = 8; }  // train.micro_batch's default

  // Key parallel.auto: the planner picks every other [parallel] key and train.micro_batch
  // for the ranks the run gets (plan/search.h choose_layout); those keys must stay unset.
  bool auto_layout = false;
  double bucket_mb = 25.0;  // gradient reduction bucket size, MiB (zero 3: one layer each)
  PipelineLayers pp_layers;
  double comm_timeout_s = 300.0;
};

// [compression]: what data parallelism's traffic is compressed to (docs/communication.md).
struct CompressionConfig {
  // The data-parallel (and expert-data-parallel) gradient exchange: none, bf16 (the reduction
  // in bf16), powersgd (low-rank, Vogels et al. 2019) or onebit (1-bit Adam, Tang et al. 2021).
  GradientCompression gradients = GradientCompression::none;
  // Steps 0 .. start_step - 1 run uncompressed (1-bit Adam: plain AdamW, whose variance is then
  // frozen). -1 = the default: 0 for none and bf16, train.steps / 10 otherwise (validate_config
  // resolves it).
  int64_t start_step = -1;
  int64_t powersgd_rank = 4;                                // columns of PowerSGD's factors
  GatherCompression zero_gather = GatherCompression::none;  // ZeRO-3's parameter all-gathers
};

struct TrainConfig {
  int64_t steps = 100;
  int64_t global_batch = 8;  // sequences per optimizer step, whatever the layout
  // train.micro_batch is the layout's: config.parallel.micro_batch.
  double lr = 3e-4;
  double min_lr = 3e-5;
  int64_t warmup_steps = 10;
  double weight_decay = 0.1;
  double beta1 = 0.9;
  double beta2 = 0.95;
  double eps = 1e-8;
  double grad_clip = 1.0;  // 0 = no clipping
  uint64_t seed = 1234;
  int64_t eval_every = 0;  // 0 = never
  int64_t eval_batches = 4;
  // fp32, or bf16/fp16 with fp32 master weights (fp16 with dynamic loss scaling); fp64 for
  // exact tests.
  Precision precision = Precision::fp32;
  // Activation recomputation: full keeps each layer's input and recomputes its forward in the
  // backward; selective recomputes only the attention core (not the blockwise kernel's without
  // cp: selective_recomputes_attention). recompute_layers: how many layers
  // of each model chunk (the first ones), 0 = all.
  Recompute recompute = Recompute::none;
  int64_t recompute_layers = 0;
  int64_t threads = 0;  // intra-op threads per rank; 0 = max(1, cores / local ranks)
};

struct DataConfig {
  DataSource source = DataSource::corpus;
  std::string path;  // corpus: text file(s) dir or file; shards: shard dir
  std::string tokenizer = "byte";
  double eval_fraction = 0.05;  // held-out share of the tokens for evaluation
  // Rows are packed from consecutive documents; with the mask a token attends only to its own
  // document and positions restart at each document start (docs/data.md).
  bool document_mask = false;
  // "completion": only the tokens the shards' loss mask marks (prompt/completion data made
  // by `strata data prepare --prompt-completion`) carry loss; "none": every token does.
  LossMask loss_mask = LossMask::none;
};

struct CheckpointConfig {
  std::string dir;              // empty = no checkpoints
  int64_t every = 0;            // 0 = only at the end
  std::string resume = "auto";  // "auto" | "none" | a checkpoint directory
  int64_t keep = 3;             // newest complete checkpoints kept; 0 = keep all
  bool async = false;           // write in a background thread; the step only copies
};

// What `strata train --nproc N` and each rank do when a rank dies or hangs (docs/launch.md).
// The collective timeout is parallel.comm_timeout_s.
struct FaultConfig {
  int64_t max_restarts = 3;        // restarts of the job by the supervisor; 0 = none
  double restart_backoff_s = 1.0;  // pause before each restart
  double step_timeout_s = 0.0;     // a rank with no step finished for this long exits; 0 = off
  // With hosts (--hosts, --hostfile): a restart probes them and goes on with those that answer,
  // in a layout the planner chooses for them (docs/launch.md, "Elastic restarts").
  bool elastic = false;
  int64_t min_hosts = 1;      // fewer hosts answering than this: give up
  bool elastic_grow = false;  // a lost host that answers again is taken back at a restart
};

struct LogConfig {
  std::string dir = "runs/default";
  bool trace = false;
  ProgressDisplay progress = ProgressDisplay::automatic;
  int64_t every = 1;     // plain progress line every N steps
  bool samples = false;  // log.dir/samples_rank_N.jsonl: the rows each step trained on
  // The step (numbered as the metrics number it, from 1) whose operators each rank profiles
  // into log.dir/profile_step_N_rank_R.{json,txt} (train/op_profile.h); 0 = none.
  int64_t profile_step = 0;
};

// [serve]: `strata serve`, the HTTP server with continuous batching (docs/serving.md).
struct ServeConfig {
  std::string host = "127.0.0.1";  // the address to bind; the default answers only this machine
  int64_t port = 8000;             // 0 = any free port (the one bound is printed)
  double kv_cache_mb = 64.0;       // per rank: the pool of 16-token KV cache blocks, MiB
  int64_t max_batch_tokens = 256;  // tokens one engine step runs: prefill chunks + decodes
  int64_t max_queue = 64;  // sequences (a request's prompts) waiting; a request past it gets 429
  double request_timeout_s = 600.0;  // a sequence not finished this long after arrival is cancelled
  double max_request_mb = 16.0;      // a request body over this many MiB gets 413
  int64_t threads = 0;               // intra-op threads per rank; 0 = max(1, cores / local ranks)
  bool prefix_cache = true;  // full KV blocks are kept and shared by sequences with the same prefix
};

struct Config {
  ModelConfig model;
  ParallelConfig parallel;
  CompressionConfig compression;
  TrainConfig train;
  DataConfig data;
  CheckpointConfig checkpoint;
  FaultConfig fault;
  LogConfig log;
  ServeConfig serve;
  // Key model.init: a Hugging Face model directory (config.json + safetensors) to start from;
  // its architecture replaces the [model] and [model.moe] shape keys (with_hf_model,
  // hf/hf_config.h), its weights the random initialization. Empty = strata's own model. Kept
  // out of ModelConfig, which is the architecture alone (what a GPT is built from).
  std::string model_init;
};

// Reads a TOML file and applies "section.key=value" overrides (values parsed as TOML).
// Throws UserError naming the file, key and what is allowed for unknown keys, wrong types,
// values an enum key does not know (config_enums.h), unparsable files and bad override syntax.
// Does not check cross-key constraints.
Config load_config(const std::string& path, const std::vector<std::string>& overrides = {});

// Same, from TOML text (for tests and for configs embedded in checkpoints).
Config parse_config(const std::string& toml_text, const std::string& origin,
                    const std::vector<std::string>& overrides = {});

// Checks every cross-key constraint for a run on world_size ranks, resolves dp = -1 and
// microbatches = 0, and throws UserError naming the keys and numbers
// (e.g. "parallel.tp (5) must divide model.n_heads (12)"). Every problem found is reported
// in one message.
Config validate_config(Config config, int64_t world_size);

// What `strata serve` on world_size ranks reads, checked the same way: the model, [serve],
// the serving layout (tp * pp = world_size; core/layout_rules.h serving_layout_problems),
// parallel.pp_layers and a dropless MoE. The training keys ([train] batch, [data], ...) are
// not serving's and are not checked. Resolves dp to 1.
Config validate_serving_config(Config config, int64_t world_size);

// The effective config as TOML, every key present (what `strata config` prints);
// parse_config(to_toml(c), ...) == c.
std::string to_toml(const Config& config);

// Every key as "section.key", in the order to_toml prints them.
std::vector<std::string> config_keys();

// Key-by-key equality (doubles compared exactly).
bool operator==(const Config& a, const Config& b);
inline bool operator!=(const Config& a, const Config& b) { return !(a == b); }

}  // namespace strata
