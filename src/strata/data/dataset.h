// Token data for training: a token stream (from a text corpus, token shards, or a synthetic
// generator) split into train and eval parts, and a deterministic sampler whose global batch
// depends only on (seed, step) -- never on the parallel layout, so every layout trains on the
// same sequences. Each rank asks only for the rows it processes.
#pragma once
#include <ATen/ATen.h>

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "strata/core/config.h"

namespace strata {

enum class Split { Train, Eval };

class TokenDataset {
 public:
  // Opens the source named by `data` (preparing the corpus into shards on first use, once,
  // under a cache dir; safe when several ranks start at once). Throws UserError for a
  // missing path, a token id >= model.vocab_size, or too few tokens for one sequence.
  //   data.source = "corpus":    data.path (a text file or a directory of .txt files), or
  //                              with no path the English text of the `fortunes` package
  //   data.source = "shards":    data.path is a directory made by `strata data prepare`, or
  //                              one shard file
  //   data.source = "synthetic": kSyntheticTokens motif tokens drawn from `seed`
  // data.loss_mask = "completion" needs shards that carry a loss mask (UserError otherwise).
  static std::shared_ptr<TokenDataset> open(const DataConfig& data, const ModelConfig& model,
                                            uint64_t seed);

  // A dataset over tokens already in memory, split and checked exactly as open() does.
  // `origin` names them in error messages and description(). document_starts: where each
  // document begins (TokenStream::document_starts: ascending offsets, the first 0; empty =
  // one document). loss_mask: empty, or one entry per token (1: carries loss as a target),
  // split with the tokens.
  static std::shared_ptr<TokenDataset> from_tokens(std::vector<int32_t> tokens,
                                                   const DataConfig& data, const ModelConfig& model,
                                                   uint64_t seed, const std::string& origin,
                                                   std::vector<int64_t> document_starts = {},
                                                   std::vector<uint8_t> loss_mask = {});

  int64_t num_tokens(Split split) const;

  // Rows [first_row, first_row + count) of the global batch of `step`: an int64 tensor
  // (count, seq_len + 1); inputs are [:, :-1], targets [:, 1:]. Row r of step s starts at
  // row_start(seed, split, s, r, split tokens - seq_len) (sampler.h), so the rows do not
  // depend on how a batch is divided among ranks.
  at::Tensor rows(Split split, int64_t step, int64_t first_row, int64_t count,
                  int64_t seq_len) const;

  // For the same rows as rows(), each token's document (packing, data.document_mask): an
  // int64 tensor (count, seq_len + 1) holding for each token the offset within its row where
  // its document begins, 0 for a document that began at or before the row's start. Ids never
  // decrease along a row; a token's position within its document is its column minus its id.
  // All zeros where the stream keeps no document boundaries.
  at::Tensor documents(Split split, int64_t step, int64_t first_row, int64_t count,
                       int64_t seq_len) const;

  // Whether only some targets carry loss (data.loss_mask = "completion").
  bool has_loss_mask() const { return !train_mask_.empty(); }

  // Which targets of rows(split, step, first_row, count, seq_len) carry loss: a uint8 tensor
  // (count, seq_len), 1 where the target (column j is the target of input column j) does.
  // Needs has_loss_mask().
  at::Tensor loss_mask_rows(Split split, int64_t step, int64_t first_row, int64_t count,
                            int64_t seq_len) const;

  // How many targets of rows [0, count) of the global batch of `step` carry loss:
  // count * seq_len without a mask. Every rank computes it alike, with no communication.
  int64_t loss_tokens(Split split, int64_t step, int64_t count, int64_t seq_len) const;

  // One line for logs: where the tokens came from and the split sizes.
  const std::string& description() const { return description_; }

 private:
  TokenDataset() = default;
  const std::vector<int32_t>& tokens(Split split) const {
    return split == Split::Train ? train_ : eval_;
  }
  const std::vector<int64_t>& document_starts(Split split) const {
    return split == Split::Train ? train_document_starts_ : eval_document_starts_;
  }
  int64_t row_start_of(Split split, int64_t step, int64_t row, int64_t seq_len) const;

  uint64_t seed_ = 0;
  std::vector<int32_t> train_, eval_;  // token ids (in memory: corpora here are small)
  // Where each document of a split begins, offsets into its tokens (the first 0; empty = one
  // document).
  std::vector<int64_t> train_document_starts_, eval_document_starts_;
  std::vector<uint8_t> train_mask_, eval_mask_;  // loss mask per token; empty: all carry loss
  std::string description_;
};

}  // namespace strata
