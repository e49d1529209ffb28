// What a training run reports: one JSON object per optimizer step (and per evaluation) in
// <log.dir>/metrics.jsonl, written by rank 0, plus a human progress display (a bar on a
// terminal, plain periodic lines otherwise). Field meanings: docs/metrics.md.
#pragma once
#include <cstdint>
#include <cstdio>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>

#include "strata/core/config.h"

namespace strata {

struct MemoryBytes {
  int64_t params = 0, grads = 0, optimizer = 0, activations_peak = 0, rss_peak = 0;
};

struct StepMetrics {
  int64_t step = 0;  // 1-based: the number of optimizer steps done
  double loss = 0, lr = 0, grad_norm = 0, step_time_s = 0, tokens_per_s = 0, mfu = 0;
  double bubble_fraction = 0;  // largest share of the step a pipeline stage waited to receive
  int64_t tokens = 0;          // tokens trained on so far
  int64_t loss_tokens = 0;     // targets of this step's global batch that carried loss
  MemoryBytes mem;             // this rank (rank 0)
  int64_t dp_buckets = 0;      // gradient buckets of this rank
  int64_t dp_buckets_overlapped = 0;  // of them, reduction started during the last backward
  nlohmann::json comm = nlohmann::json::object();  // bytes sent per collective kind, this step
  // What comm would be with compression.gradients and zero_gather "none".
  nlohmann::json comm_uncompressed = nlohmann::json::object();
  nlohmann::json comm_wait = nlohmann::json::object();  // seconds blocked per kind, this step
  double comm_share = 0;  // seconds blocked in communication / step time (rank 0)
  nlohmann::json moe;     // mixture-of-experts statistics (null for a dense model)
  // fp16's dynamic loss scaling (reported only when train.precision = "fp16"): the scale this
  // step's backward used, whether its gradients overflowed and the update was skipped, and how
  // many steps were skipped so far.
  bool loss_scaling = false;
  double loss_scale = 1.0;
  bool skipped = false;
  int64_t skipped_steps = 0;
  double checkpoint_stall_s = -1;  // seconds the loop was blocked saving after it; < 0: no save
};

nlohmann::json to_json(const StepMetrics& metrics);

class MetricsLog {
 public:
  // Opens <dir>/metrics.jsonl for appending (creating dir); inactive when !active or dir is "".
  // A run that starts at `first_step` (a resume, or 0) first drops the records of later
  // steps, which it is about to run again, so that no step is recorded twice.
  MetricsLog(const std::string& dir, bool active, int64_t first_step);
  void write(const nlohmann::json& line);

 private:
  static void drop_records_after(const std::string& path, int64_t step);

  std::ofstream file_;
};

class Progress {
 public:
  // automatic: a bar on a terminal, else lines.
  Progress(ProgressDisplay mode, int64_t total_steps, int64_t line_every, bool active);
  void update(const StepMetrics& metrics);
  void eval(int64_t step, double eval_loss);
  void message(const std::string& text);
  void finish();

 private:
  bool active_, bar_;
  int64_t total_steps_, line_every_;
  double elapsed_s_ = 0;
  int64_t steps_seen_ = 0;
  bool bar_open_ = false;
};

std::string format_duration(double seconds);  // "1h02m", "3m05s", "12s"
std::string format_rate(double per_second);   // "950", "12.3k", "1.20M"

}  // namespace strata
