// The serving engine. On rank 0 it runs in the thread that initialized MPI: every step it
// takes in new sequences, drops cancelled and timed-out ones (freeing their blocks), asks the
// scheduler for the step, broadcasts the plan, runs its stage, samples a token for every
// sequence whose prompt is fully cached, publishes the new text and retires finished
// sequences. HTTP threads submit sequences and wait for what the engine publishes. The other
// ranks follow rank 0's plans (follow_engine).
#pragma once
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "strata/core/config.h"
#include "strata/data/tokenizer.h"
#include "strata/serve/metrics.h"
#include "strata/serve/scheduler.h"
#include "strata/serve/step.h"

namespace strata {

enum class Admission { accepted, queue_full, stopping };

class Engine {
 public:
  // tokenizer: decodes the completions' text (nullptr: a model without tokenizer files; its
  // completions are ids only).
  Engine(ServedStage& stage, Comm& world, const ServeConfig& config, const Tokenizer* tokenizer,
         int64_t num_blocks);

  // --- any thread ---
  // Queues every sequence of one request, or none of them: queue_full when the waiting
  // sequences would exceed serve.max_queue, stopping once stop() was called.
  Admission submit(const std::vector<std::shared_ptr<Sequence>>& sequences);
  // Blocks until ready() holds; ready() runs under the engine's mutex after every step, so it
  // may read the sequences' published fields.
  void wait_until(const std::function<bool()>& ready);
  // Runs read() under the engine's mutex (to read published fields or metrics).
  void with_lock(const std::function<void()>& read);
  ServeMetrics& metrics() { return metrics_; }  // under with_lock only
  // Wakes the engine (after setting a sequence's `cancelled`).
  void notify();
  // serve() finishes the current step, cancels what is left and returns.
  void stop();

  // --- rank 0, the MPI thread ---
  void serve();

 private:
  // Cancelled (or their client gone) or past their deadline.
  void retire_expired(ServeClock::time_point now);
  void finish(const std::shared_ptr<Sequence>& sequence, FinishReason reason);
  void apply(const std::vector<StepEntry>& step, const at::Tensor& logits);
  void publish(Sequence& sequence);
  // The gauges of /metrics; running_step: the step about to run (its positions count as
  // stored in the KV utilization).
  void update_gauges(const std::vector<StepEntry>& running_step = {});

  ServedStage& stage_;
  Comm& world_;
  ServeConfig config_;
  const Tokenizer* tokenizer_;
  Scheduler scheduler_;

  std::mutex mutex_;
  std::condition_variable changed_;  // a step finished, or work or stop arrived
  std::vector<std::shared_ptr<Sequence>> incoming_;
  bool stopping_ = false;
  ServeMetrics metrics_;
};

// Ranks other than 0: run the steps rank 0 broadcasts until it broadcasts the stop.
void follow_engine(ServedStage& stage, Comm& world);

// The end of `text` held back from streaming: an incomplete UTF-8 character, or a suffix that
// may become one of `stop` once more text arrives. Returns the length that is final.
size_t streamable_length(const std::string& text, const std::vector<std::string>& stop);

}  // namespace strata
