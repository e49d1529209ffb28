// The step watchdog (fault.step_timeout_s): a thread beside the training loop. When no step
// (or evaluation, or save) finished for the timeout, the rank is hung outside communication
// too long: the watchdog writes the flight record (dist/flight_record.h), prints a one-line
// diagnosis naming the oldest pending communication, and ends the process with exit code 3,
// so that the supervisor restarts the job. Waits inside communication are bounded by
// parallel.comm_timeout_s on the training thread itself.
#pragma once
#include <chrono>
#include <condition_variable>
#include <mutex>
#include <thread>

namespace strata {

class Watchdog {
 public:
  static constexpr int kExitCode = 3;
  // timeout_s = 0: no thread, beat() does nothing.
  Watchdog(double timeout_s, int rank);
  ~Watchdog();
  Watchdog(const Watchdog&) = delete;
  Watchdog& operator=(const Watchdog&) = delete;

  // Progress: `steps_done` optimizer steps are done. Restarts the timeout.
  void beat(int64_t steps_done);

 private:
  void watch();

  const double timeout_s_;
  const int rank_;
  std::mutex mutex_;
  std::condition_variable changed_;
  std::chrono::steady_clock::time_point last_beat_ = std::chrono::steady_clock::now();
  int64_t steps_done_ = 0;
  bool stopping_ = false;
  std::thread thread_;
};

}  // namespace strata
