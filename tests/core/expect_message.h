// Helpers for tests of user-facing messages: run code, catch the UserError it throws, and
// check that the message quotes the keys and numbers it should.
#pragma once
#include <gtest/gtest.h>

#include <string>

#include "strata/core/error.h"

namespace strata::testing {

// The message of the UserError that `code` throws, or a marker that fails every
// EXPECT_CONTAINS when it throws none.
template <typename Code>
std::string user_error(Code&& code) {
  try {
    code();
  } catch (const UserError& error) {
    return error.what();
  }
  return "<no UserError was thrown>";
}

}  // namespace strata::testing

#define EXPECT_CONTAINS(text, part)                          \
  EXPECT_NE(std::string(text).find(part), std::string::npos) \
      << "expected to find\n  " << (part) << "\nin\n  " << (text)

#define EXPECT_NOT_CONTAINS(text, part)                      \
  EXPECT_EQ(std::string(text).find(part), std::string::npos) \
      << "expected not to find\n  " << (part) << "\nin\n  " << (text)
