// The schedule simulator: runs a schedule on a cost model instead of a model, and reports what
// a real step would show: step time, idle time and bubble fraction per stage, peak in-flight
// activations per stage, and a timeline. The planner uses it to compare layouts.
//
// Cost model (times in any unit, per microbatch):
//  - A rank's whole stage costs F forward, B input gradient, W weight gradient; a full backward
//    costs B + W. With v chunks per rank a chunk costs a 1/v share of each.
//  - A send costs its sender nothing (it is posted and waited on later); its message arrives C
//    after the send is posted (at once when both chunks are on one rank: zb-v's turn). A
//    receive blocks its rank until the message has arrived.
//  - Every rank starts at time 0 and runs its list in order (the in-order execution of
//    execution.h); the step ends when the last rank ends.
// Idle time of a stage = step time - its compute time: waiting at the start, on receives, and
// after its last action until the step ends.
#pragma once
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "strata/pipeline/schedule.h"

namespace strata {

struct StageCosts {
  double forward = 1.0;          // F
  double backward_input = 1.0;   // B: input gradient
  double backward_weight = 1.0;  // W: weight gradient
  double transfer = 0.0;         // C: send to arrival, for each message this stage sends
};

struct TimelineEntry {
  int action_index = 0;  // into the rank's list
  Action action;
  double start = 0.0;
  double end = 0.0;  // a receive ends when its message arrived; a send at its start
};

struct StageReport {
  double busy = 0.0;             // time in compute actions
  double idle = 0.0;             // step time - busy
  double bubble_fraction = 0.0;  // idle / step time
  double end = 0.0;              // when the rank's last action ended
  // The most (microbatch, chunk) activation sets held at once: counted from the start of a
  // chunk's forward to the end of its backward (its W, for a split backward).
  int peak_inflight_chunks = 0;
  // The same in units of one microbatch's activations for the whole stage: chunks / v.
  double peak_inflight_microbatches = 0.0;
};

struct SimulationResult {
  std::string schedule;
  int stages = 1, microbatches = 1, chunks = 1;
  double step_time = 0.0;
  // Idle time of the stage that waits most, over the step time: the pipeline bubble.
  double bubble_fraction = 0.0;
  double mean_bubble_fraction = 0.0;  // mean over stages
  std::vector<StageReport> per_stage;
  std::vector<std::vector<TimelineEntry>> timeline;  // [rank], in execution order
};

// costs: one entry for every stage, or a single entry that every stage shares. Throws
// UserError when the schedule is invalid (validate_schedule) or a cost is negative.
SimulationResult simulate_schedule(const Schedule& schedule, const std::vector<StageCosts>& costs);

// {"schedule", "stages", "microbatches", "chunks", "step_time", "bubble_fraction":
//  {"overall", "mean", "per_stage": [...]}, "peak_inflight_microbatches": [...],
//  "peak_inflight_chunks": [...], "busy_time": [...], "idle_time": [...]}; with the timeline
// ("timeline": [[{"kind", "microbatch", "chunk", "start", "end"}, ...] per rank]) if asked.
nlohmann::json simulation_to_json(const SimulationResult& result, bool with_timeline);

}  // namespace strata
