// Text generation from a trained model: load a checkpoint of any layout, or a Hugging Face
// model directory, into a model on this process, then sample token by token with a KV cache
// (temperature, top-k).
#pragma once
#include <algorithm>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include <ATen/core/Generator.h>

#include "strata/core/config.h"
#include "strata/model/gpt.h"

namespace strata {

class Comm;

struct SamplingOptions {
  int64_t max_new_tokens = 200;
  double temperature = 0.8;  // 0 = greedy
  int64_t top_k = 40;        // 0 = whole vocabulary
  double top_p = 1.0;        // nucleus: the likeliest tokens whose probability reaches top_p
  uint64_t seed = 0;
  // OpenAI's penalties, in [-2, 2]: a token's logit is lowered by frequency_penalty for each
  // time it was generated so far and by presence_penalty once if it was (penalized_logits).
  double presence_penalty = 0;
  double frequency_penalty = 0;
  // Generation ends after one of these (the model's end-of-text tokens); the token is kept in
  // the ids, not in the text.
  std::vector<int64_t> stop_token_ids;

  bool ends_generation(int64_t token) const {
    return std::find(stop_token_ids.begin(), stop_token_ids.end(), token) != stop_token_ids.end();
  }
};

// One token drawn from logits (V) float: the argmax when temperature is 0, else a draw from
// softmax(logits / temperature) over the top_k likeliest tokens (all when 0), then over the
// smallest set of them whose probability reaches top_p (all when 1). `strata generate` and
// `strata serve` both sample here, so a seed gives the same tokens in both.
int64_t sample_token(const at::Tensor& logits, const SamplingOptions& options,
                     at::Generator& generator);

// `logits` (V) with options' presence and frequency penalties applied for the `count` tokens
// generated so far at `generated`; `logits` itself when both penalties are 0. What is sampled
// from; log-probabilities stay those of the model's own distribution.
at::Tensor penalized_logits(const at::Tensor& logits, const SamplingOptions& options,
                            const int64_t* generated, int64_t count);

// The run config a checkpoint was written with, or for a Hugging Face model directory
// (hf/hf_config.h is_hf_directory) the defaults with model.init = dir and the model's sizes,
// seq_len its whole context. Throws UserError if dir is neither.
Config checkpoint_run_config(const std::string& dir);

// Builds the model the checkpoint's config describes and loads its parameters (any layout
// the checkpoint was written with). With a tp group, the model is split over it and every tp
// rank must call generate() with the same arguments: each rank samples the same tokens.
// The model computes in `precision` (default: the train.precision it was trained with); the
// checkpoint's values are rounded to it. Throws UserError if dir is neither a complete
// checkpoint nor a Hugging Face model directory.
std::unique_ptr<GPT> load_model_from_checkpoint(const std::string& dir, Config* config_out,
                                                Comm* tp = nullptr,
                                                std::optional<Precision> precision = {});

// The same for one pipeline stage of the model `config` describes (the checkpoint's model),
// split over the tp group (nullptr = none), computing in config.train.precision.
std::unique_ptr<GPT> load_stage_from_checkpoint(const std::string& dir, const Config& config,
                                                Comm* tp, const StageSpec& stage);

// The log-probability of `token` and of the `top` likeliest tokens (likeliest first) under
// the model's own distribution: log_softmax of the logits (V), before temperature, top-k and
// top-p reshape it for sampling (so a score does not depend on how it was sampled).
struct TokenLogprob {
  double logprob = 0;
  std::vector<std::pair<int64_t, double>> top;  // (id, logprob)
};
TokenLogprob token_logprob(const at::Tensor& logits, int64_t token, int64_t top = 0);

struct Generated {
  std::vector<int64_t> tokens;   // the new tokens
  std::vector<double> logprobs;  // of each new token, as token_logprob computes it
};

// Continues `prompt` (token ids) and returns only the new tokens. Stops early at seq_len, and
// after a token options.ends_generation names.
Generated generate(GPT& model, const std::vector<int64_t>& prompt, const SamplingOptions& options);

}  // namespace strata
