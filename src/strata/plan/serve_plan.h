// The planner for serving (`strata plan --serve`): for a model split over tp x pp devices per
// replica, the memory of each device (weights, the engine step's workspace), the KV cache one
// token takes and how many tokens and full-length sequences the rest holds, the
// `serve.kv_cache_mb` that uses it, and the time of one decode step at that batch.
#pragma once
#include <cmath>
#include <cstdint>
#include <string>
#include <vector>

#include "strata/plan/cost_model.h"

namespace strata {

struct ServePrediction {
  PlanLayout layout;              // tp, pp; dp = the replicas on the cluster
  double weight_bytes = 0;        // of the fullest device
  double workspace_bytes = 0;     // one engine step of max_batch_tokens: logits and activations
  double kv_bytes_per_token = 0;  // on the fullest device: 2 x its layers x kv heads x head_dim
  double kv_cache_bytes = 0;      // what is left for the KV cache on that device
  double kv_tokens = 0;           // tokens its KV cache holds (in 16-token blocks)
  int64_t sequences = 0;          // full-length sequences (model seq) that fit
  int64_t decode_batch = 0;  // sequences one decode step runs: min(sequences, max_batch_tokens)
  double decode_step_s = 0;  // one decode step of decode_batch at half the context
  double tokens_per_s = 0;   // decoded, all replicas
  double memory_capacity = 0;
  bool fits = false;  // weights, workspace and one sequence's KV cache fit

  // The serve.kv_cache_mb that gives the KV cache its share: kv_cache_bytes in whole MiB.
  double kv_cache_mb() const { return std::floor(kv_cache_bytes / (1024.0 * 1024.0)); }
};

// The layout's tp and pp (dp, the replicas, is what is left); throws UserError for a layout
// that sets training-only choices (cp, ep, zero, vpp) or breaks the layout rules.
ServePrediction predict_serving(const PlanInputs& inputs, const PlanLayout& layout,
                                int64_t max_batch_tokens);

// Every tp (dividing the heads) x pp (<= layers) whose replica fits in a node, ranked by decode
// tokens per second among those that fit.
std::vector<ServePrediction> search_serving(const PlanInputs& inputs, int64_t max_batch_tokens);

}  // namespace strata
