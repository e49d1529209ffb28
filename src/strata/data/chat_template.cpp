// Loading a chat template from a model directory and rendering a conversation with the
// variables transformers passes (tokenization_utils_base.apply_chat_template).
#include "strata/data/chat_template.h"

#include <cerrno>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "strata/core/hash.h"

namespace strata {

namespace {

std::string read_text(const std::string& path, const char* what) {
  std::ifstream in(path, std::ios::binary);
  STRATA_REQUIRE(in, "cannot read ", what, " ", path, ": ", std::strerror(errno));
  std::ostringstream text;
  text << in.rdbuf();
  STRATA_REQUIRE(!in.bad(), "cannot read ", what, " ", path, ": ", std::strerror(errno));
  return text.str();
}

// The tokens transformers' special_tokens_map holds; unset (null) ones are left out, so the
// template sees them as undefined, as it does under transformers.
const char* const kSpecialTokens[] = {"bos_token", "eos_token", "unk_token", "sep_token",
                                      "pad_token", "cls_token", "mask_token"};

jinja::Json token_text(const jinja::Json& token) {
  if (token.is_object()) return token.value("content", jinja::Json(nullptr));
  return token;
}

}  // namespace

ChatTemplate ChatTemplate::from_model_dir(const std::string& dir,
                                          const std::string& template_file) {
  const std::string config_path = (std::filesystem::path(dir) / "tokenizer_config.json").string();
  jinja::Json config = jinja::Json::object();
  if (std::filesystem::exists(config_path)) {
    try {
      config = jinja::Json::parse(read_text(config_path, "tokenizer config"));
    } catch (const jinja::Json::parse_error& error) {
      throw UserError(str(config_path, " is not JSON: ", error.what()));
    }
    STRATA_REQUIRE(config.is_object(), config_path, " is not a JSON object");
  } else {
    STRATA_REQUIRE(!template_file.empty(), dir,
                   " has no tokenizer_config.json, so no chat template: give one with "
                   "--chat-template FILE");
  }
  jinja::Json special_tokens = jinja::Json::object();
  for (const char* key : kSpecialTokens) {
    auto found = config.find(key);
    if (found == config.end()) continue;
    jinja::Json text = token_text(*found);
    if (text.is_string()) special_tokens[key] = text;
  }
  auto additional = config.find("additional_special_tokens");
  if (additional != config.end() && additional->is_array()) {
    jinja::Json tokens = jinja::Json::array();
    for (const auto& token : *additional) tokens.push_back(token_text(token));
    special_tokens["additional_special_tokens"] = tokens;
  }
  if (!template_file.empty()) {
    return ChatTemplate(read_text(template_file, "chat template"), template_file, special_tokens);
  }
  auto found = config.find("chat_template");
  STRATA_REQUIRE(found != config.end() && !found->is_null(), config_path,
                 " has no chat_template: give one with --chat-template FILE");
  if (found->is_array()) {  // named templates: "default" is the one for plain chat
    for (const auto& named : *found) {
      if (named.is_object() && named.value("name", "") == "default" && named.contains("template") &&
          named["template"].is_string()) {
        return ChatTemplate(named["template"].get<std::string>(),
                            config_path + " (chat_template \"default\")", special_tokens);
      }
    }
    throw UserError(str(config_path,
                        " lists named chat templates but none named \"default\": give one with "
                        "--chat-template FILE"));
  }
  STRATA_REQUIRE(found->is_string(), config_path,
                 ": chat_template must be a string or a list of {name, template}");
  return ChatTemplate(found->get<std::string>(), config_path, special_tokens);
}

ChatTemplate::ChatTemplate(std::string_view source, std::string name, jinja::Json special_tokens)
    : template_(source, std::move(name)), special_tokens_(std::move(special_tokens)) {
  const std::string tokens = special_tokens_.dump();
  uint64_t hash = kFnv1aBasis;
  for (std::string_view part : {source, std::string_view("\0", 1), std::string_view(tokens)}) {
    hash = fnv1a(part, hash);
  }
  fingerprint_ = hex64(hash);
}

std::string ChatTemplate::render(const jinja::Json& messages, bool add_generation_prompt,
                                 const jinja::Json& tools) const {
  STRATA_REQUIRE(messages.is_array(), "a chat's messages are a JSON array, not ",
                 messages.type_name());
  for (size_t i = 0; i < messages.size(); ++i) {
    STRATA_REQUIRE(messages[i].is_object(), "message ", i, " of the chat is not a JSON object");
  }
  STRATA_REQUIRE(tools.is_null() || tools.is_array(), "a chat's tools are a JSON array, not ",
                 tools.type_name());
  // The variables transformers passes; tools and documents are none when absent, so that
  // `tools is defined` holds and `tools is none` tells.
  jinja::Json context = special_tokens_;
  context["messages"] = messages;
  context["tools"] = tools;
  context["documents"] = nullptr;
  context["add_generation_prompt"] = add_generation_prompt;
  return template_.render(context);
}

}  // namespace strata
