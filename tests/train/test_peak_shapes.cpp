// The shapes a run's MFU is measured against (run_peak_shapes): the run's own forward products
// at its rows, capped, without duplicates; the peak is the fastest of them.
#include <gtest/gtest.h>

#include <algorithm>

#include "strata/train/trainer.h"

namespace strata {
namespace {

bool holds(const std::vector<MatmulShape>& shapes, MatmulShape shape) {
  return std::any_of(shapes.begin(), shapes.end(), [&](const MatmulShape& s) {
    return s.m == shape.m && s.k == shape.k && s.n == shape.n;
  });
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

TEST(PeakShapes, ThePeakIsTheFastestShape) {
  const std::vector<MatmulShape> shapes = {{256, 64, 256}, {256, 256, 64}};
  const double both = measure_matmul_peak_flops(at::kFloat, shapes);
  EXPECT_GT(both, 0);
  // Measured once per process: asking again returns the same number, not a new timing.
  EXPECT_EQ(measure_matmul_peak_flops(at::kFloat, shapes), both);
}

}  // namespace
}  // namespace strata
