// One `strata` subcommand run in process: a test compiles the command's source in and registers
// only that command, so it needs neither the strata binary nor main.cpp.
#pragma once
#include <functional>
#include <string>
#include <vector>

namespace CLI {
class App;
}

namespace strata::testing {

struct CommandResult {
  std::string command;  // "strata <name> <args>", for failure messages
  int exit_code = 0;
  std::string out, err;  // what the command printed to stdout and to stderr
};

// Parses "strata <name> <args>" with the subcommand that `add_command` registers, as the binary
// would (CLI11_PARSE's exit code included), capturing stdout and stderr.
CommandResult run_subcommand(const std::string& name,
                             const std::function<void(CLI::App&)>& add_command,
                             const std::vector<std::string>& args);

// Expects the command to have failed as bad input does: exit status 2, and "strata: error: "
// on stderr followed by a message containing every one of `parts`.
void expect_usage_error(const CommandResult& result, const std::vector<std::string>& parts);

}  // namespace strata::testing
