// STRATA_INJECT_FAULT: read once; a malformed value is a UserError naming it.
#include "strata/core/fault_injection.h"

#include <csignal>
#include <cstdlib>
#include <sstream>
#include <string>
#include <vector>

#include "strata/core/error.h"

namespace strata {
namespace {

struct Injection {
  int signal = 0;
  std::string point;
  int64_t step = -1;
  int rank = -1;
  int64_t attempt = 0;
};

// One "SIGNAL POINT STEP RANK [ATTEMPT]" of `value`.
Injection read_one(const std::string& fault, const char* value) {
  Injection injection;
  std::istringstream words(fault);
  std::string signal;
  words >> signal >> injection.point >> injection.step >> injection.rank;
  const bool known_point =
      injection.point == "step" || injection.point == "save" || injection.point == "async_write";
  bool valid = words && (signal == "KILL" || signal == "STOP") && known_point &&
               injection.step >= 0 && injection.rank >= 0;
  if (valid && !(words >> injection.attempt)) {
    valid = words.eof();
    injection.attempt = 0;
  }
  std::string rest;
  STRATA_REQUIRE(valid && injection.attempt >= 0 && !(words >> rest), "STRATA_INJECT_FAULT='",
                 value,
                 "' must be 'SIGNAL POINT STEP RANK [ATTEMPT]' (several separated by ',') with "
                 "SIGNAL KILL or STOP and POINT step, save or async_write, e.g. 'KILL step 3 1'");
  injection.signal = signal == "KILL" ? SIGKILL : SIGSTOP;
  return injection;
}

// The faults of this attempt (STRATA_ATTEMPT, absent: 0).
std::vector<Injection> read_injections() {
  std::vector<Injection> injections;
  const char* value = std::getenv("STRATA_INJECT_FAULT");
  if (value == nullptr || *value == '\0') return injections;
  const char* attempt_text = std::getenv("STRATA_ATTEMPT");
  const int64_t attempt = attempt_text == nullptr ? 0 : std::atoll(attempt_text);
  std::istringstream faults(value);
  for (std::string fault; std::getline(faults, fault, ',');) {
    const Injection injection = read_one(fault, value);
    if (injection.attempt == attempt) injections.push_back(injection);
  }
  return injections;
}

}  // namespace

void inject_fault(const char* point, int64_t step, int rank) {
  static const std::vector<Injection> injections = read_injections();
  for (const Injection& injection : injections) {
    if (injection.point == point && injection.step == step && injection.rank == rank) {
      std::raise(injection.signal);
    }
  }
}

}  // namespace strata
