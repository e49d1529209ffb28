// Text generation from a trained model: load a checkpoint of any layout into a model on this
// process, then sample token by token with a KV cache (temperature, top-k).
#pragma once
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "strata/core/config.h"
#include "strata/model/gpt.h"

namespace strata {

class Comm;

struct SamplingOptions {
  int64_t max_new_tokens = 200;
  double temperature = 0.8;  // 0 = greedy
  int64_t top_k = 40;        // 0 = whole vocabulary
  uint64_t seed = 0;
};

// Builds the model the checkpoint's config describes and loads its parameters (any layout
// the checkpoint was written with). With a tp group, the model is split over it and every tp
// rank must call generate() with the same arguments: each rank samples the same tokens.
// The model computes in `precision` (default: the train.precision it was trained with); the
// checkpoint's float32 values are rounded to it. Throws UserError if dir is not a complete
// checkpoint.
std::unique_ptr<GPT> load_model_from_checkpoint(const std::string& dir, Config* config_out,
                                                Comm* tp = nullptr,
                                                std::optional<Precision> precision = {});

// Continues `prompt` (token ids) and returns only the new tokens. Stops early at seq_len.
std::vector<int64_t> generate(GPT& model, const std::vector<int64_t>& prompt,
                              const SamplingOptions& options);

}  // namespace strata
