// One sequence being served: a prompt and what has been generated for it. The engine thread
// owns the scheduling and sampling fields; the HTTP thread that waits for the sequence reads
// the published fields under the engine's mutex, and may set `cancelled` at any time.
#pragma once
#include <ATen/core/Generator.h>

#include <atomic>
#include <chrono>
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "strata/infer/generate.h"

namespace strata {

using ServeClock = std::chrono::steady_clock;

enum class FinishReason { none, length, stop, timeout, cancelled };
const char* finish_reason_name(FinishReason reason);  // "length", "stop", ...

struct Sequence {
  int64_t id = 0;
  int64_t prompt_tokens = 0;
  std::vector<int64_t> tokens;  // the prompt, then every generated token
  SamplingOptions sampling;     // max_new_tokens is the request's max_tokens
  std::vector<std::string> stop;
  int64_t logprobs = -1;  // alternatives to score per token; -1: no logprobs
  bool echo = false;      // score the prompt too (with logprobs >= 0)
  at::Generator generator;
  ServeClock::time_point arrival, deadline;

  // Engine thread only.
  int64_t computed = 0;         // leading tokens whose keys and values are in `blocks`
  std::vector<int64_t> blocks;  // block table: position p lives in blocks[p / kBlockTokens]
  // Prefix caching: the content keys of the full blocks of `tokens` known so far (block_key
  // chained; `tokens` only grow, so they stay valid), and how many leading blocks of `blocks`
  // were offered to the pool's cache.
  std::vector<uint64_t> block_keys;
  int64_t blocks_offered = 0;
  ServeClock::time_point last_token_time;

  // Published by the engine under its mutex.
  std::string text;       // the decoded completion, cut before a stop string
  size_t streamable = 0;  // leading bytes of `text` that are final (safe to stream)
  int64_t completion_tokens = 0;
  FinishReason finish = FinishReason::none;
  // With logprobs: prompt_logprobs[i] scores prompt token i + 1 (with echo; filled while the
  // prompt is computed), generated_logprobs[i] generated token i.
  std::vector<TokenLogprob> prompt_logprobs, generated_logprobs;

  std::atomic<bool> cancelled{false};  // set by the HTTP side: the client went away
  // Set before the sequence is submitted (may be empty): the engine asks it before every step
  // whether the client has gone away, and cancels the sequence if so.
  std::function<bool()> client_gone;

  int64_t generated() const { return static_cast<int64_t>(tokens.size()) - prompt_tokens; }
  // Whether the logits of every prompt row are still wanted (to score the prompt).
  bool scores_prompt() const {
    return echo && logprobs >= 0 &&
           static_cast<int64_t>(prompt_logprobs.size()) < prompt_tokens - 1;
  }
};

}  // namespace strata
