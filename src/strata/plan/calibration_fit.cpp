// Least squares on log(predicted / published) over the published runs, and leave-one-out.
//
// How the fit works. A run's residual is r = log(raw(θ)) + log(f_stack) − log(published), with
// raw(θ) the cost model's prediction under the device constants θ (at most three). For fixed θ
// the best log(f_stack) of a stack is the mean of log(published / raw) over its runs, so the
// factors are solved exactly inside every evaluation of the residuals and the search runs over
// θ alone: Levenberg-Marquardt with forward-difference Jacobians, θ measured in units of each
// constant's typical size and clamped to its physical range.
#include "strata/plan/calibration_fit.h"

#include <algorithm>
#include <cmath>

#include "strata/core/error.h"

namespace strata {
namespace {

struct DeviceConstant {
  const char* name;
  double DeviceProfile::*field;
  double lower, upper;  // its physical range
  double scale;         // its typical size: the search's unit
};

const std::vector<DeviceConstant>& device_constants() {
  static const std::vector<DeviceConstant> constants = {
      {"matmul_efficiency", &DeviceProfile::matmul_efficiency, 0.05, 1.0, 0.1},
      {"matmul_half_dim", &DeviceProfile::matmul_half_dim, 0.0, 4096.0, 100.0},
      {"kernel_overhead_us", &DeviceProfile::kernel_overhead_us, 0.0, 200.0, 5.0}};
  return constants;
}

const DeviceConstant* device_constant(const std::string& name) {
  for (const DeviceConstant& constant : device_constants()) {
    if (name == constant.name) return &constant;
  }
  return nullptr;
}

PlanInputs with_device(const PublishedRun& run, const std::map<std::string, double>& device) {
  PlanInputs inputs = run.inputs;
  for (const auto& [name, value] : device)
    inputs.cluster.device.*device_constant(name)->field = value;
  return inputs;
}

double raw_prediction(const PublishedRun& run, const std::map<std::string, double>& device) {
  return metric_of(CostModel(with_device(run, device)).predict(run.layout), run.metric);
}

// The search over the free device constants, in units of their scale.
class Objective {
 public:
  Objective(const PublishedRuns& runs, const std::vector<size_t>& rows,
            std::vector<const DeviceConstant*> free, bool fit_stacks)
      : runs_(runs), rows_(rows), free_(std::move(free)), fit_stacks_(fit_stacks) {}

  size_t dimensions() const { return free_.size(); }

  // Where the search starts: the free constants' values on this device.
  std::vector<double> point_of(const DeviceProfile& device) const {
    std::vector<double> x;
    for (const DeviceConstant* constant : free_)
      x.push_back(device.*constant->field / constant->scale);
    return x;
  }

  std::vector<double> clamped(std::vector<double> x) const {
    for (size_t i = 0; i < x.size(); ++i) {
      x[i] = std::clamp(x[i], free_[i]->lower / free_[i]->scale, free_[i]->upper / free_[i]->scale);
    }
    return x;
  }

  // Whether constant i at x sits at the end of its range that `direction` points past.
  bool held_at_bound(size_t i, double x, double direction) const {
    return (direction < 0 && x <= free_[i]->lower / free_[i]->scale) ||
           (direction > 0 && x >= free_[i]->upper / free_[i]->scale);
  }

  CalibrationConstants constants_at(const std::vector<double>& x) const {
    CalibrationConstants constants;
    for (size_t i = 0; i < x.size(); ++i) constants.device[free_[i]->name] = x[i] * free_[i]->scale;
    return constants;
  }

  // The residuals at x, with the stack factors they imply written into `constants`.
  std::vector<double> residuals(const std::vector<double>& x,
                                CalibrationConstants* constants) const {
    *constants = constants_at(x);
    std::vector<double> log_ratio;                           // log(raw / published) per row
    std::map<std::string, std::pair<double, int>> by_stack;  // sum of -log_ratio, runs
    for (size_t row : rows_) {
      const PublishedRun& run = runs_.runs[row];
      log_ratio.push_back(std::log(raw_prediction(run, constants->device) / run.published));
      auto& [sum, count] = by_stack[run.stack];
      sum -= log_ratio.back();
      ++count;
    }
    for (const auto& [stack, sum_count] : by_stack) {
      const bool fitted = fit_stacks_ && stack != runs_.reference_stack;
      constants->stack_efficiency[stack] =
          fitted ? std::exp(sum_count.first / sum_count.second) : 1.0;
    }
    std::vector<double> out;
    for (size_t i = 0; i < rows_.size(); ++i) {
      out.push_back(log_ratio[i] +
                    std::log(constants->stack_efficiency.at(runs_.runs[rows_[i]].stack)));
    }
    return out;
  }

