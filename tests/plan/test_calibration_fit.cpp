// The calibration fit (plan/calibration_fit.h) on synthetic published numbers: the published
// runs' models and layouts with "published" values the cost model itself gives under known
// constants, so the fit must find those constants again, and a leave-one-out must predict each
// row without it (an outlier row is far off out of sample, nearer in sample).
#include <gtest/gtest.h>

#include <cmath>

#include "expect_error.h"
#include "strata/plan/calibration_fit.h"
#include "strata/plan/published_runs.h"

namespace strata {
namespace {

const std::map<std::string, double> kTrueDevice = {
    {"matmul_efficiency", 0.78}, {"matmul_half_dim", 200.0}, {"kernel_overhead_us", 8.0}};
constexpr double kTrueStack = 0.7;  // megatron-deepspeed against megatron-lm

CalibrationConstants truth() {
  CalibrationConstants constants;
  constants.device = kTrueDevice;
  constants.stack_efficiency = {{"megatron-lm", 1.0}, {"megatron-deepspeed", kTrueStack}};
  return constants;
}

// The built-in runs, each published value replaced by the cost model's under the truth; their
// devices keep the preset's constants, where a fit starts.
PublishedRuns synthetic_runs() {
  PublishedRuns runs = load_published_runs("");
  for (PublishedRun& run : runs.runs) run.published = *predict_run(run, truth());
  return runs;
}

// The runs' devices given the true constants, as a fit that frees only some of them needs.
void move_to_true_device(PublishedRuns& runs) {
  for (PublishedRun& run : runs.runs) run.inputs = calibrated_inputs(run, truth());
}

std::vector<size_t> rows_of_stack(const PublishedRuns& runs, const std::string& stack) {
  std::vector<size_t> rows;
  for (size_t i = 0; i < runs.runs.size(); ++i) {
    if (runs.runs[i].stack == stack) rows.push_back(i);
  }
  return rows;
}

double error_of(const PublishedRun& run, double predicted) { return predicted / run.published - 1; }

// From the presets' values (0.86, 128, 5, no stack factor yet) to the synthetic truth.
TEST(CalibrationFit, RecoversKnownConstants) {
  const PublishedRuns runs = synthetic_runs();
  std::vector<size_t> all(runs.runs.size());
  for (size_t i = 0; i < all.size(); ++i) all[i] = i;
  const CalibrationFit fit = fit_calibration(
      runs, all, {"matmul_efficiency", "matmul_half_dim", "kernel_overhead_us", "stack"});
  for (const auto& [name, value] : kTrueDevice) {
    EXPECT_NEAR(fit.constants.device.at(name), value, 0.01 * value) << name;
  }
  EXPECT_NEAR(fit.constants.stack_efficiency.at("megatron-deepspeed"), kTrueStack, 1e-3);
  EXPECT_EQ(fit.constants.stack_efficiency.at("megatron-lm"), 1.0);
  EXPECT_LT(fit.sum_squared_log_error, 1e-6);
}

// A constant that is not freed keeps the preset's value; without "stack" every factor is 1.
TEST(CalibrationFit, OnlyTheFreeConstantsMove) {
  const PublishedRuns runs = synthetic_runs();
  const CalibrationFit fit =
      fit_calibration(runs, rows_of_stack(runs, "megatron-lm"), {"matmul_efficiency"});
  EXPECT_EQ(fit.constants.device.size(), 1u);
  EXPECT_NE(fit.constants.device.at("matmul_efficiency"), 0.86);
  const PlanInputs inputs = calibrated_inputs(runs.runs.front(), fit.constants);
  EXPECT_EQ(inputs.cluster.device.matmul_half_dim, 128.0);
  EXPECT_EQ(inputs.cluster.device.kernel_overhead_us, 5.0);
  EXPECT_EQ(fit.constants.stack_efficiency.at("megatron-deepspeed"), 1.0);
  EXPECT_CONTAINS(testing::user_error([&] { fit_calibration(runs, {0}, {"peak_tflops"}); }),
                  "'peak_tflops' is not a constant the calibration fits");
}

// Four Megatron-LM rows, exact under matmul_efficiency 0.78 (the other constants as the truth),
// the first made 20% faster than the model says. Fitted without it, the other three give 0.78
// back and it is predicted 1/1.2 - 1 off; fitted with it, the fit leans towards it, so its
// in-sample error is smaller and the others' leave-one-out errors are not zero.
TEST(CalibrationFit, LeaveOneOutPredictsEachRowWithoutIt) {
  PublishedRuns runs = synthetic_runs();
  const std::vector<size_t> korthikanti = rows_of_stack(runs, "megatron-lm");
  ASSERT_EQ(korthikanti.size(), 4u);
  PublishedRuns four;
  four.reference_stack = runs.reference_stack;
  for (size_t row : korthikanti) four.runs.push_back(runs.runs[row]);
  move_to_true_device(four);
  for (PublishedRun& run : four.runs) run.inputs.cluster.device.matmul_efficiency = 0.86;
  four.runs[0].published *= 1.2;

  const std::vector<LeaveOneOut> loo = leave_one_out(four, {"matmul_efficiency"});
  ASSERT_EQ(loo.size(), 4u);
  for (size_t i = 0; i < loo.size(); ++i) {
    EXPECT_EQ(loo[i].row, i);
    EXPECT_EQ(loo[i].left_out, std::vector<size_t>{i});
    ASSERT_TRUE(loo[i].predicted.has_value()) << i;
  }
  EXPECT_NEAR(loo[0].fit.constants.device.at("matmul_efficiency"), 0.78, 1e-4);
  const double outlier_loo = error_of(four.runs[0], *loo[0].predicted);
  EXPECT_NEAR(outlier_loo, 1 / 1.2 - 1, 1e-3);

  const CalibrationFit all = fit_calibration(four, {0, 1, 2, 3}, {"matmul_efficiency"});
  const double outlier_in_sample =
      error_of(four.runs[0], *predict_run(four.runs[0], all.constants));
  EXPECT_LT(std::abs(outlier_in_sample), std::abs(outlier_loo) - 0.01)
      << "in sample " << outlier_in_sample << ", out of sample " << outlier_loo;
  for (size_t i = 1; i < 4; ++i) {
    EXPECT_GT(std::abs(error_of(four.runs[i], *loo[i].predicted)), 0.01) << four.runs[i].name;
  }
}

// One training run published in two metrics (MT-NLG's 280 nodes: TFLOP/s and PaLM's MFU) is
// left out whole; a stack whose runs are all left out has no factor to predict with.
TEST(CalibrationFit, LeaveOneOutLeavesOutTheWholeRunAndSaysWhenAStackCannotBePredicted) {
  PublishedRuns runs = synthetic_runs();
  move_to_true_device(runs);
  size_t mt_nlg = runs.runs.size(), palm = runs.runs.size(), bloom = runs.runs.size();
  for (size_t i = 0; i < runs.runs.size(); ++i) {
    if (runs.runs[i].name == "MT-NLG 530B, 280 nodes") mt_nlg = i;
    if (runs.runs[i].name == "MT-NLG 530B, PaLM's MFU") palm = i;
    if (runs.runs[i].name == "BLOOM 176B") bloom = i;
  }
  ASSERT_LT(std::max({mt_nlg, palm, bloom}), runs.runs.size());
  EXPECT_TRUE(same_training_run(runs.runs[mt_nlg], runs.runs[palm]));
  EXPECT_FALSE(same_training_run(runs.runs[mt_nlg], runs.runs[bloom]));

  runs.runs[bloom].stack = "bloom-only";
  const std::vector<LeaveOneOut> loo = leave_one_out(runs, {"stack"});
  ASSERT_EQ(loo.size(), runs.runs.size());
  EXPECT_EQ(loo[mt_nlg].left_out, (std::vector<size_t>{mt_nlg, palm}));
  EXPECT_EQ(loo[palm].left_out, (std::vector<size_t>{mt_nlg, palm}));
  for (size_t row : loo[palm].fit.rows) EXPECT_NE(row, mt_nlg);
  EXPECT_FALSE(loo[bloom].predicted.has_value());
  // The exact synthetic rows: every other one is predicted without error.
  for (size_t i = 0; i < loo.size(); ++i) {
    if (i == bloom) continue;
    ASSERT_TRUE(loo[i].predicted.has_value()) << runs.runs[i].name;
    EXPECT_NEAR(error_of(runs.runs[i], *loo[i].predicted), 0, 1e-9) << runs.runs[i].name;
  }
}

}  // namespace
}  // namespace strata
