// TokenDataset: split sizes, the sampler's determinism, partition invariance and range,
// the synthetic stream, and the errors for bad vocabularies and sources.
#include <gtest/gtest.h>

#include <map>
#include <numeric>
#include <set>
#include <unordered_map>

#include "data_test_helpers.h"
#include "expect_error.h"
#include "strata/data/dataset.h"
#include "strata/data/prepare.h"
#include "strata/data/sampler.h"
#include "strata/data/synthetic.h"
#include "test_support.h"

namespace strata {
namespace {

using testing::expect_user_error;
using testing::TempDir;
using testing::write_text;

// Tokens 0, 1, ..., n-1: every row of such a dataset is a run of consecutive ids, so its
// first element is its start position.
std::vector<int32_t> counting(int32_t n) {
  std::vector<int32_t> tokens(n);
  std::iota(tokens.begin(), tokens.end(), 0);
  return tokens;
}

struct Configs {
  DataConfig data;
  ModelConfig model;
  Configs(double eval_fraction, int64_t seq_len, int64_t vocab_size = 1 << 20) {
    data.eval_fraction = eval_fraction;
    model.seq_len = seq_len;
    model.vocab_size = vocab_size;
  }
};

std::shared_ptr<TokenDataset> counting_dataset(int32_t n, double eval_fraction, int64_t seq_len,
                                               uint64_t seed = 42) {
  Configs configs(eval_fraction, seq_len);
  return TokenDataset::from_tokens(counting(n), configs.data, configs.model, seed, "counting");
}

TEST(DatasetSplit, EvalIsTheLastFractionOfTheTokens) {
  auto dataset = counting_dataset(10000, 0.1, 16);
  EXPECT_EQ(dataset->num_tokens(Split::Train), 9000);
  EXPECT_EQ(dataset->num_tokens(Split::Eval), 1000);
  at::Tensor train = dataset->rows(Split::Train, 0, 0, 200, 16);
  at::Tensor eval = dataset->rows(Split::Eval, 0, 0, 200, 16);
  EXPECT_LT(train.max().item<int64_t>(), 9000);
  EXPECT_GE(eval.min().item<int64_t>(), 9000);
  EXPECT_LT(eval.max().item<int64_t>(), 10000);
  EXPECT_NE(dataset->description().find("10000 tokens, train 9000, eval 1000"), std::string::npos)
      << dataset->description();
}

TEST(DatasetSplit, ZeroEvalFractionMeansNoEvalSplit) {
  auto dataset = counting_dataset(1000, 0.0, 16);
  EXPECT_EQ(dataset->num_tokens(Split::Train), 1000);
  EXPECT_EQ(dataset->num_tokens(Split::Eval), 0);
  expect_user_error([&] { dataset->rows(Split::Eval, 0, 0, 1, 16); }, {"data.eval_fraction is 0"});
}

TEST(DatasetSplit, EachSplitNeedsOneSequenceOfTokens) {
  // 5% of 1000 tokens is 50 eval tokens, fewer than seq_len + 1 = 129.
  expect_user_error([] { counting_dataset(1000, 0.05, 128); },
                    {"counting", "eval split has 50 of 1000 tokens", "129"});
  expect_user_error([] { counting_dataset(100, 0.0, 128); },
                    {"train split has 100 of 100 tokens", "model.seq_len + 1 = 129"});
  // Exactly one sequence each is enough.
  auto dataset = counting_dataset(258, 0.5, 128);
  EXPECT_EQ(dataset->num_tokens(Split::Eval), 129);
  EXPECT_EQ(dataset->rows(Split::Eval, 3, 0, 1, 128)[0][0].item<int64_t>(), 129);
}

TEST(DatasetSplit, EvalFractionOutsideZeroToOneIsRefused) {
  expect_user_error([] { counting_dataset(1000, 1.0, 8); }, {"data.eval_fraction (1)"});
  expect_user_error([] { counting_dataset(1000, -0.5, 8); }, {"data.eval_fraction (-0.5)"});
}

TEST(Sampler, RowsHaveTheDocumentedShapeAndAreWindowsOfTheStream) {
  auto dataset = counting_dataset(5000, 0.0, 32);
  at::Tensor rows = dataset->rows(Split::Train, 3, 0, 8, 32);
  EXPECT_EQ(rows.scalar_type(), at::kLong);
  EXPECT_EQ(rows.sizes(), (std::vector<int64_t>{8, 33}));
  for (int64_t r = 0; r < 8; ++r) {
    int64_t start = rows[r][0].item<int64_t>();
    EXPECT_EQ(start, row_start(42, Split::Train, 3, r, 5000 - 32)) << "row " << r;
    for (int64_t i = 0; i < 33; ++i) {
      ASSERT_EQ(rows[r][i].item<int64_t>(), start + i) << "row " << r << " column " << i;
    }
  }
  EXPECT_EQ(dataset->rows(Split::Train, 0, 5, 0, 32).sizes(), (std::vector<int64_t>{0, 33}));
}

TEST(Sampler, IsDeterministicInSeedStepAndRow) {
  auto a = counting_dataset(100000, 0.1, 64, 7);
  auto b = counting_dataset(100000, 0.1, 64, 7);
  auto other_seed = counting_dataset(100000, 0.1, 64, 8);
  for (Split split : {Split::Train, Split::Eval}) {
    at::Tensor rows = a->rows(split, 5, 0, 16, 64);
    EXPECT_TRUE(rows.equal(b->rows(split, 5, 0, 16, 64)));
    EXPECT_FALSE(rows.equal(other_seed->rows(split, 5, 0, 16, 64)));
    EXPECT_FALSE(rows.equal(a->rows(split, 6, 0, 16, 64)));
  }
}

TEST(Sampler, RowsDoNotDependOnHowTheBatchIsDivided) {
  auto dataset = counting_dataset(50000, 0.2, 24);
  for (Split split : {Split::Train, Split::Eval}) {
    for (int64_t step : {0, 1, 17, 123456}) {
      at::Tensor whole = dataset->rows(split, step, 0, 8, 24);
      at::Tensor halves =
          at::cat({dataset->rows(split, step, 0, 3, 24), dataset->rows(split, step, 3, 5, 24)});
      EXPECT_TRUE(whole.equal(halves)) << "step " << step;
      std::vector<at::Tensor> singles;
      for (int64_t r = 0; r < 8; ++r) singles.push_back(dataset->rows(split, step, r, 1, 24));
      EXPECT_TRUE(whole.equal(at::cat(singles))) << "step " << step;
    }
  }
}

TEST(Sampler, StartsCoverEveryWindowAndStayInRange) {
  // 20 tokens, seq_len 16: starts 0..3 are the only windows of 17 tokens.
  auto dataset = counting_dataset(20, 0.0, 16);
  std::set<int64_t> starts;
  for (int64_t step = 0; step < 50; ++step) {
    at::Tensor rows = dataset->rows(Split::Train, step, 0, 8, 16);
    for (int64_t r = 0; r < 8; ++r) starts.insert(rows[r][0].item<int64_t>());
  }
  EXPECT_EQ(starts, (std::set<int64_t>{0, 1, 2, 3}));
}

TEST(Sampler, StartsAreSpreadEvenly) {
  constexpr int64_t kBuckets = 10, kDraws = 100000;
  std::vector<int64_t> counts(kBuckets, 0);
  for (int64_t row = 0; row < kDraws; ++row) {
    ++counts[row_start(99, Split::Train, row / 64, row % 64, kBuckets)];
  }
  for (int64_t bucket = 0; bucket < kBuckets; ++bucket) {
    EXPECT_NEAR(counts[bucket], kDraws / kBuckets, kDraws / kBuckets / 20) << "bucket " << bucket;
  }
}

TEST(Sampler, ASequenceLongerThanTheSplitIsAUserError) {
  auto dataset = counting_dataset(100, 0.0, 8);
  expect_user_error([&] { dataset->rows(Split::Train, 0, 0, 1, 100); },
                    {"train split has 100 tokens", "101"});
}

TEST(Synthetic, IsAPureFunctionOfItsSeedWithinTheVocabulary) {
  std::vector<int32_t> a = synthetic_tokens(5, 256);
  EXPECT_EQ(static_cast<int64_t>(a.size()), kSyntheticTokens);
  EXPECT_EQ(a, synthetic_tokens(5, 256));
  EXPECT_NE(a, synthetic_tokens(6, 256));
  EXPECT_EQ(*std::min_element(a.begin(), a.end()), 0);
  EXPECT_EQ(*std::max_element(a.begin(), a.end()), 255);

  std::vector<int32_t> tiny = synthetic_tokens(5, 3, 1000);
  EXPECT_EQ(tiny.size(), 1000u);
  EXPECT_LT(*std::max_element(tiny.begin(), tiny.end()), 3);
}

TEST(Synthetic, IsLearnableFromShortContext) {
  // Predicting each token from the two before it (the most frequent follower seen) must be
  // far better than chance (1/256): the motifs make the stream mostly predictable.
  std::vector<int32_t> tokens = synthetic_tokens(11, 256);
  std::unordered_map<int64_t, std::map<int32_t, int64_t>> followers;
  for (size_t i = 2; i < tokens.size(); ++i) {
    ++followers[int64_t{tokens[i - 2]} * 256 + tokens[i - 1]][tokens[i]];
  }
  int64_t correct = 0;
  for (const auto& [context, counts] : followers) {
    int64_t best = 0;
    for (const auto& [token, count] : counts) best = std::max(best, count);
    correct += best;
  }
  double accuracy = static_cast<double>(correct) / static_cast<double>(tokens.size() - 2);
  EXPECT_GT(accuracy, 0.7);
}

TEST(Synthetic, OpensThroughTheConfig) {
  Configs configs(0.05, 64, 100);
  configs.data.source = DataSource::synthetic;
  auto a = TokenDataset::open(configs.data, configs.model, 3);
  auto b = TokenDataset::open(configs.data, configs.model, 3);
  EXPECT_EQ(a->num_tokens(Split::Train) + a->num_tokens(Split::Eval), kSyntheticTokens);
  EXPECT_TRUE(a->rows(Split::Train, 2, 0, 4, 64).equal(b->rows(Split::Train, 2, 0, 4, 64)));
  EXPECT_LT(a->rows(Split::Train, 2, 0, 64, 64).max().item<int64_t>(), 100);
  EXPECT_NE(a->description().find("synthetic"), std::string::npos);
}

TEST(VocabCheck, TokenIdsAtOrAboveTheModelVocabularyAreRefused) {
  Configs configs(0.0, 4, 256);
  std::vector<int32_t> tokens = counting(10);
  tokens[7] = 300;
  expect_user_error(
      [&] { TokenDataset::from_tokens(tokens, configs.data, configs.model, 1, "my tokens"); },
      {"my tokens", "token id 300", "model.vocab_size is 256", "at least 301"});
  tokens[7] = 255;
  EXPECT_NO_THROW(TokenDataset::from_tokens(tokens, configs.data, configs.model, 1, "ok"));
}

TEST(VocabCheck, ByteTextNeedsAVocabularyAboveItsLargestByte) {
  TempDir dir, cache;
  testing::ScopedEnv env("STRATA_CACHE_DIR", cache.path().c_str());
  write_text(dir.file("t.txt"), "caf\xC3\xA9 au lait, twice: caf\xC3\xA9 au lait");
  Configs configs(0.0, 8, 128);
  configs.data.path = dir.file("t.txt");
  expect_user_error([&] { TokenDataset::open(configs.data, configs.model, 1); },
                    {"token id 195", "model.vocab_size is 128"});
}

TEST(DatasetOpen, LoadsPreparedShards) {
  TempDir dir, out;
  write_text(dir.file("a.txt"), std::string(300, 'x'));
  ByteTokenizer tokenizer;
  prepare_corpus({dir.path()}, out.file("p"), tokenizer);
  Configs configs(0.1, 16, 256);
  configs.data.source = DataSource::shards;
  configs.data.path = out.file("p");
  auto dataset = TokenDataset::open(configs.data, configs.model, 1);
  EXPECT_EQ(dataset->num_tokens(Split::Train) + dataset->num_tokens(Split::Eval), 302);
  EXPECT_EQ(dataset->rows(Split::Train, 0, 0, 1, 16)[0][0].item<int64_t>(), 'x');

  configs.data.tokenizer = "bpe";
  expect_user_error([&] { TokenDataset::open(configs.data, configs.model, 1); },
                    {"made by tokenizer \"byte\"", "set data.tokenizer = \"byte\""});
}

// Unknown sources are refused when the config is read (tests/core/test_config_parse.cpp).
TEST(DatasetOpen, RefusesMissingPaths) {
  Configs configs(0.05, 16, 256);
  configs.data.source = DataSource::shards;
  expect_user_error([&] { TokenDataset::open(configs.data, configs.model, 1); },
                    {"data.source = \"shards\" needs data.path"});
  configs.data.path = "/nonexistent/strata/shards";
  expect_user_error([&] { TokenDataset::open(configs.data, configs.model, 1); },
                    {"/nonexistent/strata/shards", "does not exist"});
  configs.data.source = DataSource::corpus;
  expect_user_error([&] { TokenDataset::open(configs.data, configs.model, 1); },
                    {"/nonexistent/strata/shards", "does not exist"});
  configs.data.tokenizer = "bpe";
  expect_user_error([&] { TokenDataset::open(configs.data, configs.model, 1); },
                    {"data.tokenizer = \"bpe\" is not available"});
}

}  // namespace
}  // namespace strata
