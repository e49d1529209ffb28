// The small models and short training runs the tests build, one definition of each, so that a
// test states only what it changes.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "strata/core/config.h"

namespace strata::testing {

// A GPT [model] table of these sizes, every other key at its default.
ModelConfig gpt_config(int64_t vocab_size, int64_t d_model, int64_t n_layers, int64_t n_heads,
                       int64_t seq_len);

// A GPT small enough for finite differences in double precision: vocabulary 11, width 8,
// 2 layers of 2 heads, 6 tokens, d_ff 12, and initial weights large enough (std 0.3) that
// every path carries signal.
ModelConfig tiny_model();

// A short training run on synthetic data: a GPT of vocabulary 256, width 32 and 2 layers of
// 4 heads over 32 tokens; AdamW at lr 3e-3, cosine to 3e-4 after min(3, steps) warm-up steps;
// no progress output, logs in log_dir() (only rank 0 writes there).
Config tiny_training_run(int64_t steps, int64_t global_batch, int64_t micro_batch);

}  // namespace strata::testing
