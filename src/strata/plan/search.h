// The layout search: every valid layout of a model on a cluster, the ones that fit ranked by
// predicted step time, and for the others the reason they lost (does not fit, bubble, a kind
// of communication, recomputation). Also the choice `parallel.auto = true` makes for a run.
#pragma once
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "strata/core/config.h"
#include "strata/plan/cost_model.h"

namespace strata {

struct SearchOptions {
  int64_t top = 5;  // how many fitting layouts to return
  // Tensor-parallel groups stay inside a node unless this is set.
  bool allow_tp_across_nodes = false;
  // When set, only layouts it accepts are considered (e.g. what the runtime can run).
  std::function<bool(const PlanLayout&)> allowed;
};

struct RankedLayout {
  Prediction prediction;
  // Why it ranks below the first ("bubble: +0.41 s"); "fastest" for the first.
  std::string reason;
};

// The layouts that lost for one reason: how many, and the best of them.
struct LossGroup {
  std::string reason;  // "does not fit", "bubble", "communication (data-parallel)", ...
  int64_t count = 0;
  PlanLayout example;  // the fastest (or, for "does not fit", the smallest) of the group
  std::string detail;  // e.g. "needs 93.2 GB of 80.0 GB", "+0.41 s vs the fastest"
};

struct SearchResult {
  std::vector<RankedLayout> top;  // fastest first
  int64_t candidates = 0;         // valid layouts considered
  int64_t fitting = 0;
  std::vector<LossGroup> lost;  // the candidates outside the top, by reason, most common first
  int64_t simulations = 0;      // pipeline simulations run
};

// Searches tp (inside a node unless allowed), cp (s / cp >= 256 tokens) with each cp_comm the
// layout rules allow, pp (<= layers), dp
// (the rest), ep (MoE only), the schedule (1f1b, zb-h1, zb-v with vpp 2 and interleaved-1f1b
// with vpp up to 8, each where vpp divides the layers per stage), zero (0-3; 3 only without a
// pipeline), micro_batch (divisors of the batch per replica, up to 64), recompute, sequence
// parallelism and, with a pipeline, the stage split (by FLOPs, or pp_layers=auto by time).
// Throws UserError when no layout is valid, or none fits, saying what to change.
SearchResult search_layouts(const PlanInputs& inputs, const SearchOptions& options = {});

// What `parallel.auto = true` runs: the fastest layout for `world` ranks among those this
// release can run, with the config's train.recompute, on `cluster` (its devices taken as
// `world` ranks: one node of `world` if it has fewer devices per node, else world /
// devices_per_node nodes). `config` comes back with [parallel] and train.micro_batch set
// (train.global_batch is kept) and `explanation` says what was chosen and why.
struct AutoLayout {
  Config config;
  Prediction prediction;
  std::string explanation;
};
AutoLayout choose_layout(const Config& config, int64_t world, const ClusterProfile& cluster);

}  // namespace strata
