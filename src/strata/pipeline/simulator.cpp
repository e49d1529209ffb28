// The simulator: the in-order execution of execution.h with a clock per rank. Because the
// execution runs an action only after everything it depends on, every start time is known
// when the action runs: its rank's clock, or for a receive the later of that and the arrival.
#include "strata/pipeline/simulator.h"

#include <algorithm>

#include "strata/core/error.h"
#include "strata/pipeline/execution.h"
#include "strata/pipeline/validator.h"

namespace strata {
namespace {

double compute_cost(const Action& action, const StageCosts& cost, int chunks) {
  switch (action.kind) {
    case ActionKind::Forward:
      return cost.forward / chunks;
    case ActionKind::Backward:
      return (cost.backward_input + cost.backward_weight) / chunks;
    case ActionKind::BackwardInput:
      return cost.backward_input / chunks;
    case ActionKind::BackwardWeight:
      return cost.backward_weight / chunks;
    default:
      return 0.0;
  }
}

// True when the action ends the life of a chunk's activations.
bool frees_activations(ActionKind kind) {
  return kind == ActionKind::Backward || kind == ActionKind::BackwardWeight;
}

}  // namespace

SimulationResult simulate_schedule(const Schedule& schedule, const std::vector<StageCosts>& costs) {
  require_valid_schedule(schedule);
  STRATA_REQUIRE(costs.size() == 1 || static_cast<int>(costs.size()) == schedule.stages,
                 "the simulator needs one set of stage costs, or one per stage (", schedule.stages,
                 "); got ", costs.size());
  for (const StageCosts& cost : costs) {
    STRATA_REQUIRE(cost.forward >= 0 && cost.backward_input >= 0 && cost.backward_weight >= 0 &&
                       cost.transfer >= 0,
                   "stage costs must not be negative (F=", cost.forward,
                   ", B=", cost.backward_input, ", W=", cost.backward_weight, ", C=", cost.transfer,
                   ")");
  }
  auto cost_of = [&](int rank) -> const StageCosts& {
    return costs.size() == 1 ? costs[0] : costs[rank];
  };

  SimulationResult result;
  result.schedule = schedule.name;
  result.stages = schedule.stages;
  result.microbatches = schedule.microbatches;
  result.chunks = schedule.chunks;
  result.per_stage.resize(schedule.stages);
  result.timeline.resize(schedule.stages);
  std::vector<double> clock(schedule.stages, 0.0);
  std::vector<int> inflight(schedule.stages, 0);

  auto runner = [&](int rank, int index, const Action& action, double message) {
    StageReport& stage = result.per_stage[rank];
    const double start = clock[rank];
    double end = start;
    double value = 0.0;
    if (is_compute(action.kind)) {
      end = start + compute_cost(action, cost_of(rank), schedule.chunks);
      stage.busy += end - start;
    } else if (is_send(action.kind)) {
      // Arrival at the receiver; a hand-over between two chunks of one rank (the turn of
      // zb-v's V) crosses no link.
      const bool local = schedule.rank_of(action.peer_stage) == rank;
      value = start + (local ? 0.0 : cost_of(rank).transfer);
    } else {
      end = std::max(start, message);
    }
    if (action.kind == ActionKind::Forward) {
      stage.peak_inflight_chunks = std::max(stage.peak_inflight_chunks, ++inflight[rank]);
    } else if (frees_activations(action.kind)) {
      --inflight[rank];
    }
    clock[rank] = end;
    result.timeline[rank].push_back(TimelineEntry{index, action, start, end});
    return value;
  };
  const auto problems = execute_in_order(schedule, runner);
  STRATA_CHECK(problems.empty(),
               "a validated schedule failed to execute: ", to_string(problems.front()));

  for (int rank = 0; rank < schedule.stages; ++rank) {
    result.per_stage[rank].end = clock[rank];
    result.step_time = std::max(result.step_time, clock[rank]);
  }
  double idle_sum = 0.0, idle_max = 0.0;
  for (StageReport& stage : result.per_stage) {
    stage.idle = result.step_time - stage.busy;
    stage.bubble_fraction = result.step_time > 0 ? stage.idle / result.step_time : 0.0;
    stage.peak_inflight_microbatches =
        static_cast<double>(stage.peak_inflight_chunks) / schedule.chunks;
    idle_sum += stage.idle;
    idle_max = std::max(idle_max, stage.idle);
  }
  if (result.step_time > 0) {
    result.bubble_fraction = idle_max / result.step_time;
    result.mean_bubble_fraction = idle_sum / schedule.stages / result.step_time;
  }
  return result;
}

nlohmann::json simulation_to_json(const SimulationResult& result, bool with_timeline) {
  nlohmann::json per_stage_bubble = nlohmann::json::array();
  nlohmann::json peak_microbatches = nlohmann::json::array();
  nlohmann::json peak_chunks = nlohmann::json::array();
  nlohmann::json busy = nlohmann::json::array();
  nlohmann::json idle = nlohmann::json::array();
  for (const StageReport& stage : result.per_stage) {
    per_stage_bubble.push_back(stage.bubble_fraction);
    peak_microbatches.push_back(stage.peak_inflight_microbatches);
    peak_chunks.push_back(stage.peak_inflight_chunks);
    busy.push_back(stage.busy);
    idle.push_back(stage.idle);
  }
  nlohmann::json json = {
      {"schedule", result.schedule},
      {"stages", result.stages},
      {"microbatches", result.microbatches},
      {"chunks", result.chunks},
      {"step_time", result.step_time},
      {"bubble_fraction",
       {{"overall", result.bubble_fraction},
        {"mean", result.mean_bubble_fraction},
        {"per_stage", per_stage_bubble}}},
      {"peak_inflight_microbatches", peak_microbatches},
      {"peak_inflight_chunks", peak_chunks},
      {"busy_time", busy},
      {"idle_time", idle},
  };
  if (with_timeline) {
    nlohmann::json timeline = nlohmann::json::array();
    for (const auto& rank_entries : result.timeline) {
      nlohmann::json entries = nlohmann::json::array();
      for (const TimelineEntry& entry : rank_entries) {
        entries.push_back({{"kind", kind_name(entry.action.kind)},
                           {"microbatch", entry.action.microbatch},
                           {"chunk", entry.action.chunk},
                           {"start", entry.start},
                           {"end", entry.end}});
      }
      timeline.push_back(entries);
    }
    json["timeline"] = timeline;
  }
  return json;
}

}  // namespace strata