  // Forward differences, backward at the upper end of a constant's range.
  std::vector<std::vector<double>> jacobian(const std::vector<double>& x,
                                            const std::vector<double>& r) const {
    constexpr double kStep = 1e-4;
    std::vector<std::vector<double>> columns;
    for (size_t j = 0; j < x.size(); ++j) {
      std::vector<double> moved = x;
      const double step = x[j] + kStep > free_[j]->upper / free_[j]->scale ? -kStep : kStep;
      moved[j] += step;
      CalibrationConstants unused;
      const std::vector<double> r_moved = residuals(moved, &unused);
      std::vector<double> column;
      for (size_t i = 0; i < r.size(); ++i) column.push_back((r_moved[i] - r[i]) / step);
      columns.push_back(column);
    }
    return columns;
  }

 private:
  const PublishedRuns& runs_;
  const std::vector<size_t>& rows_;
  std::vector<const DeviceConstant*> free_;
  bool fit_stacks_;
};

std::string comma_list(const std::vector<std::string>& names) {
  std::string out;
  for (const std::string& name : names) out += (out.empty() ? "" : ", ") + name;
  return out;
}

double sum_of_squares(const std::vector<double>& r) {
  double sum = 0;
  for (double value : r) sum += value * value;
  return sum;
}

// Solves A x = b (n <= 3, A symmetric positive definite after damping) by Gaussian elimination.
std::vector<double> solve(std::vector<std::vector<double>> a, std::vector<double> b) {
  const size_t n = b.size();
  for (size_t k = 0; k < n; ++k) {
    size_t pivot = k;
    for (size_t i = k + 1; i < n; ++i) {
      if (std::abs(a[i][k]) > std::abs(a[pivot][k])) pivot = i;
    }
    std::swap(a[k], a[pivot]);
    std::swap(b[k], b[pivot]);
    STRATA_CHECK(a[k][k] != 0, "bug: singular damped normal equations in fit_calibration");
    for (size_t i = k + 1; i < n; ++i) {
      const double factor = a[i][k] / a[k][k];
      for (size_t j = k; j < n; ++j) a[i][j] -= factor * a[k][j];
      b[i] -= factor * b[k];
    }
  }
  std::vector<double> x(n);
  for (size_t k = n; k-- > 0;) {
    double sum = b[k];
    for (size_t j = k + 1; j < n; ++j) sum -= a[k][j] * x[j];
    x[k] = sum / a[k][k];
  }
  return x;
}

// Levenberg-Marquardt from `x`: damped Gauss-Newton steps, the damping raised until a step
// lowers the sum of squares and lowered after one that does; a constant at an end of its range
// that the descent direction would push beyond it stays there for that step. Done when no step
// lowers the sum by more than a relative 1e-9.
std::vector<double> minimise(const Objective& objective, std::vector<double> x) {
  constexpr double kConverged = 1e-9;
  CalibrationConstants unused;
  std::vector<double> r = objective.residuals(x, &unused);
  double cost = sum_of_squares(r);
  double damping = 1e-3;
  const size_t n = x.size();
  for (int iteration = 0; iteration < 100; ++iteration) {
    const std::vector<std::vector<double>> columns = objective.jacobian(x, r);
    std::vector<std::vector<double>> normal(n, std::vector<double>(n));
    std::vector<double> descent(n);  // -J^T r
    for (size_t a = 0; a < n; ++a) {
      for (size_t b = 0; b < n; ++b) {
        for (size_t i = 0; i < r.size(); ++i) normal[a][b] += columns[a][i] * columns[b][i];
      }
      for (size_t i = 0; i < r.size(); ++i) descent[a] -= columns[a][i] * r[i];
    }
    for (size_t a = 0; a < n; ++a) {
      if (!objective.held_at_bound(a, x[a], descent[a])) continue;
      for (size_t b = 0; b < n; ++b) normal[a][b] = normal[b][a] = 0;
      normal[a][a] = 1;
      descent[a] = 0;
    }
    bool improved = false;
    while (!improved && damping < 1e12) {
      std::vector<std::vector<double>> damped = normal;
      for (size_t a = 0; a < n; ++a) damped[a][a] += damping * (normal[a][a] + 1e-12);
      const std::vector<double> step = solve(damped, descent);
      std::vector<double> next = x;
      for (size_t a = 0; a < n; ++a) next[a] += step[a];
      next = objective.clamped(next);
      const std::vector<double> r_next = objective.residuals(next, &unused);
      const double cost_next = sum_of_squares(r_next);
      if (cost_next < cost) {
        improved = true;
        const bool converged = cost - cost_next <= kConverged * cost;
        x = next;
        r = r_next;
        cost = cost_next;
        damping = std::max(damping / 10, 1e-9);
        if (converged) return x;
      } else {
        damping *= 10;
      }
    }
    if (!improved) return x;
  }
  return x;
}

}  // namespace

const std::vector<std::string>& fittable_constants() {
  static const std::vector<std::string> names = [] {
    std::vector<std::string> list;
    for (const DeviceConstant& constant : device_constants()) list.push_back(constant.name);
    list.push_back("stack");
    return list;
  }();
  return names;
}

CalibrationFit fit_calibration(const PublishedRuns& runs, const std::vector<size_t>& rows,
                               const std::vector<std::string>& free) {
  STRATA_REQUIRE(!rows.empty(), "a calibration fit needs at least one run");
  std::vector<const DeviceConstant*> free_device;
  bool fit_stacks = false;
  for (const std::string& name : free) {
    const DeviceConstant* constant = device_constant(name);
    STRATA_REQUIRE(constant != nullptr || name == "stack", "'", name,
                   "' is not a constant the calibration fits; it fits ",
                   comma_list(fittable_constants()));
    STRATA_REQUIRE(std::count(free.begin(), free.end(), name) == 1, "'", name,
                   "' is listed more than once in the constants to fit");
    if (constant != nullptr) free_device.push_back(constant);
    fit_stacks = fit_stacks || name == "stack";
  }
  const DeviceProfile& device = runs.runs[rows.front()].inputs.cluster.device;
  for (size_t row : rows) {
    const PublishedRun& run = runs.runs[row];
    STRATA_REQUIRE(free_device.empty() || run.inputs.cluster.device.name == device.name, run.name,
                   " runs on ", run.inputs.cluster.device.name, " and ",
                   runs.runs[rows.front()].name, " on ", device.name,
                   ": the device constants are fitted in common; fit one device's runs at a time");
  }
  const Objective objective(runs, rows, free_device, fit_stacks);
  const std::vector<double> x =
      objective.dimensions() == 0
          ? std::vector<double>{}
          : minimise(objective, objective.clamped(objective.point_of(device)));
  CalibrationFit fit;
  fit.free = free;
  fit.rows = rows;
  fit.sum_squared_log_error = sum_of_squares(objective.residuals(x, &fit.constants));
  fit.constants.stack_efficiency[runs.reference_stack] = 1.0;
  if (!fit_stacks) {
    for (const PublishedRun& run : runs.runs) fit.constants.stack_efficiency[run.stack] = 1.0;
  }
  return fit;
}

double device_constant_value(const DeviceProfile& device, const std::string& name) {
  const DeviceConstant* constant = device_constant(name);
  STRATA_CHECK(constant != nullptr, "bug: '", name, "' is not a fittable device constant");
  return device.*constant->field;
}

PlanInputs calibrated_inputs(const PublishedRun& run, const CalibrationConstants& constants) {
  return with_device(run, constants.device);
}

std::optional<double> predict_run(const PublishedRun& run, const CalibrationConstants& constants) {
  const auto stack = constants.stack_efficiency.find(run.stack);
  if (stack == constants.stack_efficiency.end()) return std::nullopt;
  return raw_prediction(run, constants.device) * stack->second;
}

bool same_training_run(const PublishedRun& a, const PublishedRun& b) {
  const ModelShape& x = a.inputs.model;
  const ModelShape& y = b.inputs.model;
  return a.inputs.cluster.name == b.inputs.cluster.name &&
         a.inputs.cluster.nodes == b.inputs.cluster.nodes &&
         a.inputs.global_batch == b.inputs.global_batch &&
         layout_to_string(a.layout) == layout_to_string(b.layout) && x.n_layers == y.n_layers &&
         x.d_model == y.d_model && x.n_heads == y.n_heads && x.vocab_size == y.vocab_size &&
         x.seq_len == y.seq_len;
}

std::vector<LeaveOneOut> leave_one_out(const PublishedRuns& runs,
                                       const std::vector<std::string>& free) {
  std::vector<LeaveOneOut> out;
  for (size_t row = 0; row < runs.runs.size(); ++row) {
    LeaveOneOut entry;
    entry.row = row;
    std::vector<size_t> kept;
    for (size_t other = 0; other < runs.runs.size(); ++other) {
      const bool together = same_training_run(runs.runs[row], runs.runs[other]);
      (together ? entry.left_out : kept).push_back(other);
    }
    // A row of the same run as an earlier one shares its fit.
    const auto earlier = std::find_if(out.begin(), out.end(), [&](const LeaveOneOut& previous) {
      return previous.left_out == entry.left_out;
    });
    if (kept.empty()) {
      out.push_back(entry);
      continue;
    }
    entry.fit = earlier != out.end() ? earlier->fit : fit_calibration(runs, kept, free);
    entry.predicted = predict_run(runs.runs[row], entry.fit.constants);
    out.push_back(entry);
  }
  return out;
}

}  // namespace strata
