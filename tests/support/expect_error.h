// Expecting an error and checking its message: run code, catch the UserError (or other
// exception type) it throws, and check that the message quotes the keys and numbers it should.
#pragma once
#include <gtest/gtest.h>

#include <string>
#include <utility>
#include <vector>

#include "strata/core/error.h"

namespace strata::testing {

// The message of the `Error` that `action` throws. When it throws none: a test failure, and a
// marker no expected text contains, so the caller's EXPECT_CONTAINS fails at its own line too.
// Other exceptions pass through to GoogleTest, which fails the test naming them.
template <typename Error, typename Action>
std::string message_of(Action&& action) {
  try {
    std::forward<Action>(action)();
  } catch (const Error& error) {
    return error.what();
  }
  ADD_FAILURE() << "expected an exception; the code returned normally";
  return "<no exception was thrown>";
}

// The message of the UserError that `action` throws (see message_of).
template <typename Action>
std::string user_error(Action&& action) {
  return message_of<UserError>(std::forward<Action>(action));
}

// Success when `text` contains `part`; else a failure quoting both.
inline ::testing::AssertionResult contains(const std::string& text, const std::string& part) {
  if (text.find(part) != std::string::npos) return ::testing::AssertionSuccess();
  return ::testing::AssertionFailure() << "expected to find\n  " << part << "\nin\n  " << text;
}

// Success when `text` does not contain `part`; else a failure quoting both.
inline ::testing::AssertionResult lacks(const std::string& text, const std::string& part) {
  if (text.find(part) == std::string::npos) return ::testing::AssertionSuccess();
  return ::testing::AssertionFailure() << "expected not to find\n  " << part << "\nin\n  " << text;
}

// Expects `action` to throw a UserError whose message contains every one of `parts`.
template <typename Action>
void expect_user_error(Action&& action, const std::vector<std::string>& parts) {
  const std::string message = user_error(std::forward<Action>(action));
  for (const std::string& part : parts) EXPECT_TRUE(contains(message, part));
}

}  // namespace strata::testing

// Each evaluates `text` once (it is often a call that runs the code under test).
#define EXPECT_CONTAINS(text, part) EXPECT_TRUE(::strata::testing::contains((text), (part)))
#define EXPECT_NOT_CONTAINS(text, part) EXPECT_TRUE(::strata::testing::lacks((text), (part)))
