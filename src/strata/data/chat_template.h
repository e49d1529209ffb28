// A model's chat template: the Jinja text in its tokenizer_config.json (`chat_template`) that
// turns a conversation (OpenAI-style messages) into the prompt the model was trained on, rendered
// as transformers' apply_chat_template renders it (docs/models.md, "Chat templates"). Parsed once
// when loaded, so a template outside the supported subset fails at startup, naming the construct.
#pragma once
#include <string>

#include "strata/data/jinja.h"

namespace strata {

class ChatTemplate {
 public:
  // Reads DIR/tokenizer_config.json: `chat_template` (a string, or a list of {name, template} of
  // which "default" is taken) and the special tokens the template sees (bos_token, eos_token,
  // ...: strings or {"content": ...} objects). A non-empty `template_file` replaces the config's
  // template (`--chat-template FILE`); the directory then needs no tokenizer_config.json.
  static ChatTemplate from_model_dir(const std::string& dir, const std::string& template_file = "");

  // `special_tokens`: a JSON object of the extra variables (bos_token, ...). `name` prefixes
  // errors.
  ChatTemplate(std::string_view source, std::string name, jinja::Json special_tokens);

  // The prompt for `messages` (a JSON array of {"role", "content", ...} objects) with optional
  // `tools` (a JSON array of tool schemas, or null), ending with the assistant's header when
  // `add_generation_prompt`. Key order matters to `tojson`: parse requests into
  // nlohmann::ordered_json. Throws jinja::RenderError when the template refuses the
  // conversation (raise_exception: message() is its text, for a 400 response).
  std::string render(const jinja::Json& messages, bool add_generation_prompt,
                     const jinja::Json& tools = nullptr) const;

  const std::string& name() const { return template_.name(); }
  // Tells templates apart (a hash of the source and the special tokens): a preparation
  // resumes only with the template it began with.
  const std::string& fingerprint() const { return fingerprint_; }

 private:
  jinja::Template template_;
  jinja::Json special_tokens_;
  std::string fingerprint_;
};

}  // namespace strata
