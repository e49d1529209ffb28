// `strata tokenize`: stdin to ids, ids to text, or a conversation to its prompt.
#include "strata/cli/tokenize.h"

#include <charconv>
#include <fstream>
#include <iostream>
#include <iterator>
#include <nlohmann/json.hpp>

#include "strata/core/error.h"
#include "strata/data/chat_template.h"
#include "strata/data/tokenizer.h"

namespace strata {

namespace {

std::string read_stdin() {
  return std::string(std::istreambuf_iterator<char>(std::cin), std::istreambuf_iterator<char>());
}

void print_ids(const std::vector<int32_t>& ids) {
  std::string out = "[";
  char number[16];
  for (size_t i = 0; i < ids.size(); ++i) {
    if (i > 0) out += ", ";
    auto end = std::to_chars(number, number + sizeof(number), ids[i]).ptr;
    out.append(number, end);
  }
  out += "]\n";
  std::cout << out;
}

std::vector<int64_t> parse_ids(const std::string& text) {
  const char* expected = "strata tokenize --decode reads a JSON array of integer ids on stdin";
  nlohmann::json ids;
  try {
    ids = nlohmann::json::parse(text);
  } catch (const nlohmann::json::parse_error& error) {
    throw UserError(str(expected, "; this is not JSON: ", error.what()));
  }
  STRATA_REQUIRE(ids.is_array(), expected, ", not ", ids.type_name());
  std::vector<int64_t> parsed;
  for (size_t i = 0; i < ids.size(); ++i) {
    STRATA_REQUIRE(ids[i].is_number_integer(), expected, "; element ", i, " is ", ids[i].dump());
    parsed.push_back(ids[i].get<int64_t>());
  }
  return parsed;
}

// The prompt for the conversation in `path`: a JSON array of messages, or an object with
// "messages" and optional "tools" (the body of a chat completions request).
std::string render_chat(const std::string& model_dir, const std::string& path,
                        const std::string& template_file, bool add_generation_prompt) {
  std::ifstream in(path, std::ios::binary);
  STRATA_REQUIRE(in, "cannot read the conversation ", path);
  const char* expected =
      "--chat reads a JSON array of messages, or an object with \"messages\" and \"tools\"";
  jinja::Json chat;
  try {
    chat = jinja::Json::parse(in);
  } catch (const jinja::Json::parse_error& error) {
    throw UserError(str(path, ": ", expected, "; this is not JSON: ", error.what()));
  }
  jinja::Json messages = chat, tools = nullptr;
  if (chat.is_object()) {
    STRATA_REQUIRE(chat.contains("messages"), path, ": ", expected);
    messages = chat["messages"];
    tools = chat.value("tools", jinja::Json(nullptr));
  }
  STRATA_REQUIRE(messages.is_array(), path, ": ", expected);
  ChatTemplate chat_template = ChatTemplate::from_model_dir(model_dir, template_file);
  return chat_template.render(messages, add_generation_prompt, tools);
}

}  // namespace

CLI::App* add_tokenize_command(CLI::App& app) {
  struct Flags {
    std::string tokenizer;
    bool decode = false;
    std::string chat, chat_template;
    bool no_generation_prompt = false;
  };
  auto flags = std::make_shared<Flags>();
  CLI::App* command = app.add_subcommand(
      "tokenize",
      "Print the ids of the UTF-8 text on stdin as a JSON array (--decode: the text "
      "of a JSON array of ids)");
  command
      ->add_option("--tokenizer", flags->tokenizer,
                   "\"byte\", or a directory holding tokenizer.json, vocab.json + merges.txt or "
                   "tokenizer.model")
      ->required();
  command->add_flag("--decode", flags->decode, "Read a JSON array of ids, print their text");
  command->add_option("--chat", flags->chat,
                      "Print the prompt the model's chat template (tokenizer_config.json) makes of "
                      "this JSON file of messages, ending with the assistant's turn");
  command->add_option("--chat-template", flags->chat_template,
                      "With --chat: a Jinja file to use instead of the directory's template");
  command->add_flag("--no-generation-prompt", flags->no_generation_prompt,
                    "With --chat: leave out the assistant's header at the end");
  command->callback([flags] {
    try {
      STRATA_REQUIRE(
          !flags->chat.empty() || (flags->chat_template.empty() && !flags->no_generation_prompt),
          "--chat-template and --no-generation-prompt go with --chat MESSAGES.json");
      if (!flags->chat.empty()) {
        STRATA_REQUIRE(!flags->decode, "--chat and --decode do not go together");
        std::cout << render_chat(flags->tokenizer, flags->chat, flags->chat_template,
                                 !flags->no_generation_prompt);
        std::cout.flush();
        return;
      }
      auto tokenizer = make_tokenizer(flags->tokenizer);
      if (flags->decode) {
        std::cout << tokenizer->decode(parse_ids(read_stdin()));
      } else {
        print_ids(tokenizer->encode(read_stdin()));
      }
      std::cout.flush();
    } catch (const UserError& error) {
      std::cerr << "strata: error: " << error.what() << std::endl;
      throw CLI::RuntimeError(2);
    }
  });
  return command;
}

}  // namespace strata
