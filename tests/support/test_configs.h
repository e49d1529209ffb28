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

// The [model] and [train] tables of a small run as the tests that drive the strata binary
// write them: tiny_training_run's GPT, `steps` steps of global batch 4 in micro batches of 2,
// lr 3e-3 to 3e-4 after 2 warm-up steps. Keys the caller appends go to [train].
std::string tiny_run_toml(int64_t steps);

// The layout of a pipeline alone, what the schedule generators build from: the schedule over
// pp stages of vpp chunks, for `microbatches` microbatches.
Layout pipeline_layout(PipelineSchedule schedule, int64_t pp, int64_t microbatches,
                       int64_t vpp = 1);

// A parallel layout a parity test runs: the [parallel] and [compression] keys it varies (and
// whether the test makes the model a mixture of experts, which the test configures), named for
// failure messages. The tests' one layout type besides core/layout.h's Layout: it leaves the
// run's micro batch alone and starts from one rank (dp 1, not -1).
struct TestLayout {
  int64_t tp = 1, pp = 1, vpp = 1, cp = 1, dp = 1, ep = 1, zero = 0;
  bool sequence_parallel = false, moe = false;
  PipelineSchedule schedule = PipelineSchedule::one_f_one_b;
  ContextParallelComm cp_comm = ContextParallelComm::ring;
  GradientCompression gradients = GradientCompression::none;
  GatherCompression zero_gather = GatherCompression::none;

  // "tp2(sp) pp2(zb-h1) dp2 zero 3": the sizes above 1 and the settings away from the default.
  std::string name() const;
  // Sets these [parallel] and [compression] keys of `config`.
  void apply_to(Config& config) const;
};

// The layout `change` makes of the single rank's, for lists of layouts:
//   with([](TestLayout& l) { l.tp = 2, l.sequence_parallel = true; })
template <typename Change>
TestLayout with(Change change) {
  TestLayout layout;
  change(layout);
  return layout;
}

}  // namespace strata::testing
