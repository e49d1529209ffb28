// Helpers for the data tests: writing and reading small files. (Expecting a UserError:
// expect_error.h; an environment variable for one scope: test_support.h's ScopedEnv.)
#pragma once
#include <gtest/gtest.h>

#include <fstream>
#include <string>

namespace strata::testing {

inline void write_text(const std::string& path, const std::string& text) {
  std::ofstream out(path, std::ios::binary);
  out << text;
  ASSERT_TRUE(out.good()) << "cannot write " << path;
}

inline std::string read_bytes(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
}

}  // namespace strata::testing
