// Implementation of the in-process subcommand runner.
#include "command_runner.h"

#include <gtest/gtest.h>
#include <CLI/CLI.hpp>

namespace strata::testing {

CommandResult run_subcommand(const std::string& name,
                             const std::function<void(CLI::App&)>& add_command,
                             const std::vector<std::string>& args) {
  CLI::App app{"strata"};
  app.require_subcommand(1);
  add_command(app);
  std::vector<std::string> words = {"strata", name};
  words.insert(words.end(), args.begin(), args.end());
  CommandResult result;
  result.command = "strata " + name;
  for (const std::string& arg : args) result.command += " " + arg;
  std::vector<char*> argv;
  for (auto& word : words) argv.push_back(word.data());
  ::testing::internal::CaptureStdout();
  ::testing::internal::CaptureStderr();
  try {
    app.parse(static_cast<int>(argv.size()), argv.data());
  } catch (const CLI::ParseError& error) {
    result.exit_code = app.exit(error);
  }
  result.out = ::testing::internal::GetCapturedStdout();
  result.err = ::testing::internal::GetCapturedStderr();
  return result;
}

void expect_usage_error(const CommandResult& result, const std::vector<std::string>& parts) {
  EXPECT_EQ(result.exit_code, 2) << result.command << "\n" << result.out << result.err;
  EXPECT_NE(result.err.find("strata: error: "), std::string::npos)
      << result.command << ": " << result.err;
  for (const std::string& part : parts) {
    EXPECT_NE(result.err.find(part), std::string::npos)
        << result.command << ": '" << part << "' not in: " << result.err;
  }
}

}  // namespace strata::testing
