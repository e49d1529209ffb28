// parallel.pp_layers = "auto": the split of the layers over a pipeline's virtual stages that
// evens the ranks' forward + backward time (core/stages.h balanced_split: the busiest rank,
// all its chunks summed, as cheap as can be), the embedding charged to the first virtual stage
// and the head and loss to the last. Costed by the measured layer profile where it applies
// (plan/layer_profile.h), else by the cost model's prices of one microbatch on this layout.
// The runtime resolves a config's "auto" with it once at the start, and the planner prices
// layouts with pp_layers=auto with it, so both see the same split.
#pragma once
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "strata/core/config.h"
#include "strata/plan/cost_model.h"

namespace strata {

class Comm;

struct AutoSplit {
  std::vector<int64_t> layers;  // of each virtual stage
  SplitCosts seconds;           // what it balanced, per microbatch
  std::string source;           // the measured layer profile, or the cost model on a profile
};

// The balanced split of inputs.model's layers for `layout` (resolved and valid).
AutoSplit auto_split(const PlanInputs& inputs, const PlanLayout& layout);

// `config` with parallel.pp_layers = "auto" replaced by its split for the config's layout on
// `cluster` (the config validated; with a measured profile when it applies); `note` says the
// split and what it was costed by. A config without "auto" comes back as it is.
Config resolve_pp_layers(const Config& config, const ClusterProfile& cluster,
                         const std::optional<LayerProfile>& measured, std::string* note);

// What a run's ranks do at its start (collective over `world`): resolve_pp_layers on the local
// profile (local_profile_on_ranks: measured now if there is none) and the layer profile at
// layer_profile_path(), every rank alike, then every rank takes rank 0's list, so all build
// the same stages whatever their files. `note` adds where the profile came from.
Config resolve_pp_layers_on_ranks(Comm& world, const Config& config, std::string* note);

}  // namespace strata
