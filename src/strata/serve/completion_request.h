// The body of POST /v1/completions, read and checked against the served model (OpenAI's
// completions API, the fields docs/serving.md lists). Anything wrong is an ApiError with the
// HTTP status and OpenAI's error object.
#pragma once
#include <nlohmann/json.hpp>

#include <cstdint>
#include <stdexcept>
#include <string>
#include <vector>

#include "strata/data/chat_template.h"
#include "strata/data/tokenizer.h"
#include "strata/infer/generate.h"

namespace strata {

struct ApiError : std::runtime_error {
  ApiError(int status, std::string type, const std::string& message, std::string param = "")
      : std::runtime_error(message),
        status(status),
        type(std::move(type)),
        param(std::move(param)) {}
  int status;
  std::string type;   // "invalid_request_error", "rate_limit_error", ...
  std::string param;  // the request field at fault; empty when none
  std::string code;   // OpenAI's machine-readable code (e.g. "invalid_api_key"); empty when none
};

// {"error": {"message", "type", "param", "code"}} (param and code null when they do not apply).
nlohmann::json error_body(const ApiError& error);

// What requests are checked against: the served model.
struct ServedModel {
  std::string name;  // the id of /v1/models and the only `model` a request may name
  int64_t seq_len = 0;
  int64_t vocab_size = 0;
  // nullptr: the model came without tokenizer files, so prompts must be token ids and
  // completions carry no text (their ids: `return_token_ids`; their tokens' logprobs).
  const Tokenizer* tokenizer = nullptr;
  // A completion ends after one of these (the tokenizer's end of text, generation_config.json's
  // eos_token_id), unless the request sets `ignore_eos`.
  std::vector<int64_t> stop_token_ids;
  // The chat API's template; nullptr: /v1/chat/completions answers 400 saying why.
  const ChatTemplate* chat_template = nullptr;
};

struct CompletionRequest {
  std::vector<std::string> prompts;              // one sequence each (choice index = position)
  std::vector<std::vector<int64_t>> prompt_ids;  // tokenized (or given as ids)
  SamplingOptions sampling;                      // max_new_tokens = max_tokens (0: echo only)
  bool seeded = false;                           // `seed` given: every choice samples from it
  std::vector<std::string> stop;
  bool stream = false;
  bool include_usage = false;  // stream_options.include_usage: a last event with `usage`
  int64_t n = 1;               // choices per prompt: choice i * n + j is prompt i's j-th
  // `logprobs`: the log-probability of each generated token and of its `logprobs` likeliest
  // alternatives; -1 when not asked. With `echo`, the prompt's tokens are scored too.
  int64_t logprobs = -1;
  bool echo = false;              // the choice's text (and logprobs) begin with the prompt
  bool return_token_ids = false;  // choices carry prompt_token_ids and token_ids (as vLLM's)
  bool chat = false;              // /v1/chat/completions: the prompt is the rendered messages
};

// The default of max_tokens (OpenAI's), cut to what the context leaves after the longest prompt.
constexpr int64_t kDefaultMaxTokens = 16;
// The most alternatives `logprobs` may ask for per token.
constexpr int64_t kMaxLogprobs = 20;
// The most choices `n` may ask for per prompt.
constexpr int64_t kMaxChoices = 128;

// Throws ApiError 400 for malformed JSON, a body that is not an object, unknown fields, wrong
// types or values out of range, an empty prompt, a token id outside the vocabulary, a text
// prompt to a model without a tokenizer, a prompt that leaves no room in model.seq_len, or
// max_tokens beyond it; 404 when `model` names another model.
CompletionRequest parse_completion_request(const std::string& body, const ServedModel& model);

// POST /v1/chat/completions: `messages` rendered by the model's chat template (with the
// generation prompt) is the prompt; then the same fields as a completion, with OpenAI's chat
// spellings (logprobs a boolean, top_logprobs, max_completion_tokens). 400 for a model without
// a tokenizer or a chat template, for content parts that are not text, and for a conversation
// the template refuses (raise_exception's message), besides the completion API's errors.
CompletionRequest parse_chat_request(const std::string& body, const ServedModel& model);

}  // namespace strata
