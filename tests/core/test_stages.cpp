// Stage partition: balanced against the first and last stages' extra work, exact counts.
#include <gtest/gtest.h>

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

}  // namespace
}  // namespace strata
