// Generators of the pipeline schedules strata runs: GPipe, 1F1B (PipeDream-Flush), Megatron's
// interleaved 1F1B and zero-bubble ZB-H1 and ZB-V. Each returns, for every rank, its full action
// list, communication included: a receive sits right before the compute that consumes it and a send
// right after the compute that produces it, so an executor that walks its list in order with
// non-blocking sends and blocking receives cannot deadlock (validate_schedule proves it).
#pragma once
#include <string>
#include <vector>

#include "strata/core/layout.h"
#include "strata/pipeline/schedule.h"

namespace strata {

// Every schedule, in the order of their spellings (config_enums.h): gpipe, 1f1b,
// interleaved-1f1b, zb-h1, zb-v.
std::vector<PipelineSchedule> pipeline_schedules();

// The schedule a layout runs: layout.schedule over layout.pp stages of layout.vpp model chunks
// each, for layout.microbatches microbatches (resolved, >= 1). Throws UserError with the rule
// book's verdict (check_schedule, core/layout_rules.h), in the words of `names`, when it
// cannot be built. Schedule::name is the schedule's spelling.
Schedule build_schedule(const Layout& layout,
                        const LayoutVocabulary& names = LayoutVocabulary::layout_flag());

// The generators themselves; their preconditions are the rule book's schedule_problems.
Schedule make_gpipe_schedule(int stages, int microbatches);
Schedule make_1f1b_schedule(int stages, int microbatches);
Schedule make_interleaved_1f1b_schedule(int stages, int microbatches, int chunks);
Schedule make_zb_h1_schedule(int stages, int microbatches);
// Two chunks per rank in a V (ChunkPlacement::v_shape); any m >= 1, p >= 2.
Schedule make_zb_v_schedule(int stages, int microbatches);
// Forward passes only, for evaluation (not a training schedule: the validator's completeness
// check does not apply).
Schedule make_forward_only_schedule(int stages, int microbatches, int chunks,
                                    ChunkPlacement placement = ChunkPlacement::interleaved);

}  // namespace strata
