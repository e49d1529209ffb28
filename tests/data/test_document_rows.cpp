// Packed documents in TokenDataset: documents() labels each token of the rows rows() returns
// with the offset where its document begins in the row, in both splits (the eval split begins
// a document), all zeros without boundaries; bad document starts are refused.
#include <gtest/gtest.h>

#include <algorithm>
#include <numeric>
#include <vector>

#include "expect_error.h"
#include "strata/data/dataset.h"

namespace strata {
namespace {

constexpr int64_t kTokens = 1000, kSeqLen = 16;

DataConfig data_config(double eval_fraction) {
  DataConfig data;
  data.eval_fraction = eval_fraction;
  return data;
}

ModelConfig model_config() {
  ModelConfig model;
  model.vocab_size = kTokens;
  model.seq_len = kSeqLen;
  return model;
}

// Tokens 0, 1, 2, ...: each token says where in the stream it sits.
std::vector<int32_t> counting_tokens() {
  std::vector<int32_t> tokens(kTokens);
  std::iota(tokens.begin(), tokens.end(), 0);
  return tokens;
}

// Documents of lengths 1, 2, ..., 9, 1, 2, ... from offset 0.
std::vector<int64_t> varied_starts() {
  std::vector<int64_t> starts;
  for (int64_t start = 0, length = 1; start < kTokens; start += length, length = length % 9 + 1) {
    starts.push_back(start);
  }
  return starts;
}

// The id documents() must give the token at stream offset `at` of a row starting at `row_start`
// of a split starting at `split_start`.
int64_t expected_id(const std::vector<int64_t>& starts, int64_t split_start, int64_t row_start,
                    int64_t at) {
  const int64_t document = *(std::upper_bound(starts.begin(), starts.end(), at) - 1);
  return std::max<int64_t>(document - split_start, 0) > row_start
             ? document - split_start - row_start
             : 0;
}

TEST(DocumentRows, EachTokenIsLabelledWithItsDocumentsStartInTheRow) {
  const std::vector<int64_t> starts = varied_starts();
  auto dataset = TokenDataset::from_tokens(counting_tokens(), data_config(0.3), model_config(), 7,
                                           "counting tokens", starts);
  const int64_t eval_start = dataset->num_tokens(Split::Train);
  for (Split split : {Split::Train, Split::Eval}) {
    const int64_t split_start = split == Split::Train ? 0 : eval_start;
    const at::Tensor rows = dataset->rows(split, 3, 0, 20, kSeqLen);
    const at::Tensor ids = dataset->documents(split, 3, 0, 20, kSeqLen);
    ASSERT_EQ(ids.sizes(), rows.sizes());
    for (int64_t r = 0; r < rows.size(0); ++r) {
      const int64_t row_start = rows[r][0].item<int64_t>() - split_start;
      for (int64_t c = 0; c < rows.size(1); ++c) {
        const int64_t want =
            expected_id(starts, split_start, row_start, rows[r][c].item<int64_t>());
        ASSERT_EQ(ids[r][c].item<int64_t>(), want)
            << (split == Split::Train ? "train" : "eval") << " row " << r << " column " << c;
      }
    }
    // Rows of at most 9-token documents hold several: the test sees boundaries.
    EXPECT_GT(ids.max().item<int64_t>(), 0);
  }
}

TEST(DocumentRows, RowsOfOneDocumentWithoutBoundaries) {
  auto dataset = TokenDataset::from_tokens(counting_tokens(), data_config(0.1), model_config(), 7,
                                           "counting tokens");
  EXPECT_EQ(dataset->documents(Split::Train, 0, 0, 8, kSeqLen).count_nonzero().item<int64_t>(), 0);
  EXPECT_EQ(dataset->documents(Split::Eval, 0, 0, 8, kSeqLen).count_nonzero().item<int64_t>(), 0);
}

TEST(DocumentRows, RefusesBadDocumentStarts) {
  for (const std::vector<int64_t>& starts :
       {std::vector<int64_t>{1, 5}, std::vector<int64_t>{0, 5, 5}, std::vector<int64_t>{0, 9, 4},
        std::vector<int64_t>{0, kTokens}}) {
    testing::expect_user_error(
        [&] {
          TokenDataset::from_tokens(counting_tokens(), data_config(0.1), model_config(), 7,
                                    "counting tokens", starts);
        },
        {"counting tokens: the document starts must ascend strictly from 0"});
  }
}

}  // namespace
}  // namespace strata
