// The balanced split of parallel.pp_layers = "auto" (stage_split.h): its costs from the measured
// layer profile or the cost model, and the config's "auto" resolved into the list.
#include "strata/plan/stage_split.h"

#include <iomanip>
#include <sstream>

#include "strata/core/error.h"
#include "strata/dist/comm.h"
#include "strata/plan/calibrate.h"
#include "strata/plan/stage_model.h"

namespace strata {
namespace {

std::string milliseconds(double seconds) {
  std::ostringstream out;
  out << std::setprecision(3) << seconds * 1e3 << " ms";
  return out.str();
}

std::string joined(const std::vector<int64_t>& values) {
  std::string out;
  for (const int64_t value : values) out += str(out.empty() ? "" : ", ", value);
  return out;
}

}  // namespace

AutoSplit auto_split(const PlanInputs& inputs, const PlanLayout& layout) {
  AutoSplit split;
  if (inputs.layer_profile &&
      layer_profile_applies(*inputs.layer_profile, inputs.model, inputs.precision, layout)) {
    split.seconds = inputs.layer_profile->seconds;
    split.source = "the measured layer profile";
  } else {
    split.seconds = split_costs(inputs, layout);
    split.source = str("the cost model, cluster profile '", inputs.cluster.name, "'");
  }
  split.layers = balanced_split(inputs.model.n_layers, stage_placement(layout), split.seconds);
  return split;
}

Config resolve_pp_layers(const Config& config, const ClusterProfile& cluster,
                         const std::optional<LayerProfile>& measured, std::string* note) {
  if (!config.parallel.pp_layers.automatic) return config;
  PlanInputs inputs = plan_inputs(transformer_of(config.model), cluster, config.train.global_batch);
  inputs.precision = config.train.precision;  // the runtime's, whatever the profile's device uses
  inputs.layer_profile = measured;
  PlanLayout layout;
  static_cast<Layout&>(layout) = config.parallel;
  layout.recompute = config.train.recompute;
  const AutoSplit split = auto_split(inputs, layout);
  Config resolved = config;
  resolved.parallel.pp_layers = PipelineLayers{false, split.layers};
  *note = str("parallel.pp_layers = \"auto\": [", joined(split.layers), "] (costed by ",
              split.source, ": a layer ", milliseconds(split.seconds.layer), ", the embedding ",
              milliseconds(split.seconds.embedding), ", the head and loss ",
              milliseconds(split.seconds.head), " per microbatch)");
  return resolved;
}

Config resolve_pp_layers_on_ranks(Comm& world, const Config& config, std::string* note) {
  if (!config.parallel.pp_layers.automatic) return config;
  std::string profile_note;
  const ClusterProfile local = local_profile_on_ranks(world, &profile_note);
  Config resolved =
      resolve_pp_layers(config, local, load_layer_profile(layer_profile_path()), note);
  std::vector<int64_t>& layers = resolved.parallel.pp_layers.layers;
  at::Tensor shared = at::tensor(layers, at::kLong);
  world.broadcast(shared, 0);
  layers.assign(shared.data_ptr<int64_t>(), shared.data_ptr<int64_t>() + shared.numel());
  *note += str(" (", profile_note, ")");
  return resolved;
}

}  // namespace strata
