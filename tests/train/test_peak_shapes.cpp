// The shapes a run's MFU is measured against (run_peak_shapes): the run's own forward products
// at its rows, capped, without duplicates; the peak is the fastest of them.
#include <gtest/gtest.h>

#include <algorithm>
#include <functional>

#include "strata/train/trainer.h"

namespace strata {
namespace {

bool holds(const std::vector<MatmulShape>& shapes, MatmulShape shape) {
  return std::find(shapes.begin(), shapes.end(), shape) != shapes.end();
}

Config small_model(int64_t micro_batch, int64_t tp) {
  Config config;
  config.model.vocab_size = 96;
  config.model.d_model = 64;
  config.model.n_heads = 4;
  config.model.n_layers = 2;
  config.model.seq_len = 32;
  config.parallel.micro_batch = micro_batch;
  config.parallel.tp = tp;
  return config;
}

TEST(PeakShapes, AreTheRunsOwnForwardProducts) {
  const std::vector<MatmulShape> shapes = run_peak_shapes(small_model(4, 1));  // 128 rows
  EXPECT_TRUE(holds(shapes, {128, 64, 256}));  // MLP up: (rows, d) x (d, 4d)
  EXPECT_TRUE(holds(shapes, {128, 256, 64}));  // MLP down
  EXPECT_TRUE(holds(shapes, {128, 64, 64}));   // q, k, v and the output projection, once
  EXPECT_TRUE(holds(shapes, {128, 64, 96}));   // the head
  EXPECT_EQ(shapes.size(), 4u);

  const std::vector<MatmulShape> tp2 = run_peak_shapes(small_model(4, 2));
  EXPECT_TRUE(holds(tp2, {128, 64, 128}));  // the rank's half of the MLP's columns
  EXPECT_TRUE(holds(tp2, {128, 128, 64}));
}

TEST(PeakShapes, RowsAreCappedAt2048) {
  const std::vector<MatmulShape> shapes = run_peak_shapes(small_model(128, 1));  // 4096 rows
  ASSERT_FALSE(shapes.empty());
  for (const MatmulShape& shape : shapes) EXPECT_EQ(shape.m, 2048);
}

TEST(PeakShapes, ContextParallelismDividesTheRowsAndFewRowsFallBack) {
  Config cp2 = small_model(4, 1);
  cp2.parallel.cp = 2;
  EXPECT_TRUE(holds(run_peak_shapes(cp2), {64, 64, 256}));  // 128 rows over 2 cp ranks
  // One sequence of 32 tokens: every product is the few-row kernel's, and the fixed shapes stand.
  const std::vector<MatmulShape> few = run_peak_shapes(small_model(1, 1));
  const std::vector<MatmulShape> fixed = matmul_peak_shapes();
  ASSERT_EQ(few.size(), fixed.size());
  for (const MatmulShape& shape : fixed) EXPECT_TRUE(holds(few, shape));
}

TEST(PeakShapes, WideModelsAreCappedAt4096) {
  Config wide = small_model(4, 1);
  wide.model.vocab_size = 50257;
  EXPECT_TRUE(holds(run_peak_shapes(wide), {128, 64, 4096}));  // the head's 50257 columns
}

TEST(PeakShapes, ThePeakIsTheFastestShape) {
  // A timer that says how long each shape took, by its FLOPs: 1e9 FLOP/s, 3e9 and 2e9.
  const std::vector<MatmulShape> shapes = {{64, 64, 64}, {64, 64, 128}, {128, 64, 64}};
  int call = 0;
  const double rates[] = {1e9, 3e9, 2e9};
  const ProductTimer timer = [&](const std::function<void()>&) {
    const MatmulShape& shape = shapes[call];
    return 2.0 * shape.m * shape.k * shape.n / rates[call++];
  };
  EXPECT_DOUBLE_EQ(fastest_shape_rate(at::kFloat, shapes, timer), 3e9);
  EXPECT_EQ(call, 3);
  // Measured once per process: asking again returns the same number, not a new timing.
  const double measured = measure_matmul_peak_flops(at::kFloat, shapes);
  EXPECT_GT(measured, 0);
  EXPECT_EQ(measure_matmul_peak_flops(at::kFloat, shapes), measured);
}

}  // namespace
}  // namespace strata
