// The published runs' table: the full fit's in-sample predictions and the leave-one-out ones,
// each with its relative error, and the summary of both.
#include "strata/plan/published_report.h"

#include <algorithm>
#include <cmath>
#include <cstdio>

#include "strata/core/error.h"
#include "strata/plan/calibration_fit.h"

namespace strata {
namespace {

std::string formatted(const char* format, double value) {
  char buffer[48];
  std::snprintf(buffer, sizeof buffer, format, value);
  return buffer;
}

std::string in_metric(const std::string& metric, double value) {
  return metric == "mfu" ? formatted("%.1f%% MFU", 100 * value) : formatted("%.0f TFLOP/s", value);
}

std::string percent(double error) { return formatted("%+.1f%%", 100 * error); }

bool is_free(const std::vector<std::string>& free, const std::string& name) {
  return std::find(free.begin(), free.end(), name) != free.end();
}

// "matmul_efficiency = 0.859; megatron-deepspeed 0.758": the fitted values, or with
// names = false only the numbers, for the table.
std::string fitted_values(const PublishedRuns& runs, const CalibrationFit& fit, bool names) {
  std::string out;
  for (const std::string& name : fit.free) {
    if (name == "stack") continue;
    const double value = fit.constants.device.at(name);
    out += str(out.empty() ? "" : ", ", names ? name + " = " : "",
               formatted(name == "matmul_efficiency" ? "%.3f" : "%.3g", value));
  }
  if (!is_free(fit.free, "stack")) return out;
  std::string stacks;
  for (const auto& [stack, efficiency] : fit.constants.stack_efficiency) {
    if (stack == runs.reference_stack) continue;
    stacks += str(stacks.empty() ? "" : ", ", stack, " ", formatted("%.3f", efficiency));
  }
  return out + (out.empty() || stacks.empty() ? "" : "; ") + stacks;
}

// What was fitted on what, and what was not fitted.
std::string fit_lines(const PublishedRuns& runs, const CalibrationFit& fit) {
  std::string out = str("fitted on all ", fit.rows.size(), " runs (",
                        runs.runs.front().inputs.cluster.device.name,
                        "; least squares on log(predicted / published), plan/calibration_fit.h): ",
                        fit.free.empty() ? "nothing" : fitted_values(runs, fit, true), "\n");
  if (is_free(fit.free, "stack")) {
    out += str("stack factors: each stack's throughput against ", runs.reference_stack,
               " (1, the runtime the cost model describes), one per stack, fitted on that "
               "stack's runs only\n");
  } else {
    out += "stack factors: none (every stack predicted as the cost model's runtime)\n";
  }
  std::string kept;
  const DeviceProfile& device = runs.runs.front().inputs.cluster.device;
  for (const std::string& name : fittable_constants()) {
    if (name == "stack" || is_free(fit.free, name)) continue;
    kept += str(kept.empty() ? "" : ", ", name, " = ",
                formatted("%.3g", device_constant_value(device, name)));
  }
  if (!kept.empty()) out += str("not fitted (the runs' preset): ", kept, "\n");
  return out;
}

// The rows that left-out groups join, as "A with B" lines.
std::string grouped_runs(const PublishedRuns& runs, const std::vector<LeaveOneOut>& loo) {
  std::string out;
  for (const LeaveOneOut& entry : loo) {
    if (entry.left_out.size() < 2 || entry.left_out.front() != entry.row) continue;
    std::string names;
    for (size_t row : entry.left_out) {
      names += str(names.empty() ? "" : " and ", runs.runs[row].name);
    }
    out += str(out.empty() ? "" : "; ", names);
  }
  return out;
}

struct ErrorSummary {
  double max = 0, sum = 0;
  size_t count = 0;
  void add(double error) {
    max = std::max(max, std::abs(error));
    sum += std::abs(error);
    ++count;
  }
  std::string text() const {
    return str("max |error| ", formatted("%.1f%%", 100 * max), ", mean |error| ",
               formatted("%.1f%%", count ? 100 * sum / count : 0.0), " over ", count, " runs");
  }
};

}  // namespace

PublishedReport published_runs_report(const PublishedRuns& runs,
                                      const std::vector<std::string>& free) {
  std::vector<size_t> all(runs.runs.size());
  for (size_t i = 0; i < all.size(); ++i) all[i] = i;
  const CalibrationFit fit = fit_calibration(runs, all, free);
  const std::vector<LeaveOneOut> loo = leave_one_out(runs, free);

  PublishedReport report;
  std::string& out = report.text;
  out = fit_lines(runs, fit);
  const std::string groups = grouped_runs(runs, loo);
  out += str("leave-one-out: each run predicted by the same constants fitted on the other runs",
             groups.empty()
                 ? ""
                 : str(" (one training run in two metrics is left out whole: ", groups, ")"),
             "\n\n");
  out +=
      "| run | devices | layout | stack | published | in-sample | error | leave-one-out | error | "
      "fitted without it | step (s) | compute | tp comm | bubble | dp comm | source |\n"
      "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- "
      "| --- |\n";
  ErrorSummary in_sample, out_of_sample;
  std::vector<std::string> unpredictable;
  for (size_t i = 0; i < runs.runs.size(); ++i) {
    const PublishedRun& run = runs.runs[i];
    const Prediction prediction =
        CostModel(calibrated_inputs(run, fit.constants)).predict(run.layout);
    const std::optional<double> predicted = predict_run(run, fit.constants);
    STRATA_CHECK(predicted.has_value(), "bug: ", run.name, " was fitted but has no stack factor");
    const double error = *predicted / run.published - 1;
    in_sample.add(error);
    if (std::abs(error) <= runs.tolerance) ++report.within;
    std::string held_out = "— | — | no other run of its stack to fit its factor on";
    if (loo[i].predicted) {
      const double loo_error = *loo[i].predicted / run.published - 1;
      out_of_sample.add(loo_error);
      held_out = str(in_metric(run.metric, *loo[i].predicted), " | ", percent(loo_error), " | ",
                     fitted_values(runs, loo[i].fit, false));
    } else {
      unpredictable.push_back(run.name);
    }
    char numbers[96];
    std::snprintf(numbers, sizeof numbers, "%.2f | %.2f | %.2f | %.2f | %.2f",
                  prediction.step_time_s, prediction.time.compute, prediction.time.tensor_parallel,
                  prediction.time.pipeline_bubble, prediction.time.data_parallel);
    out +=
        str("| ", run.name, " | ", run.inputs.cluster.devices(), " ",
            run.inputs.cluster.device.name, " | ", layout_to_string(run.layout), " | ", run.stack,
            " | ", in_metric(run.metric, run.published), " | ", in_metric(run.metric, *predicted),
            " | ", percent(error), " | ", held_out, " | ", numbers, " | ", run.source, " |\n");
  }
  out += str("\nin-sample: ", in_sample.text(), "\nleave-one-out: ", out_of_sample.text());
  for (size_t i = 0; i < unpredictable.size(); ++i) {
    out += str(i == 0 ? " (not predictable out of sample: " : ", ", unpredictable[i]);
  }
  out += unpredictable.empty() ? "\n" : ")\n";
  out += str(report.within, " of ", runs.runs.size(), " runs within ", 100 * runs.tolerance,
             "% of their published number in sample\n");
  return report;
}

}  // namespace strata
