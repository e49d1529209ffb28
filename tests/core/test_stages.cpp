// Stage partition: balanced against the first and last stages' extra work, exact counts; the
// stages a config's layout makes.
#include <gtest/gtest.h>

#include <algorithm>
#include <functional>
#include <numeric>

#include "expect_error.h"
#include "strata/core/error.h"
#include "strata/core/stages.h"

namespace strata {
namespace {

// pp ranks of one chunk each, virtual stage r on rank r.
StagePlacement one_chunk(int64_t pp) { return {ChunkPlacement::interleaved, pp, 1}; }

SplitCosts costs(double embedding, double head) { return {1.0, embedding, head}; }

TEST(Partition, EvenWithoutExtras) {
  EXPECT_EQ(balanced_split(8, one_chunk(4), costs(0, 0)), (std::vector<int64_t>{2, 2, 2, 2}));
  EXPECT_EQ(balanced_split(7, one_chunk(3), costs(0, 0)),
            (std::vector<int64_t>{3, 2, 2}));  // ties: earlier
  EXPECT_EQ(balanced_split(5, one_chunk(5), costs(0, 0)), (std::vector<int64_t>{1, 1, 1, 1, 1}));
  EXPECT_EQ(balanced_split(3, one_chunk(1), costs(0, 0)), (std::vector<int64_t>{3}));
}

TEST(Partition, HeadCostTakesLayersFromTheLastStage) {
  // The head costs two layers: the last stage gets two fewer.
  EXPECT_EQ(balanced_split(10, one_chunk(3), costs(0, 2)), (std::vector<int64_t>{4, 4, 2}));
  EXPECT_EQ(balanced_split(4, one_chunk(2), costs(0, 100)), (std::vector<int64_t>{3, 1}));
  // vocabulary 32000 and d_model 256: the head and loss cost about ten layers.
  EXPECT_EQ(balanced_split(8, one_chunk(2), costs(0.5, 10)), (std::vector<int64_t>{7, 1}));
}

TEST(Partition, EmbeddingCostTakesLayersFromTheFirstStage) {
  EXPECT_EQ(balanced_split(10, one_chunk(3), costs(2, 0)), (std::vector<int64_t>{2, 4, 4}));
  EXPECT_EQ(balanced_split(9, one_chunk(3), costs(3, 3)), (std::vector<int64_t>{2, 5, 2}));
}

// Interleaved chunks: a rank's cost is the sum of its chunks; the head on the last virtual stage
// (rank pp - 1) takes layers from that rank's chunks, and both its chunks stay even.
TEST(Partition, InterleavedChunksSumPerRank) {
  const StagePlacement interleaved{ChunkPlacement::interleaved, 2, 2};  // 0 1 | 0 1
  EXPECT_EQ(balanced_split(8, interleaved, costs(0, 0)), (std::vector<int64_t>{2, 2, 2, 2}));
  // Rank 1 holds stages 1 and 3 (the head, four layers' worth): 8 layers on rank 0 against 4
  // and the head on rank 1, whose head chunk is the short one.
  EXPECT_EQ(balanced_split(12, interleaved, costs(0, 4)), (std::vector<int64_t>{4, 3, 4, 1}));
}

// zb-v: rank 0 holds the first virtual stage and the last, so the embedding and the head both
// land on it and its two chunks together get fewer layers.
TEST(Partition, VShapePutsEmbeddingAndHeadOnRankZero) {
  const StagePlacement v_shape{ChunkPlacement::v_shape, 2, 2};  // stages 0 1 | 1 0
  EXPECT_EQ(balanced_split(8, v_shape, costs(0, 0)), (std::vector<int64_t>{2, 2, 2, 2}));
  const std::vector<int64_t> layers = balanced_split(12, v_shape, costs(1, 3));
  // Rank 0: stages 0 and 3, 12 - rank 1's layers; the two ranks cost 8 each.
  EXPECT_EQ(layers, (std::vector<int64_t>{3, 4, 4, 1}));
  EXPECT_EQ(layers[0] + layers[3] + 1 + 3, layers[1] + layers[2]);
}

// The split is optimal: no other split of small cases has a cheaper busiest rank.
TEST(Partition, NoSplitHasACheaperBusiestRank) {
  auto busiest = [](const std::vector<int64_t>& layers, const StagePlacement& placement,
                    const SplitCosts& c) {
    std::vector<double> rank(placement.pp, 0.0);
    for (size_t s = 0; s < layers.size(); ++s) {
      rank[placement.rank_of(static_cast<int64_t>(s))] += static_cast<double>(layers[s]) * c.layer;
    }
    rank[placement.rank_of(0)] += c.embedding;
    rank[placement.rank_of(placement.virtual_stages() - 1)] += c.head;
    return *std::max_element(rank.begin(), rank.end());
  };
  for (const StagePlacement& placement :
       {StagePlacement{ChunkPlacement::interleaved, 2, 2},
        StagePlacement{ChunkPlacement::v_shape, 2, 2}, one_chunk(3)}) {
    for (const SplitCosts& c : {costs(0, 0), costs(0.7, 2.5), costs(3.2, 0.4), costs(1.5, 6)}) {
      const int64_t n = 9, stages = placement.virtual_stages();
      const double found = busiest(balanced_split(n, placement, c), placement, c);
      // Every split of n into `stages` parts >= 1, by counting through them.
      std::vector<int64_t> layers(stages, 1);
      std::function<void(int64_t, int64_t)> each = [&](int64_t stage, int64_t left) {
        if (stage == stages - 1) {
          layers[stage] = left;
          EXPECT_LE(found, busiest(layers, placement, c) + 1e-12)
              << "placement " << static_cast<int>(placement.kind) << " vpp " << placement.vpp
              << ", embedding " << c.embedding << ", head " << c.head;
          return;
        }
        for (int64_t take = 1; take <= left - (stages - 1 - stage); ++take) {
          layers[stage] = take;
          each(stage + 1, left - take);
        }
      };
      each(0, n);
    }
  }
}

TEST(Partition, ErrorsSayWhatWorks) {
  EXPECT_CONTAINS(testing::user_error([] { balanced_split(3, one_chunk(4), costs(0, 0)); }),
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
  parallel.pp_layers.layers = {1, 2, 2, 3};
  EXPECT_EQ(stage_layers(parallel, model.shape()), parallel.pp_layers.layers);
  const std::vector<int64_t> first = {0, 1, 3, 5};
  for (int64_t stage = 0; stage < 4; ++stage) {
    EXPECT_EQ(first_layer_of(parallel.pp_layers.layers, stage), first[stage]) << "stage " << stage;
  }
  parallel.pp_layers.layers = {1, 2, 2, 2};
  EXPECT_CONTAINS(testing::user_error([&] { stage_layers(parallel, model.shape()); }),
                  "parallel.pp_layers sums to 7 layers but model.n_layers is 8");
}

}  // namespace
}  // namespace strata
