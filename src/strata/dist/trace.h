// Chrome-trace timeline of a real run (log.trace = true): every rank records complete events
// ("X" phase) for its steps, microbatch forward/backward, gradient reduction and optimizer,
// and the context-parallel ring's compute and waits (parallel/context_parallel.h);
// at the end the ranks' events are merged into <log.dir>/trace.json, one track per rank,
// which opens in Perfetto (ui.perfetto.dev) or chrome://tracing.
#pragma once
#include <chrono>
#include <cstdint>
#include <string>
#include <vector>

namespace strata {

class Comm;

class Trace {
 public:
  explicit Trace(bool enabled, int rank);
  bool enabled() const { return enabled_; }

  // RAII: records [construction, destruction) as one event named `name`; step and microbatch
  // label it when >= 0.
  class Scope {
   public:
    Scope(Trace& trace, const char* name, int64_t step, int64_t microbatch = -1);
    ~Scope();
    Scope(const Scope&) = delete;
    Scope& operator=(const Scope&) = delete;

   private:
    Trace& trace_;
    const char* name_;
    int64_t step_, microbatch_;
    double start_us_;
  };

  // Collective over world: rank 0 writes <dir>/trace.json with every rank's events.
  void write(const std::string& dir, Comm& world) const;

 private:
  struct Event {
    const char* name;
    int64_t step, microbatch;
    double start_us, duration_us;
  };
  double now_us() const;

  bool enabled_;
  int rank_;
  std::chrono::steady_clock::time_point origin_;
  std::vector<Event> events_;
};

}  // namespace strata
