// One serving step of GPT::forward_paged against the whole-sequence forward, shared by the
// single-process and the tensor-parallel tests: sequences whose earlier tokens are already in a
// paged KV cache (block tables drawn from a shuffled pool, so no sequence's slots are
// contiguous) run the rest of their tokens in one step, some decoding one token, some a
// prefill chunk of several; every row's logits must be the logits of the whole sequence at
// that position.
#pragma once
#include <ATen/CPUGeneratorImpl.h>
#include <ATen/core/grad_mode.h>

#include <string>
#include <vector>

#include "strata/core/error.h"
#include "strata/model/gpt.h"
#include "test_support.h"

namespace strata::testing {

constexpr int64_t kPagedBlockTokens = 16;  // serve/'s block size

struct PagedSequence {
  int64_t length;  // tokens in all
  int64_t cached;  // of them in the cache before the checked step
};

// The step running positions [first, last) of each sequence (those with last > first).
inline PagedBatch paged_step(const std::vector<std::vector<int64_t>>& tables,
                             const std::vector<int64_t>& firsts, const std::vector<int64_t>& lasts,
                             PagedKVCache& cache) {
  PagedBatch batch;
  batch.cache = &cache;
  std::vector<int64_t> positions, write_slots;
  int64_t row = 0;
  for (size_t s = 0; s < tables.size(); ++s) {
    if (lasts[s] <= firsts[s]) continue;
    std::vector<int64_t> slots;
    for (int64_t p = 0; p < lasts[s]; ++p) {
      slots.push_back(tables[s][p / kPagedBlockTokens] * kPagedBlockTokens + p % kPagedBlockTokens);
    }
    PagedBatch::Sequence sequence;
    sequence.first_row = row;
    sequence.rows = lasts[s] - firsts[s];
    sequence.context_slots = at::tensor(slots, at::kLong);
    batch.sequences.push_back(sequence);
    for (int64_t p = firsts[s]; p < lasts[s]; ++p) {
      positions.push_back(p);
      write_slots.push_back(slots[p]);
    }
    row += sequence.rows;
  }
  batch.positions = at::tensor(positions, at::kLong);
  batch.write_slots = at::tensor(write_slots, at::kLong);
  return batch;
}

// "" when `model` (any tp split of `whole`'s weights) computes every row of the checked step
// as `whole` computes the whole sequences; otherwise what differs, naming the sequence and row.
inline std::string check_paged_step(GPT& model, GPT& whole,
                                    const std::vector<PagedSequence>& sequences, double rtol,
                                    double atol) {
  at::NoGradGuard no_grad;
  const ModelConfig& config = whole.config();
  auto generator = at::make_generator<at::CPUGeneratorImpl>(17);
  std::vector<at::Tensor> tokens;
  int64_t blocks = 0;
  for (const PagedSequence& sequence : sequences) {
    tokens.push_back(at::randint(config.vocab_size, {sequence.length}, generator, at::kLong));
    blocks += (sequence.length + kPagedBlockTokens - 1) / kPagedBlockTokens;
  }
  blocks += 3;  // blocks no sequence owns
  const at::Tensor pool = at::randperm(blocks, generator, at::kLong);
  std::vector<std::vector<int64_t>> tables;
  int64_t taken = 0;
  for (const PagedSequence& sequence : sequences) {
    tables.emplace_back();
    for (int64_t b = 0; b < (sequence.length + kPagedBlockTokens - 1) / kPagedBlockTokens; ++b) {
      tables.back().push_back(pool[taken++].item<int64_t>());
    }
  }
  PagedKVCache cache;
  for (int64_t layer = 0; layer < model.num_layers(); ++layer) {
    cache.keys.push_back(
        at::zeros({blocks * kPagedBlockTokens, model.local_kv_heads(), config.head_dim()},
                  at::TensorOptions(model.dtype())));
    cache.values.push_back(at::zeros_like(cache.keys.back()));
  }

  auto run = [&](const std::vector<int64_t>& firsts, const std::vector<int64_t>& lasts) {
    const PagedBatch batch = paged_step(tables, firsts, lasts, cache);
    std::vector<at::Tensor> step_tokens;
    for (size_t s = 0; s < sequences.size(); ++s) {
      if (lasts[s] > firsts[s])
        step_tokens.push_back(tokens[s].narrow(0, firsts[s], lasts[s] - firsts[s]));
    }
    const at::Tensor input = at::cat(step_tokens).view({1, -1});
    return model.forward_paged(input, batch, at::arange(input.size(1), at::kLong));
  };
  std::vector<int64_t> zeros(sequences.size(), 0), cached, lengths;
  for (const PagedSequence& sequence : sequences) {
    cached.push_back(sequence.cached);
    lengths.push_back(sequence.length);
  }
  run(zeros, cached);                              // the earlier steps: every cached prefix in one
  const at::Tensor logits = run(cached, lengths);  // (rows, V)

  int64_t row = 0;
  for (size_t s = 0; s < sequences.size(); ++s) {
    const int64_t rows = sequences[s].length - sequences[s].cached;
    if (rows == 0) continue;
    const at::Tensor expected =
        whole.logits(tokens[s].view({1, -1}))[0].narrow(0, sequences[s].cached, rows);
    const std::string difference = compare_tensors(
        logits.narrow(0, row, rows).to(expected.scalar_type()), expected, rtol, atol);
    if (!difference.empty()) {
      return str("sequence ", s, " (", sequences[s].length, " tokens, ", sequences[s].cached,
                 " cached): ", difference);
    }
    row += rows;
  }
  return "";
}

// Decoding sequences of several lengths (within a block, at a block's end, across blocks, a
// one-token prompt) and prefill chunks (from the start, mid-sequence), all in one step.
inline std::vector<PagedSequence> mixed_paged_step() {
  return {{20, 19}, {12, 7}, {3, 2}, {1, 0}, {33, 32}, {16, 15}, {9, 0}, {40, 39}};
}

}  // namespace strata::testing
