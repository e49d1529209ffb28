// Published large-model training runs (configs/published/training_runs.toml): each one's model,
// cluster, layout and batch as its paper gives them, and the throughput it reports. The planner's
// device presets are calibrated on them (calibration_fit.h, docs/planner.md); `strata plan
// published` (published_report.h) puts every prediction next to its published number.
#pragma once
#include <string>
#include <vector>

#include "strata/plan/cost_model.h"

namespace strata {

struct PublishedRun {
  std::string name, source;
  PlanInputs inputs;   // Megatron's GPT of the published size, the preset with the run's nodes
  PlanLayout layout;   // resolved
  std::string metric;  // "mfu" or "hardware_tflops_per_device"
  double published = 0;
  std::string stack;  // the software it ran on
};

struct PublishedRuns {
  double tolerance = 0.1;  // relative: how close every in-sample prediction must be
  // The stack the cost model describes (its factor is 1), and the constants the calibration
  // fits (calibration_fit.h, fittable_constants).
  std::string reference_stack;
  std::vector<std::string> fit;
  std::vector<PublishedRun> runs;
};

// Reads the file ("" = the copy of configs/published/training_runs.toml built into strata);
// UserError naming the file, the run and the key for anything missing or wrong.
PublishedRuns load_published_runs(const std::string& path);

// The prediction's value in the metric (a throughput: "mfu" or "hardware_tflops_per_device").
double metric_of(const Prediction& prediction, const std::string& metric);

}  // namespace strata
