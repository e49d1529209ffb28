// The planner's calibration as code: the device constants (and a throughput factor per software
// stack) fitted to published training runs (published_runs.h), and the fit's out-of-sample
// check, each run predicted by the constants fitted without it (docs/planner.md, Calibration).
#pragma once
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "strata/plan/published_runs.h"

namespace strata {

// The names a fit may free: the device constants matmul_efficiency, matmul_half_dim and
// kernel_overhead_us (one value for every run's device), and "stack": one throughput factor per
// software stack other than the file's reference_stack (the runtime the cost model describes).
// A device constant not freed keeps the runs' preset value; without "stack" every factor is 1.
const std::vector<std::string>& fittable_constants();

struct CalibrationConstants {
  // The fitted device constants; the others keep each run's own (its preset's) values.
  std::map<std::string, double> device;
  // Per stack with a factor: the reference's is 1; a stack without an entry has no fitted run.
  std::map<std::string, double> stack_efficiency;
};

struct CalibrationFit {
  std::vector<std::string> free;  // what was fitted
  std::vector<size_t> rows;       // indices into runs.runs of the runs fitted on
  CalibrationConstants constants;
  double sum_squared_log_error = 0;  // over `rows`, at `constants`
};

// Fits the free constants to runs.runs[rows]: least squares on log(predicted / published),
// each stack's factor in closed form (the mean log ratio of its runs) inside a
// Levenberg-Marquardt search over the device constants, which starts at the runs' preset values
// and stays within each constant's physical range. UserError for a name not in
// fittable_constants(), or device constants freed over runs on different devices.
CalibrationFit fit_calibration(const PublishedRuns& runs, const std::vector<size_t>& rows,
                               const std::vector<std::string>& free);

// The value of a fittable device constant (not "stack") on the device.
double device_constant_value(const DeviceProfile& device, const std::string& name);

// The run's inputs with the constants' device values.
PlanInputs calibrated_inputs(const PublishedRun& run, const CalibrationConstants& constants);

// The run's prediction in its metric under the constants; nullopt when its stack has no factor.
std::optional<double> predict_run(const PublishedRun& run, const CalibrationConstants& constants);

// Whether two rows are one training run published in two metrics (the same model, cluster,
// nodes, layout and batch): a leave-one-out leaves them out together.
bool same_training_run(const PublishedRun& a, const PublishedRun& b);

struct LeaveOneOut {
  size_t row = 0;
  std::vector<size_t> left_out;     // the row and the other rows of its training run
  CalibrationFit fit;               // on every other row
  std::optional<double> predicted;  // nullopt: no run of its stack is left to fit the factor on
};

// Every row predicted by the free constants fitted without it (and without the other rows of
// its training run); one entry per row, in order.
std::vector<LeaveOneOut> leave_one_out(const PublishedRuns& runs,
                                       const std::vector<std::string>& free);

}  // namespace strata
