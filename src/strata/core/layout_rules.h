// The one rule book for parallel layouts: whether tp, pp, dp, cp, ep, vpp, ZeRO, the micro
// batch and the pipeline schedule can train a model on a number of ranks with a global batch.
// Config validation (`strata train`, `strata config`) and the planner (`strata plan --layout`,
// the layout search) both ask it, each naming the keys the way its user writes them.
#pragma once
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "strata/core/config.h"

namespace strata {

// The layout as plain sizes, as either caller holds it.
struct LayoutSizes {
  int64_t tp = 1;
  int64_t pp = 1;
  int64_t dp = -1;  // -1: the ranks left over, world / (tp * pp * cp)
  int64_t cp = 1;
  int64_t ep = 1;
  int64_t vpp = 1;
  int64_t zero = 0;
  int64_t micro_batch = 1;
  int64_t microbatches = 0;  // 0: derived, global_batch / (dp * micro_batch); else must equal it
  bool sequence_parallel = false;
  ContextParallelComm cp_comm = ContextParallelComm::ring;
  // Unset: no schedule given, as in the planner without a pipeline (pp = 1).
  std::optional<PipelineSchedule> schedule;
};

// What of the model the layout rules look at.
struct LayoutModelShape {
  int64_t heads = 1;      // model.n_heads
  int64_t kv_heads = 1;   // model.n_kv_heads (n_heads when unset)
  int64_t mlp_width = 1;  // model.d_ff, or 4 * model.d_model when 0
  int64_t seq_len = 1;
  int64_t layers = 1;
  int64_t experts = 0;  // 0 = a dense model
};
LayoutModelShape layout_model_shape_of(const ModelConfig& model);

// How the user writes each key and the ranks: messages name what to change in those words.
struct LayoutVocabulary {
  std::string tp, pp, dp, cp, cp_comm, ep, vpp, zero, micro_batch, microbatches, sequence_parallel,
      schedule, global_batch;
  // What the layout is laid over: ranks_owner + count + " " + ranks_noun, "4 ranks".
  std::string ranks_owner, ranks_noun;
  // true: settings read `parallel.pp_schedule = "zb-h1"` (TOML); false: `schedule=zb-h1`.
  bool toml_settings = false;

  // parallel.tp, train.micro_batch, train.global_batch, "4 ranks".
  static LayoutVocabulary config();
  // strata plan --layout: tp, micro_batch, --global-batch, "the cluster's 8 devices".
  static LayoutVocabulary layout_flag();
};

// The verdict: every reason the layout cannot run, each saying what to change and quoting the
// numbers (empty when it can), and the derived sizes where they could be derived.
struct LayoutVerdict {
  std::vector<std::string> problems;
  int64_t dp = -1;           // resolved from -1 when the ranks divide; else as given
  int64_t microbatches = 0;  // global_batch / (dp * micro_batch) when that divides; else 0
  bool valid() const { return problems.empty(); }
};

// Rules, with `ranks` ranks (devices) and `global_batch` sequences per optimizer step:
//  - sizes: tp, pp, cp, ep, vpp, micro_batch, global_batch >= 1; dp >= 1 or -1; zero in 0..3;
//    microbatches >= 0;
//  - ranks: tp * pp * dp * cp equals them (dp = -1: tp * pp * cp divides them);
//  - model: tp divides the heads and the MLP width; with cp > 1, 2 * cp divides the sequence
//    (cut into 2 * cp chunks, rank r holding chunks r and 2 * cp - 1 - r); with sequence
//    parallelism (which needs tp > 1) tp * cp divides it too: the sequence is split over cp,
//    then each piece over tp; layers >= pp * vpp;
//  - cp_comm all-to-all: cp divides each tp rank's query heads (heads / tp), and its kv heads
//    (kv_heads / tp; when tp does not divide them they are expanded to the query heads) and
//    cp divide one another;
//  - pipeline: vpp > 1 needs pp > 1 and the interleaved-1f1b schedule, which needs vpp >= 2,
//    pp > 1 and microbatches a multiple of pp;
//  - experts: ep divides dp * cp and the experts; ep > 1 needs experts;
//  - batch: dp * micro_batch divides the global batch; a given microbatches equals the quotient.
LayoutVerdict check_layout(const LayoutSizes& layout, const LayoutModelShape& model, int64_t ranks,
                           int64_t global_batch, const LayoutVocabulary& names);

// check_layout(...).valid() without writing a message: for searching many layouts.
bool layout_is_valid(const LayoutSizes& layout, const LayoutModelShape& model, int64_t ranks,
                     int64_t global_batch);

}  // namespace strata
