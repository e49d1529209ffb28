// The measured layer profile: what one microbatch's forward and backward of a transformer
// layer, of the embedding and of the head and loss take on this machine, for one model, micro
// batch and precision (`strata plan calibrate --profile-layers`). Saved beside the local
// cluster profile; parallel.pp_layers = "auto" balances the stages by it where it matches the
// run (plan/stage_split.h), by the cost model's prices elsewhere.
#pragma once
#include <cstdint>
#include <optional>
#include <string>

#include "strata/core/config_enums.h"
#include "strata/core/stages.h"
#include "strata/plan/transformer.h"

namespace strata {

struct PlanLayout;

struct LayerProfile {
  std::string model;  // layer_profile_model of the model it was measured on
  Precision precision = Precision::fp32;
  int64_t micro_batch = 1;
  // Seconds of one microbatch's forward and backward: a layer (the mean of the model's
  // layers), the embedding (the first stage's extra) and the head and loss (the last's).
  SplitCosts seconds;
};

// The model's shape as the profile names it: every size a layer, the embedding or the head
// takes time by ("vocab_size=32000 d_model=256 ..."; not n_layers).
std::string layer_profile_model(const TransformerSpec& model);

// Whether the profile was measured for this model, precision and layout: one rank computing
// the whole layer (tp = cp = 1) at the layout's micro batch, without recomputation.
bool layer_profile_applies(const LayerProfile& profile, const TransformerSpec& model,
                           Precision precision, const PlanLayout& layout);

// Where `strata plan calibrate --profile-layers` saves it: beside local_profile_path().
std::string layer_profile_path();

// Writes the profile as TOML (atomically, creating directories).
void save_layer_profile(const std::string& path, const LayerProfile& profile);

// The profile at `path`; nullopt when there is no file. Throws UserError naming the file and
// the key when it is malformed.
std::optional<LayerProfile> load_layer_profile(const std::string& path);

}  // namespace strata
