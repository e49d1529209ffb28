// `strata tokenize` run in process (the command's source is compiled into this test): text on
// stdin to a JSON array of ids and back with --decode, and exit status 2 with a message for
// bad input.
#include <gtest/gtest.h>

#include <iostream>
#include <sstream>

#include "command_runner.h"
#include "strata/cli/tokenize.h"
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

}  // namespace
}  // namespace strata
