// Watchdog: one thread waiting on a condition variable with the deadline of the last beat.
#include "strata/train/watchdog.h"

#include <cstdio>
#include <cstdlib>

#include "strata/core/error.h"
#include "strata/dist/flight_record.h"

namespace strata {

Watchdog::Watchdog(double timeout_s, int rank) : timeout_s_(timeout_s), rank_(rank) {
  if (timeout_s_ > 0) thread_ = std::thread([this] { watch(); });
}

Watchdog::~Watchdog() {
  if (!thread_.joinable()) return;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    stopping_ = true;
  }
  changed_.notify_one();
  thread_.join();
}

void Watchdog::beat(int64_t steps_done) {
  if (!thread_.joinable()) return;
  std::lock_guard<std::mutex> lock(mutex_);
  last_beat_ = std::chrono::steady_clock::now();
  steps_done_ = steps_done;
}

void Watchdog::watch() {
  const auto timeout = std::chrono::duration_cast<std::chrono::steady_clock::duration>(
      std::chrono::duration<double>(timeout_s_));
  std::unique_lock<std::mutex> lock(mutex_);
  while (!stopping_) {
    const auto deadline = last_beat_ + timeout;
    if (std::chrono::steady_clock::now() < deadline) {
      changed_.wait_until(lock, deadline);
      continue;
    }
    const std::string pending = oldest_pending_operation();
    std::string reason = str("no step finished within fault.step_timeout_s = ", timeout_s_,
                             " s after step ", steps_done_, "; ",
                             pending.empty() ? "no communication pending (hung in computation)"
                                             : "waiting in " + pending);
    const std::string record = write_flight_record(reason);
    std::fprintf(stderr, "strata: rank %d: hang: %s%s\n", rank_, reason.c_str(),
                 record.empty() ? "" : ("; flight record " + record).c_str());
    std::fflush(stderr);
    std::_Exit(kExitCode);
  }
}

}  // namespace strata
