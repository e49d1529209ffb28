// `strata tokenize` run in process (the command's source is compiled into this test): text on
// stdin to a JSON array of ids and back with --decode, a conversation to its prompt with --chat
// (as python3-jinja2 renders it: tests/support/render_chat_template.py), and exit status 2 with
// a message for bad input.
#include <gtest/gtest.h>

#include <iostream>
#include <sstream>

#include "command_runner.h"
#include "strata/cli/tokenize.h"
#include "test_support.h"
#include "tiny_tokenizer.h"

namespace strata {
namespace {

using testing::CommandResult;

// Runs `strata tokenize args` with `input` on stdin.
CommandResult run_tokenize(const std::string& input, const std::vector<std::string>& args) {
  std::istringstream in(input);
  std::streambuf* saved = std::cin.rdbuf(in.rdbuf());
  CommandResult result = testing::run_subcommand("tokenize", add_tokenize_command, args);
  std::cin.rdbuf(saved);
  return result;
}

class TokenizeCommand : public ::testing::Test {
 protected:
  void SetUp() override {
    testing::write_json(dir_.file("tokenizer.json"), testing::tiny_tokenizer_json());
  }
  testing::TempDir dir_;
};

TEST_F(TokenizeCommand, PrintsTheIdsAsAJsonArray) {
  CommandResult result = run_tokenize("hello ell\n", {"--tokenizer", dir_.path()});
  EXPECT_EQ(result.exit_code, 0) << result.err;
  EXPECT_EQ(result.out, "[260, 32, 101, 256, 10]\n");
  EXPECT_EQ(run_tokenize("", {"--tokenizer", dir_.path()}).out, "[]\n");
  EXPECT_EQ(run_tokenize("hi", {"--tokenizer", "byte"}).out, "[104, 105]\n");
}

TEST_F(TokenizeCommand, DecodesAJsonArrayOfIds) {
  CommandResult result =
      run_tokenize(" [260, 32, 101, 256, 10, 99999]\n", {"--tokenizer", dir_.path(), "--decode"});
  EXPECT_EQ(result.exit_code, 0) << result.err;
  EXPECT_EQ(result.out, "hello ell\n\xEF\xBF\xBD");
}

TEST_F(TokenizeCommand, RefusesBadInputSayingWhatItWants) {
  testing::expect_usage_error(run_tokenize("[1, \"a\"]", {"--tokenizer", dir_.path(), "--decode"}),
                              {"reads a JSON array of integer ids", "element 1 is \"a\""});
  testing::expect_usage_error(run_tokenize("hello", {"--tokenizer", dir_.path(), "--decode"}),
                              {"reads a JSON array of integer ids", "this is not JSON"});
  testing::expect_usage_error(run_tokenize("x", {"--tokenizer", dir_.file("absent")}),
                              {"absent\" is not available", "a directory holding tokenizer.json"});
  EXPECT_NE(run_tokenize("x", {}).exit_code, 0);  // --tokenizer is required
}

// The prompt python3-jinja2 renders, as transformers would, for the same directory and file.
std::string jinja2_prompt(const std::string& args) {
  std::string prompt;
  int status =
      testing::run_command(std::string(STRATA_TORCH_PYTHON) + " " + STRATA_CHAT_TEMPLATE_ORACLE +
                               " render " + args + " 2>/dev/null",
                           &prompt);
  EXPECT_EQ(status, 0) << prompt;
  return prompt;
}

TEST_F(TokenizeCommand, PrintsTheChatPromptOfAConversation) {
  std::string qwen = testing::read_bytes(std::string(STRATA_SOURCE_DIR) +
                                         "/tests/data/chat_templates/qwen2.5_instruct.jinja");
  testing::write_json(dir_.file("tokenizer_config.json"),
                      {{"eos_token", "<|im_end|>"}, {"chat_template", qwen}});
  testing::write_bytes(dir_.file("chat.json"),
                       R"([{"role": "user", "content": "Grüße 🙂"},
                           {"role": "assistant", "content": "Hi"},
                           {"role": "user", "content": "  \"quoted\"\n"}])");
  const std::string chat = dir_.file("chat.json");
  CommandResult result = run_tokenize("", {"--tokenizer", dir_.path(), "--chat", chat});
  EXPECT_EQ(result.exit_code, 0) << result.err;
  EXPECT_EQ(result.out, jinja2_prompt(dir_.path() + " " + chat));
  EXPECT_NE(result.out.find("<|im_start|>assistant\n"), std::string::npos);

  result = run_tokenize("", {"--tokenizer", dir_.path(), "--chat", chat, "--no-generation-prompt"});
  EXPECT_EQ(result.out, jinja2_prompt(dir_.path() + " " + chat + " --no-generation-prompt"));

  // A request body with tools takes the template's tools branch.
  testing::write_bytes(dir_.file("request.json"),
                       R"({"messages": [{"role": "user", "content": "2+3?"}],
                           "tools": [{"type": "function", "function": {"name": "add"}}]})");
  result = run_tokenize("", {"--tokenizer", dir_.path(), "--chat", dir_.file("request.json")});
  EXPECT_EQ(result.out, jinja2_prompt(dir_.path() + " " + dir_.file("request.json")));
  EXPECT_NE(result.out.find("# Tools"), std::string::npos);

  testing::write_bytes(dir_.file("mine.jinja"),
                       "{% for m in messages %}<{{ m.role }}>{% endfor %}");
  result = run_tokenize(
      "", {"--tokenizer", dir_.path(), "--chat", chat, "--chat-template", dir_.file("mine.jinja")});
  EXPECT_EQ(result.out, "<user><assistant><user>");
}

TEST_F(TokenizeCommand, RefusesAChatItCannotRenderSayingWhy) {
  testing::write_bytes(dir_.file("chat.json"), R"([{"role": "assistant", "content": "first"}])");
  const std::string chat = dir_.file("chat.json");
  testing::expect_usage_error(run_tokenize("", {"--tokenizer", dir_.path(), "--chat", chat}),
                              {"tokenizer_config.json", "--chat-template"});
  testing::write_json(dir_.file("tokenizer_config.json"),
                      {{"chat_template",
                        "{% if messages[0].role != 'user' %}{{ raise_exception('user first!') }}"
                        "{% endif %}"}});
  testing::expect_usage_error(run_tokenize("", {"--tokenizer", dir_.path(), "--chat", chat}),
                              {"line 1", "user first!"});
  testing::write_json(dir_.file("tokenizer_config.json"),
                      {{"chat_template", "{% macro m() %}{% endmacro %}"}});
  testing::expect_usage_error(run_tokenize("", {"--tokenizer", dir_.path(), "--chat", chat}),
                              {"unsupported tag", "macro"});
  testing::write_bytes(dir_.file("bad.json"), R"({"role": "user"})");
  testing::expect_usage_error(
      run_tokenize("", {"--tokenizer", dir_.path(), "--chat", dir_.file("bad.json")}),
      {"JSON array of messages"});
  testing::expect_usage_error(
      run_tokenize("", {"--tokenizer", dir_.path(), "--no-generation-prompt"}), {"--chat"});
}

}  // namespace
}  // namespace strata
