// `strata plan calibrate --profile-layers`: the forward and backward of one microbatch through a
// transformer layer, the embedding and the head and loss of a config's model, timed on this
// machine as training runs them, for the split parallel.pp_layers = "auto" balances
// (plan/stage_split.h, plan/layer_profile.h).
#pragma once

#include "strata/core/config.h"
#include "strata/core/stages.h"
#include "strata/dist/comm.h"

namespace strata {

// Collective over `world`: every rank times its own copy at once (as the ranks of a pipeline
// compute at once), the median of `rounds` per part, and every rank gets the slowest rank's
// seconds. Three chunks of `period` layers (1, or model.moe.every for an MoE model) are timed
// in turn each round: alone, with the embedding and with the head and loss; the differences
// are the extras.
SplitCosts time_split_costs(Comm& world, const Config& config, int rounds);

}  // namespace strata
