// Helpers for the data tests: writing small text files. (Reading a file's bytes:
// test_support.h's read_bytes; expecting a UserError: expect_error.h; an environment variable
// for one scope: test_support.h's ScopedEnv.)
#pragma once
#include <gtest/gtest.h>

#include <fstream>
#include <string>

#include "test_support.h"

namespace strata::testing {

inline void write_text(const std::string& path, const std::string& text) {
  std::ofstream out(path, std::ios::binary);
  out << text;
  ASSERT_TRUE(out.good()) << "cannot write " << path;
}

}  // namespace strata::testing
