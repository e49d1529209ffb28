// The one layout value and the one model shape every part of strata reads: config validation,
// the planner, the pipeline schedules, the mesh, training and serving. Each setting has one
// name (layout_settings), which is its config key (parallel.<name>; train.micro_batch), its
// `strata plan --layout name=...` key and, for the pipeline's, its `strata simulate --name` flag.
#pragma once
#include <cstdint>
#include <string>
#include <variant>
#include <vector>

#include "strata/core/config_enums.h"

namespace strata {

// How the ranks are laid out and how each runs its share of the batch. A config's layout is
// ParallelConfig (config.h), the planner's PlanLayout (plan/layout.h); the mesh shape
// (dist/mesh.h) and the pipeline schedule (pipeline/generators.h) are derived from it.
struct Layout {
  int64_t tp = 1;
  int64_t pp = 1;
  int64_t dp = -1;   // -1: the ranks left over, world / (tp * pp * cp)
  int64_t cp = 1;    // context parallelism: each sequence split over cp ranks
  int64_t ep = 1;    // experts spread over ep of the dp * cp ranks
  int64_t vpp = 1;   // model chunks per pipeline rank (interleaved-1f1b)
  int64_t zero = 0;  // 0..3
  bool sequence_parallel = false;
  int64_t micro_batch = 1;   // sequences per forward/backward on one rank (train.micro_batch)
  int64_t microbatches = 0;  // 0: derived, global_batch / (dp * micro_batch); else must equal it
  PipelineSchedule schedule = PipelineSchedule::one_f_one_b;  // what runs the pipeline
  ContextParallelComm cp_comm = ContextParallelComm::ring;    // irrelevant at cp = 1
};

// Which pipeline rank holds each virtual stage, and as which of its chunks: the one answer
// the schedules, the trainer's chunks, the tied embedding's group and the planner's stages all
// read. With pp ranks of vpp chunks the model is cut into pp * vpp virtual stages of
// contiguous layers, run in order.
enum class ChunkPlacement {
  // Megatron's interleaving (every schedule but zb-v): virtual stage s is chunk s / pp of rank
  // s % pp, so rank 0 holds 0, pp, 2pp, ... and the data wraps from the last rank to the first.
  interleaved,
  // zb-v (vpp = 2): rank r holds virtual stage r as chunk 0 and 2pp - 1 - r as chunk 1. The
  // data runs down the ranks and back up: the hand-over between the halves stays on rank pp - 1
  // and the last virtual stage sits on rank 0 beside the first, so a microbatch's backward
  // starts where its forward began.
  v_shape,
};

struct StagePlacement {
  ChunkPlacement kind = ChunkPlacement::interleaved;
  int64_t pp = 1;
  int64_t vpp = 1;

  int64_t virtual_stages() const { return pp * vpp; }
  int64_t virtual_stage(int64_t rank, int64_t chunk) const;
  int64_t rank_of(int64_t virtual_stage) const;
  int64_t chunk_of(int64_t virtual_stage) const;
};

// The placement the schedule runs its chunks on (v_shape for zb-v, else interleaved).
ChunkPlacement chunk_placement(PipelineSchedule schedule);
// layout.pp ranks of layout.vpp chunks, placed for layout.schedule.
StagePlacement stage_placement(const Layout& layout);

// What of a model the layout rules, the stage partition and the FLOP count look at, in
// ModelConfig's words with its defaults resolved (ModelConfig::shape()).
struct ModelShape {
  int64_t vocab_size = 2;
  int64_t d_model = 1;
  int64_t n_layers = 1;
  int64_t n_heads = 1;
  int64_t n_kv_heads = 1;  // n_heads for multi-head attention; fewer: grouped-query attention
  int64_t attention_head_dim = 0;  // model.head_dim: 0 for d_model / n_heads
  int64_t d_ff = 4;                // the MLP width (model.d_ff, or 4 * model.d_model when 0)
  int64_t seq_len = 2;
  bool gated_mlp = false;  // SwiGLU: two up-projections of width d_ff
  // Mixture of experts (Switch / GShard): the MLP of every `every`-th layer becomes
  // num_experts MLPs of width d_ff (0: the dense d_ff), each token routed to top_k of them.
  struct Moe {
    int64_t num_experts = 0;  // 0 = a dense model
    int64_t top_k = 1;
    int64_t every = 1;             // layer l is MoE when (l + 1) % every == 0
    double capacity_factor = 1.0;  // 0 = dropless; otherwise tokens over capacity are dropped
    int64_t d_ff = 0;              // 0 = the dense MLP width
    bool gated = false;            // SwiGLU experts (model.moe.activation)

    bool enabled() const { return num_experts > 0; }
  } moe;

  int64_t head_dim() const {
    return attention_head_dim > 0 ? attention_head_dim : d_model / n_heads;
  }
  int64_t q_width() const { return n_heads * head_dim(); }
  int64_t kv_width() const { return n_kv_heads * head_dim(); }
  bool is_moe_layer(int64_t layer) const { return moe.enabled() && (layer + 1) % moe.every == 0; }
  int64_t moe_layers() const { return moe.enabled() ? n_layers / moe.every : 0; }
  int64_t expert_width() const { return moe.d_ff > 0 ? moe.d_ff : d_ff; }
  // Whether the MLP of a layer (its experts' in an MoE layer) is SwiGLU.
  bool mlp_gated(bool moe_layer) const { return moe_layer ? moe.gated : gated_mlp; }
};

// How a caller writes each setting and the ranks, so that messages name what to change in
// the user's words. Made from layout_settings(); see the three below.
struct LayoutVocabulary {
  std::string tp, pp, dp, cp, cp_comm, ep, vpp, zero, micro_batch, microbatches, sequence_parallel,
      schedule, global_batch;
  // What the layout is laid over: ranks_owner + count + " " + ranks_noun, "4 ranks".
  std::string ranks_owner, ranks_noun;
  // How a setting is written: `parallel.schedule = "zb-h1"` (TOML), `schedule=zb-h1` (--layout)
  // or `--schedule zb-h1` (flags).
  enum class Form { toml, key_value, flag } form = Form::key_value;

  // parallel.tp, train.micro_batch, train.global_batch, "4 ranks".
  static LayoutVocabulary config();
  // strata plan --layout: tp, micro_batch, --global-batch, "the cluster's 8 devices".
  static LayoutVocabulary layout_flag();
  // strata simulate: --pp, --vpp, --microbatches, --schedule, "4 stages".
  static LayoutVocabulary simulate_flags();
};

// One layout setting: its name, the config section its key is in, where the value lives in a
// Layout and where LayoutVocabulary keeps the caller's spelling of it.
struct LayoutSetting {
  const char* name;     // "tp": parallel.tp, --layout tp=2
  const char* section;  // "parallel" or "train"
  std::variant<int64_t Layout::*, bool Layout::*, PipelineSchedule Layout::*,
               ContextParallelComm Layout::*>
      field;
  std::string LayoutVocabulary::*words;
  bool simulate_flag;  // strata simulate takes it as --name
};

// Every setting, in the order `--layout` lists them. The one list of their names.
const std::vector<LayoutSetting>& layout_settings();

// nullptr when no setting is called `name`.
const LayoutSetting* find_layout_setting(const std::string& name);

// The setting's value in `layout` as --layout and the command line write it: "2", "true",
// "interleaved-1f1b".
std::string setting_text(const Layout& layout, const LayoutSetting& setting);

}  // namespace strata
