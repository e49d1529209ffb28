// STRATA_INJECT_FAULT: read once; a malformed value is a UserError naming it.
#include "strata/core/fault_injection.h"

#include <csignal>
#include <cstdlib>
#include <cstring>
#include <sstream>
#include <string>

#include "strata/core/error.h"

namespace strata {
namespace {

struct Injection {
  int signal = 0;  // 0: none
  std::string point;
  int64_t step = -1;
  int rank = -1;
};

Injection read_injection() {
  Injection injection;
  const char* value = std::getenv("STRATA_INJECT_FAULT");
  const char* attempt = std::getenv("STRATA_ATTEMPT");
  if (value == nullptr || *value == '\0') return injection;
  if (attempt != nullptr && std::strcmp(attempt, "0") != 0) return injection;
  std::istringstream words(value);
  std::string signal;
  words >> signal >> injection.point >> injection.step >> injection.rank;
  const bool known_point =
      injection.point == "step" || injection.point == "save" || injection.point == "async_write";
  STRATA_REQUIRE(words && (signal == "KILL" || signal == "STOP") && known_point &&
                     injection.step >= 0 && injection.rank >= 0,
                 "STRATA_INJECT_FAULT='", value,
                 "' must be 'SIGNAL POINT STEP RANK' with SIGNAL KILL or STOP and POINT step, "
                 "save or async_write, e.g. 'KILL step 3 1'");
  injection.signal = signal == "KILL" ? SIGKILL : SIGSTOP;
  return injection;
}

}  // namespace

void inject_fault(const char* point, int64_t step, int rank) {
  static const Injection injection = read_injection();
  if (injection.signal != 0 && injection.point == point && injection.step == step &&
      injection.rank == rank) {
    std::raise(injection.signal);
  }
}

}  // namespace strata
