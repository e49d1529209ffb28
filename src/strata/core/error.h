// The two kinds of failure, never mixed (see docs/architecture.md):
//  - UserError: bad config, bad file, bad input. The message says what to change.
//  - STRATA_CHECK: a broken internal invariant. The message says "bug" and where.
// Both stay on in release builds.
#pragma once
#include <sstream>
#include <stdexcept>
#include <string>

namespace strata {

class UserError : public std::runtime_error {
 public:
  explicit UserError(const std::string& message) : std::runtime_error(message) {}
};

// A UserError that every rank of a job raises alike (a config error, a verdict the ranks
// agreed on), so that it is reported once, by rank 0, rather than once per rank.
class UserErrorOnEveryRank : public UserError {
 public:
  explicit UserErrorOnEveryRank(const std::string& message) : UserError(message) {}
};

// Raised by communication failures (MPI errors, timed-out collectives).
class CommError : public std::runtime_error {
 public:
  explicit CommError(const std::string& message) : std::runtime_error(message) {}
};

class InternalError : public std::logic_error {
 public:
  explicit InternalError(const std::string& message) : std::logic_error(message) {}
};

namespace detail {
[[noreturn]] void throw_internal(const char* file, int line, const char* condition,
                                 const std::string& message);

template <typename... Parts>
std::string concat(const Parts&... parts) {
  std::ostringstream out;
  if constexpr (sizeof...(Parts) > 0) (out << ... << parts);
  return out.str();
}
}  // namespace detail

// Builds a message from streamable parts: str("tp (", tp, ") must divide ...").
template <typename... Parts>
std::string str(const Parts&... parts) {
  return detail::concat(parts...);
}

}  // namespace strata

// Internal invariant: throws InternalError("bug at file:line: condition: message").
#define STRATA_CHECK(condition, ...)                                                  \
  do {                                                                                \
    if (!(condition)) {                                                               \
      ::strata::detail::throw_internal(__FILE__, __LINE__, #condition,                \
                                       ::strata::str("" __VA_OPT__(, ) __VA_ARGS__)); \
    }                                                                                 \
  } while (0)

// User-facing requirement: throws UserError(message) when the condition is false.
#define STRATA_REQUIRE(condition, ...)                                       \
  do {                                                                       \
    if (!(condition)) throw ::strata::UserError(::strata::str(__VA_ARGS__)); \
  } while (0)
