// Helpers for the data tests: expecting a UserError whose message names given things,
// writing small files, and setting an environment variable for one test's duration.
#pragma once
#include <gtest/gtest.h>

#include <cstdlib>
#include <fstream>
#include <functional>
#include <string>
#include <vector>

#include "strata/core/error.h"

namespace strata::testing {

// Runs `action`, which must throw UserError with a message containing every one of `parts`.
inline void expect_user_error(const std::function<void()>& action,
                              const std::vector<std::string>& parts) {
  try {
    action();
  } catch (const UserError& error) {
    std::string message = error.what();
    for (const auto& part : parts) {
      EXPECT_NE(message.find(part), std::string::npos)
          << "message lacks \"" << part << "\": " << message;
    }
    return;
  }
  ADD_FAILURE() << "expected a UserError mentioning \"" << (parts.empty() ? "" : parts[0]) << "\"";
}

inline void write_text(const std::string& path, const std::string& text) {
  std::ofstream out(path, std::ios::binary);
  out << text;
  ASSERT_TRUE(out.good()) << "cannot write " << path;
}

inline std::string read_bytes(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
}

// Sets (or, with nullptr, unsets) an environment variable and restores it on destruction.
class ScopedEnv {
 public:
  ScopedEnv(const char* name, const char* value) : name_(name) {
    const char* old = std::getenv(name);
    had_old_ = old != nullptr;
    if (had_old_) old_ = old;
    if (value != nullptr) {
      ::setenv(name, value, 1);
    } else {
      ::unsetenv(name);
    }
  }
  ~ScopedEnv() {
    if (had_old_) {
      ::setenv(name_.c_str(), old_.c_str(), 1);
    } else {
      ::unsetenv(name_.c_str());
    }
  }
  ScopedEnv(const ScopedEnv&) = delete;
  ScopedEnv& operator=(const ScopedEnv&) = delete;

 private:
  std::string name_, old_;
  bool had_old_ = false;
};

}  // namespace strata::testing
