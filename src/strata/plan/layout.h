// A parallel layout as the planner sees it: the Layout (core/layout.h) plus the choices that
// change memory and time but not the mesh (recomputation, compression). Parsed from
// `--layout tp=2,pp=4,...` (the settings' names are core/layout.h's), checked against a model,
// a cluster and a batch by the layout rules (core/layout_rules.h) with messages that say what
// to change, plus what the cost model cannot predict.
#pragma once
#include <cstdint>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "strata/core/layout_rules.h"
#include "strata/plan/transformer.h"

namespace strata {

// The layout (core/layout.h) plus what only the planner chooses. Its schedule: 1f1b, or
// interleaved-1f1b when vpp > 1 and none is given (parse_layout); printed "none" without a
// pipeline. microbatches stays 0: the planner derives them from the global batch.
struct PlanLayout : Layout {
  Recompute recompute = Recompute::none;
  // [compression]: how the data-parallel gradient exchange travels, PowerSGD's rank, and
  // ZeRO-3's parameter gathers.
  GradientCompression compression = GradientCompression::none;
  int64_t powersgd_rank = 4;
  GatherCompression zero_gather = GatherCompression::none;
  // parallel.pp_layers = "auto" (pp_layers=auto): the layers split over the stages by time
  // (stage_split.h) rather than by FLOPs, the runtime's default.
  bool pp_layers_auto = false;
};

// "tp=2,pp=4,dp=8,cp=1,cp_comm=ring,ep=1,vpp=1,zero=1,micro_batch=2,recompute=selective,
//  sequence_parallel=true,schedule=1f1b,compression=powersgd,powersgd_rank=4,zero_gather=int8,
//  pp_layers=auto":
//  any subset, in any order; the rest keep their
// defaults. Throws UserError naming the item and the keys and values allowed.
PlanLayout parse_layout(const std::string& text);

// dp made explicit for `devices` devices (dp stays as given when set).
PlanLayout resolve_layout(PlanLayout layout, int64_t devices);

// "tp=2 pp=4 dp=8 cp=1 cp_comm=ring ep=1 vpp=1 zero=1 micro_batch=2 recompute=selective
//  sequence_parallel=true schedule=1f1b", the form --layout accepts with spaces for commas,
//  followed by compression=.. (and powersgd_rank=..) and zero_gather=.. when they are not none,
//  and pp_layers=auto when set.
std::string layout_to_string(const PlanLayout& layout);
// The schedule as printed: its spelling, "none" without a pipeline.
std::string schedule_label(const PlanLayout& layout);
nlohmann::json layout_to_json(const PlanLayout& layout, int64_t microbatches);

// Every reason the layout cannot run this model on `devices` devices with `global_batch`
// sequences per step (the layout rules, named as --layout names them), and every part of it
// the cost model cannot predict, each saying what to change; empty when it can. The layout
// must be resolved (resolve_layout).
std::vector<std::string> layout_problems(const TransformerSpec& model, const PlanLayout& layout,
                                         int64_t devices, int64_t global_batch);

// Microbatches per pipeline per step: global_batch / (dp * micro_batch).
inline int64_t microbatches_of(const PlanLayout& layout, int64_t global_batch) {
  return global_batch / (layout.dp * layout.micro_batch);
}

}  // namespace strata
