// Reading a completion request: every field's type and range, then the prompts against the
// model's context.
#include "strata/serve/completion_request.h"

#include <algorithm>
#include <cmath>
#include <initializer_list>

#include "strata/core/error.h"

namespace strata {
namespace {

// The fields both APIs read (read_body's model, read_sampling's, read_limit's max_tokens, and
// logprobs in each API's form), then each API's own.
std::vector<std::string> fields_with(std::initializer_list<const char*> own) {
  std::vector<std::string> fields = {"model",
                                     "max_tokens",
                                     "temperature",
                                     "top_p",
                                     "top_k",
                                     "seed",
                                     "stop",
                                     "stream",
                                     "stream_options",
                                     "logprobs",
                                     "n",
                                     "presence_penalty",
                                     "frequency_penalty",
                                     "ignore_eos"};
  fields.insert(fields.end(), own.begin(), own.end());
  return fields;
}

const std::vector<std::string>& allowed_fields() {
  static const std::vector<std::string> fields =
      fields_with({"prompt", "echo", "return_token_ids"});
  return fields;
}

[[noreturn]] void invalid(const std::string& param, const std::string& message) {
  throw ApiError(400, "invalid_request_error", message, param);
}

std::string join(const std::vector<std::string>& items) {
  std::string out;
  for (const auto& item : items) out += (out.empty() ? "" : ", ") + item;
  return out;
}

// nlohmann's name of a JSON value's type, as the messages quote it.
std::string type_of(const nlohmann::json& value) {
  if (value.is_number_integer()) return "integer";
  if (value.is_number_float()) return "number";
  return value.type_name();
}

int64_t integer_field(const nlohmann::json& body, const char* name) {
  const nlohmann::json& value = body.at(name);
  if (!value.is_number_integer()) {
    invalid(name, str("'", name, "' must be an integer, got ", type_of(value)));
  }
  if (value.is_number_unsigned() &&
      value.get<uint64_t>() > static_cast<uint64_t>(std::numeric_limits<int64_t>::max())) {
    invalid(name, str("'", name, "' is out of range"));
  }
  return value.get<int64_t>();
}

double number_field(const nlohmann::json& body, const char* name) {
  const nlohmann::json& value = body.at(name);
  if (!value.is_number()) invalid(name, str("'", name, "' must be a number, got ", type_of(value)));
  return value.get<double>();
}

// A string, or an array of strings (non-empty when `non_empty_list`).
std::vector<std::string> strings_field(const nlohmann::json& body, const char* name) {
  const nlohmann::json& value = body.at(name);
  if (value.is_string()) return {value.get<std::string>()};
  if (!value.is_array()) {
    invalid(name,
            str("'", name, "' must be a string or an array of strings, got ", type_of(value)));
  }
  std::vector<std::string> items;
  for (size_t i = 0; i < value.size(); ++i) {
    if (!value[i].is_string()) {
      invalid(name, str("'", name, "[", i, "]' must be a string, got ", type_of(value[i])));
    }
    items.push_back(value[i].get<std::string>());
  }
  return items;
}

bool bool_field(const nlohmann::json& body, const char* name) {
  const nlohmann::json& value = body.at(name);
  if (!value.is_boolean())
    invalid(name, str("'", name, "' must be a boolean, got ", type_of(value)));
  return value.get<bool>();
}

// One prompt given as token ids: an array of integers in [0, vocab_size).
std::vector<int64_t> id_prompt(const nlohmann::json& ids, const std::string& which,
                               int64_t vocab_size) {
  std::vector<int64_t> out;
  for (size_t i = 0; i < ids.size(); ++i) {
    if (!ids[i].is_number_integer()) {
      invalid("prompt",
              str("'", which, "[", i, "]' must be a token id (an integer), got ", type_of(ids[i])));
    }
    const auto id = ids[i].get<int64_t>();
    if (id < 0 || id >= vocab_size) {  // an id past int64 reads as negative
      invalid("prompt", str("'", which, "[", i, "]' (", ids[i].dump(),
                            ") is not a token id of this model: ids are in [0, ", vocab_size, ")"));
    }
    out.push_back(id);
  }
  return out;
}

// `prompt` as OpenAI defines it: a string, an array of strings, an array of token ids, or an
// array of such arrays. Fills the texts (decoded ids when given as ids) and the ids.
void read_prompts(const nlohmann::json& prompt, const ServedModel& model,
                  CompletionRequest& request) {
  auto add_text = [&](const std::string& text, const std::string& which) {
    if (!model.tokenizer) {
      invalid("prompt", str("'", which,
                            "' is text, but this model came without tokenizer files: "
                            "send the prompt as token ids (an array of integers)"));
    }
    std::vector<int32_t> ids = model.tokenizer->encode(text);
    request.prompts.push_back(text);
    request.prompt_ids.emplace_back(ids.begin(), ids.end());
  };
  auto add_ids = [&](const nlohmann::json& ids, const std::string& which) {
    request.prompt_ids.push_back(id_prompt(ids, which, model.vocab_size));
    request.prompts.push_back(model.tokenizer ? model.tokenizer->decode(request.prompt_ids.back())
                                              : std::string());
  };
  const char* shapes =
      "a string, an array of strings, an array of token ids or an array of arrays of token ids";
  if (prompt.is_string()) return add_text(prompt.get<std::string>(), "prompt");
  if (!prompt.is_array())
    invalid("prompt", str("'prompt' must be ", shapes, ", got ", type_of(prompt)));
  if (prompt.empty()) invalid("prompt", "'prompt' must hold at least one string or token id");
  if (prompt[0].is_number()) return add_ids(prompt, "prompt");
  for (size_t i = 0; i < prompt.size(); ++i) {
    const std::string which = str("prompt[", i, "]");
    if (prompt[i].is_string() && prompt[0].is_string()) {
      add_text(prompt[i].get<std::string>(), which);
    } else if (prompt[i].is_array() && prompt[0].is_array()) {
      add_ids(prompt[i], which);
    } else {
      invalid("prompt", str("'", which, "' is ", type_of(prompt[i]), " where '", "prompt[0]' is ",
                            type_of(prompt[0]), ": 'prompt' must be ", shapes));
    }
  }
}

// The body as a JSON object whose fields are all in `allowed`; 404 when `model` names another
// model than the one served.
nlohmann::json read_body(const std::string& text, const std::vector<std::string>& allowed,
                         const ServedModel& model) {
  nlohmann::json body;
  try {
    body = nlohmann::json::parse(text);
  } catch (const nlohmann::json::parse_error& error) {
    invalid("", str("the body is not valid JSON: ", error.what()));
  }
  if (!body.is_object()) invalid("", str("the body must be a JSON object, got ", type_of(body)));
  for (const auto& [name, value] : body.items()) {
    if (std::find(allowed.begin(), allowed.end(), name) == allowed.end()) {
      invalid(name, str("unknown field '", name, "'; allowed: ", join(allowed)));
    }
  }
  if (body.contains("model")) {
    if (!body["model"].is_string()) {
      invalid("model", str("'model' must be a string, got ", type_of(body["model"])));
    }
    if (body["model"].get<std::string>() != model.name) {
      throw ApiError(404, "invalid_request_error",
                     str("the model '", body["model"].get<std::string>(),
                         "' does not exist; this server serves '", model.name, "'"),
                     "model");
    }
  }
  return body;
}

// The fields both APIs share: sampling, stop strings, streaming, n, penalties, ignore_eos.
void read_sampling(const nlohmann::json& body, const ServedModel& model,
                   CompletionRequest& request) {
  request.sampling.temperature = 1.0;
  request.sampling.top_k = 0;
  request.sampling.top_p = 1.0;
  if (body.contains("temperature")) {
    request.sampling.temperature = number_field(body, "temperature");
    if (!(request.sampling.temperature >= 0 && request.sampling.temperature <= 2)) {
      invalid("temperature", str("'temperature' (", request.sampling.temperature,
                                 ") must be in [0, 2]; 0 = greedy"));
    }
  }
  if (body.contains("top_p")) {
    request.sampling.top_p = number_field(body, "top_p");
    if (!(request.sampling.top_p > 0 && request.sampling.top_p <= 1)) {
      invalid("top_p", str("'top_p' (", request.sampling.top_p, ") must be in (0, 1]"));
    }
  }
  if (body.contains("top_k")) {
    request.sampling.top_k = integer_field(body, "top_k");
    if (request.sampling.top_k < 0) {
      invalid("top_k", str("'top_k' (", request.sampling.top_k, ") must be >= 0; 0 = all tokens"));
    }
  }
  if (body.contains("seed")) {
    request.sampling.seed = static_cast<uint64_t>(integer_field(body, "seed"));
    request.seeded = true;
  }
  if (body.contains("stop")) {
    request.stop = strings_field(body, "stop");
    for (const std::string& word : request.stop) {
      if (word.empty()) invalid("stop", "'stop' strings must not be empty");
    }
  }
  // The model's end-of-text tokens end a completion unless `ignore_eos` (vLLM's extension, for
  // benchmarks that need a fixed output length).
  if (!(body.contains("ignore_eos") && bool_field(body, "ignore_eos"))) {
    request.sampling.stop_token_ids = model.stop_token_ids;
  }
  if (body.contains("stream")) request.stream = bool_field(body, "stream");
  if (body.contains("stream_options") && !body["stream_options"].is_null()) {
    const nlohmann::json& options = body["stream_options"];
    if (!request.stream) invalid("stream_options", "'stream_options' needs 'stream': true");
    if (!options.is_object()) {
      invalid("stream_options", str("'stream_options' must be an object, got ", type_of(options)));
    }
    for (const auto& [name, value] : options.items()) {
      if (name != "include_usage") {
        invalid("stream_options",
                str("unknown field 'stream_options.", name, "'; allowed: include_usage"));
      }
      if (!value.is_boolean()) {
        invalid("stream_options",
                str("'stream_options.include_usage' must be a boolean, got ", type_of(value)));
      }
      request.include_usage = value.get<bool>();
    }
  }
  if (body.contains("n")) {
    request.n = integer_field(body, "n");
    if (request.n < 1 || request.n > kMaxChoices) {
      invalid("n", str("'n' (", request.n, ") must be in [1, ", kMaxChoices,
                       "]: the completions to generate per prompt"));
    }
  }
  for (const char* name : {"presence_penalty", "frequency_penalty"}) {
    if (!body.contains(name)) continue;
    const double penalty = number_field(body, name);
    if (!(penalty >= -2 && penalty <= 2)) {
      invalid(name, str("'", name, "' (", penalty, ") must be in [-2, 2]"));
    }
    (std::string(name) == "presence_penalty" ? request.sampling.presence_penalty
                                             : request.sampling.frequency_penalty) = penalty;
  }
}

// Checks the prompts against the context and reads the token limit from `max_field`
// (max_tokens, or the chat API's max_completion_tokens); `fallback` is the limit without it
// (cut to the context).
void read_limit(const nlohmann::json& body, const char* max_field, int64_t fallback,
                const ServedModel& model, CompletionRequest& request) {
  const int64_t seq_len = model.seq_len;
  int64_t longest = 0;
  for (size_t i = 0; i < request.prompt_ids.size(); ++i) {
    const auto length = static_cast<int64_t>(request.prompt_ids[i].size());
    const std::string which = request.prompts.size() > 1 ? str("prompt[", i, "]") : "prompt";
    if (length == 0) invalid("prompt", str("'", which, "' is empty; it needs at least one token"));
    if (length >= seq_len) {
      invalid("prompt", str("'", which, "' is ", length, " tokens; the model's context is ",
                            seq_len, " tokens, so a prompt may hold at most ", seq_len - 1));
    }
    longest = std::max(longest, length);
  }
  if (body.contains(max_field)) {
    const int64_t max_tokens = integer_field(body, max_field);
    // 0 only scores the prompt: with echo, its logprobs are the answer.
    if (max_tokens < (request.echo ? 0 : 1)) {
      invalid(max_field, str("'", max_field, "' (", max_tokens, ") must be >= 1",
                             request.echo ? " (or 0 with echo)" : ""));
    }
    if (longest + max_tokens > seq_len) {
      invalid(max_field, str("'", max_field, "' (", max_tokens, ") plus the prompt (", longest,
                             " tokens) exceeds the model's context of ", seq_len,
                             " tokens; at most ", seq_len - longest, " more fit"));
    }
    request.sampling.max_new_tokens = max_tokens;
  } else {
    request.sampling.max_new_tokens = std::min(fallback, seq_len - longest);
  }
}

}  // namespace

nlohmann::json error_body(const ApiError& error) {
  auto or_null = [](const std::string& text) {
    return text.empty() ? nlohmann::json(nullptr) : nlohmann::json(text);
  };
  nlohmann::json inner = {{"message", error.what()}, {"type", error.type}};
  inner["param"] = or_null(error.param);
  inner["code"] = or_null(error.code);
  return {{"error", inner}};
}

CompletionRequest parse_completion_request(const std::string& text, const ServedModel& model) {
  const nlohmann::json body = read_body(text, allowed_fields(), model);
  CompletionRequest request;
  if (!body.contains("prompt")) invalid("prompt", "'prompt' is required");
  read_prompts(body["prompt"], model, request);
  read_sampling(body, model, request);
  if (body.contains("echo")) request.echo = bool_field(body, "echo");
  if (body.contains("return_token_ids")) {
    request.return_token_ids = bool_field(body, "return_token_ids");
  }
  if (body.contains("logprobs") && !body["logprobs"].is_null()) {
    request.logprobs = integer_field(body, "logprobs");
    if (request.logprobs < 0 || request.logprobs > kMaxLogprobs) {
      invalid("logprobs", str("'logprobs' (", request.logprobs, ") must be in [0, ", kMaxLogprobs,
                              "]: the likeliest alternatives to return per token"));
    }
  }

  read_limit(body, "max_tokens", kDefaultMaxTokens, model, request);
  return request;
}

CompletionRequest parse_chat_request(const std::string& text, const ServedModel& model) {
  static const std::vector<std::string> allowed =
      fields_with({"messages", "max_completion_tokens", "top_logprobs"});
  const nlohmann::json body = read_body(text, allowed, model);
  if (!model.tokenizer || !model.chat_template) {
    invalid("messages",
            !model.tokenizer
                ? "this model came without tokenizer files: chat needs text; use /v1/completions "
                  "with token ids"
                : "this model has no chat template (tokenizer_config.json's chat_template): "
                  "start strata serve with --chat-template FILE, or use /v1/completions");
  }
  if (!body.contains("messages")) invalid("messages", "'messages' is required");
  // The messages as the template sees them, keys in the client's order (tojson prints them).
  // A content given as parts is its text parts joined by newlines, as vLLM gives it to
  // templates that expect a string.
  jinja::Json messages = jinja::Json::parse(body["messages"].dump());
  if (!messages.is_array() || messages.empty()) {
    invalid("messages", "'messages' must be a non-empty array of {\"role\", \"content\"} objects");
  }
  for (size_t i = 0; i < messages.size(); ++i) {
    jinja::Json& message = messages[i];
    const std::string which = str("messages[", i, "]");
    if (!message.is_object() || !message.contains("role") || !message["role"].is_string()) {
      invalid("messages", str("'", which, "' must be an object with a string 'role'"));
    }
    if (!message.contains("content")) continue;
    jinja::Json& content = message["content"];
    if (content.is_string() || content.is_null()) continue;
    if (!content.is_array()) {
      invalid("messages", str("'", which, ".content' must be a string or an array of parts"));
    }
    std::string joined;
    for (size_t j = 0; j < content.size(); ++j) {
      const jinja::Json& part = content[j];
      if (!part.is_object() || part.value("type", "") != "text" || !part.contains("text") ||
          !part["text"].is_string()) {
        invalid("messages", str("'", which, ".content[", j,
                                "]' is not a text part ({\"type\": \"text\", \"text\": ...}); "
                                "this server reads text only"));
      }
      joined += (j ? "\n" : "") + part["text"].get<std::string>();
    }
    content = joined;
  }
  std::string prompt;
  try {
    prompt = model.chat_template->render(messages, /*add_generation_prompt=*/true);
  } catch (const jinja::RenderError& error) {
    invalid("messages",
            str("the model's chat template refused the conversation: ", error.message()));
  } catch (const UserError& error) {
    invalid("messages",
            str("the model's chat template cannot render the conversation: ", error.what()));
  }
  CompletionRequest request;
  request.chat = true;
  const std::vector<int32_t> ids = model.tokenizer->encode(prompt);
  request.prompts.push_back(prompt);
  request.prompt_ids.emplace_back(ids.begin(), ids.end());
  read_sampling(body, model, request);
  // logprobs: a boolean here; top_logprobs the alternatives per token.
  const bool logprobs =
      body.contains("logprobs") && !body["logprobs"].is_null() && bool_field(body, "logprobs");
  if (body.contains("top_logprobs") && !body["top_logprobs"].is_null()) {
    const int64_t top = integer_field(body, "top_logprobs");
    if (top < 0 || top > kMaxLogprobs) {
      invalid("top_logprobs", str("'top_logprobs' (", top, ") must be in [0, ", kMaxLogprobs, "]"));
    }
    if (!logprobs) invalid("top_logprobs", "'top_logprobs' needs 'logprobs': true");
    request.logprobs = top;
  } else if (logprobs) {
    request.logprobs = 0;
  }
  // max_completion_tokens replaces max_tokens (deprecated in the chat API); without either,
  // the completion may fill the context.
  const char* limit =
      body.contains("max_completion_tokens") ? "max_completion_tokens" : "max_tokens";
  read_limit(body, limit, model.seq_len, model, request);
  return request;
}

}  // namespace strata
