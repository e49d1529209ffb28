// Stage partition: balanced against the first and last stages' extra work, exact counts; the
// stages a config's layout makes.
#include <gtest/gtest.h>

#include <numeric>

#include "expect_error.h"
#include "strata/core/error.h"
#include "strata/core/stages.h"

namespace strata {
namespace {

TEST(Partition, EvenWithoutExtras) {
  EXPECT_EQ(balanced_partition(8, 4, 1.0, 0, 0), (std::vector<int64_t>{2, 2, 2, 2}));
  EXPECT_EQ(balanced_partition(7, 3, 1.0, 0, 0), (std::vector<int64_t>{3, 2, 2}));  // ties: earlier
  EXPECT_EQ(balanced_partition(5, 5, 1.0, 0, 0), (std::vector<int64_t>{1, 1, 1, 1, 1}));
  EXPECT_EQ(balanced_partition(3, 1, 1.0, 0, 0), (std::vector<int64_t>{3}));
}

TEST(Partition, HeadCostTakesLayersFromTheLastStage) {
  // The head costs two layers: the last stage gets two fewer.
  EXPECT_EQ(balanced_partition(10, 3, 1.0, 0.0, 2.0), (std::vector<int64_t>{4, 4, 2}));
  EXPECT_EQ(balanced_partition(4, 2, 1.0, 0.0, 100.0), (std::vector<int64_t>{3, 1}));
}

TEST(Partition, ErrorsSayWhatWorks) {
  EXPECT_CONTAINS(testing::user_error([] { balanced_partition(3, 4, 1.0, 0, 0); }),
                  "parallel.pp * parallel.vpp <= 3");
  EXPECT_THROW(check_partition({2, 2}, 5, 2), UserError);
  EXPECT_THROW(check_partition({2, 0, 3}, 5, 3), UserError);
  EXPECT_THROW(check_partition({5}, 5, 2), UserError);
  check_partition({2, 3}, 5, 2);
}

// The stages training and serving build: parallel.pp_layers when given, else balanced; each
// stage starts where the ones before it end.
TEST(StageLayers, GivenOrBalancedAndTheirFirstLayers) {
  ModelConfig model;
  model.n_layers = 8;
  ParallelConfig parallel;
  parallel.pp = 2;
  parallel.vpp = 2;
  const std::vector<int64_t> balanced = stage_layers(parallel, model.shape());
  ASSERT_EQ(balanced.size(), 4u);
  EXPECT_EQ(std::accumulate(balanced.begin(), balanced.end(), int64_t{0}), 8);
  parallel.pp_layers = {1, 2, 2, 3};
  EXPECT_EQ(stage_layers(parallel, model.shape()), parallel.pp_layers);
  const std::vector<int64_t> first = {0, 1, 3, 5};
  for (int64_t stage = 0; stage < 4; ++stage) {
    EXPECT_EQ(first_layer_of(parallel.pp_layers, stage), first[stage]) << "stage " << stage;
  }
  parallel.pp_layers = {1, 2, 2, 2};
  EXPECT_CONTAINS(testing::user_error([&] { stage_layers(parallel, model.shape()); }),
                  "parallel.pp_layers sums to 7 layers but model.n_layers is 8");
}

}  // namespace
}  // namespace strata
