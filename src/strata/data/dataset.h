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
  static std::shared_ptr<TokenDataset> open(const DataConfig& data, const ModelConfig& model,
                                            uint64_t seed);

  int64_t num_tokens(Split split) const;

  // Rows [first_row, first_row + count) of the global batch of `step`: an int64 tensor
  // (count, seq_len + 1); inputs are [:, :-1], targets [:, 1:]. Row r of step s starts at a
  // position drawn from a hash of (seed, split, s, r).
  at::Tensor rows(Split split, int64_t step, int64_t first_row, int64_t count,
                  int64_t seq_len) const;

  virtual ~TokenDataset() = default;

 protected:
  TokenDataset() = default;
  uint64_t seed_ = 0;
  std::vector<int32_t> train_, eval_;  // token ids (in memory: corpora here are small)
};

}  // namespace strata
