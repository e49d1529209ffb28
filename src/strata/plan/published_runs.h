// Published large-model training runs (configs/published/training_runs.toml): each one's model,
// cluster, layout and batch as its paper gives them, and the throughput it reports. The planner's
// device presets are calibrated on them (docs/planner.md); `strata plan published` and
// tests/plan/test_published_runs.cpp put every prediction next to its published number.
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
  std::string stack;            // the software it ran on
  double stack_efficiency = 1;  // its throughput relative to the cost model's runtime
};

struct PublishedRuns {
  double tolerance = 0.1;  // relative: how close every prediction must be
  std::vector<PublishedRun> runs;
};

// Reads the file ("" = the copy of configs/published/training_runs.toml built into strata);
// UserError naming the file, the run and the key for anything missing or wrong.
PublishedRuns load_published_runs(const std::string& path);

// The prediction's value in the metric (a throughput: "mfu" or "hardware_tflops_per_device").
double metric_of(const Prediction& prediction, const std::string& metric);

// The run's predicted value in its metric: the prediction's, times its stack's efficiency.
double predicted_value(const PublishedRun& run, const Prediction& prediction);

// Every run predicted once: "| run | layout | published | predicted | predicted / published |
// step (s) | ... |", one row per run as docs/planner.md shows it, and a closing line "N of M
// runs within 10% of their published number"; `within` is N.
struct PublishedReport {
  std::string text;
  size_t within = 0;
};
PublishedReport published_runs_report(const PublishedRuns& runs);

}  // namespace strata
