// The body of POST /v1/completions, read and checked against the served model (OpenAI's
// completions API, the fields docs/serving.md lists). Anything wrong is an ApiError with the
// HTTP status and OpenAI's error object.
#pragma once
#include <nlohmann/json.hpp>

#include <cstdint>
#include <stdexcept>
#include <string>
#include <vector>

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
};

// {"error": {"message", "type", "param", "code"}} (param and code null when they do not apply).
nlohmann::json error_body(const ApiError& error);

struct CompletionRequest {
  std::vector<std::string> prompts;              // one sequence each (choice index = position)
  std::vector<std::vector<int64_t>> prompt_ids;  // tokenized
  SamplingOptions sampling;                      // max_new_tokens = max_tokens
  bool seeded = false;                           // `seed` given: every choice samples from it
  std::vector<std::string> stop;
  bool stream = false;
};

// The default of max_tokens (OpenAI's), cut to what the context leaves after the longest prompt.
constexpr int64_t kDefaultMaxTokens = 16;

// Throws ApiError 400 for malformed JSON, a body that is not an object, unknown fields, wrong
// types or values out of range, an empty prompt, a prompt that leaves no room in model.seq_len,
// or max_tokens beyond it; 404 when `model` names another model.
CompletionRequest parse_completion_request(const std::string& body, const std::string& model_name,
                                           int64_t seq_len, const Tokenizer& tokenizer);

}  // namespace strata
