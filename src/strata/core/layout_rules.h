// The one rule book for parallel layouts: whether tp, pp, dp, cp, ep, vpp, ZeRO, the micro
// batch and the pipeline schedule can run a model on a number of ranks with a global batch.
// Config validation (`strata train`, `strata config`), the planner (`strata plan --layout`,
// the layout search), the pipeline schedule generators and serving all ask it, each naming
// the keys the way its user writes them (LayoutVocabulary, core/layout.h).
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "strata/core/layout.h"

namespace strata {

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
//    pp > 1 and microbatches a multiple of pp, or the zb-v schedule, which needs vpp = 2 and
//    pp > 1 (any microbatches);
//  - experts: ep divides dp * cp and the experts; ep > 1 needs experts;
//  - batch: dp * micro_batch divides the global batch; a given microbatches equals the quotient.
LayoutVerdict check_layout(const Layout& layout, const ModelShape& model, int64_t ranks,
                           int64_t global_batch, const LayoutVocabulary& names);

// check_layout(...).valid() without writing a message: for searching many layouts.
bool layout_is_valid(const Layout& layout, const ModelShape& model, int64_t ranks,
                     int64_t global_batch);

// The pipeline's rules alone, for a schedule of layout.microbatches microbatches (given, not
// derived) over pp stages of vpp chunks each: pp, vpp and microbatches >= 1, and the pipeline
// rules above. What the schedule generators ask (pipeline/generators.h).
std::vector<std::string> schedule_problems(const Layout& layout, const LayoutVocabulary& names);
// Throws UserError with every schedule problem ("; " between them) when there is one.
void check_schedule(const Layout& layout, const LayoutVocabulary& names);

// Serving's rules (strata serve runs tp * pp ranks and no batch of training): the sizes, tp *
// pp equal to the ranks, dp, cp, ep and vpp of 1, and the model split of the rules above.
std::vector<std::string> serving_layout_problems(const Layout& layout, const ModelShape& model,
                                                 int64_t ranks, const LayoutVocabulary& names);

}  // namespace strata
