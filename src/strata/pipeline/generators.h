// Generators of the pipeline schedules strata runs: GPipe, 1F1B (PipeDream-Flush), Megatron's
// interleaved 1F1B and zero-bubble ZB-H1. Each returns, for every rank, its full action list,
// communication included: a receive sits right before the compute that consumes it and a send
// right after the compute that produces it, so an executor that walks its list in order with
// non-blocking sends and blocking receives cannot deadlock (validate_schedule proves it).
#pragma once
#include <string>
#include <vector>

#include "strata/core/config_enums.h"
#include "strata/pipeline/schedule.h"

namespace strata {

// What to build: the schedule, p stages, m microbatches, v chunks per rank.
struct ScheduleRequest {
  PipelineSchedule schedule = PipelineSchedule::one_f_one_b;
  int stages = 1;
  int microbatches = 1;
  int chunks = 1;
};

// How the caller spells each parameter, so errors name what the user typed: the CLI passes
// "--pp", a config loader passes "parallel.pp".
struct ScheduleParameterNames {
  std::string name = "schedule";
  std::string stages = "pp";
  std::string microbatches = "microbatches";
  std::string chunks = "vpp";
};

// Every schedule, in the order of their spellings (config_enums.h): gpipe, 1f1b,
// interleaved-1f1b, zb-h1.
std::vector<PipelineSchedule> pipeline_schedules();

// Throws UserError naming the parameter and a value that would work when the request cannot be
// built: p < 1, m < 1, v != 1 for a non-interleaved schedule, v < 2 or p < 2 or m not a
// multiple of p for interleaved-1f1b.
void check_schedule_request(const ScheduleRequest& request,
                            const ScheduleParameterNames& names = {});

// check_schedule_request, then the generator of the schedule. Schedule::name is its spelling.
Schedule build_schedule(const ScheduleRequest& request, const ScheduleParameterNames& names = {});

// The generators themselves; their preconditions are those of check_schedule_request.
Schedule make_gpipe_schedule(int stages, int microbatches);
Schedule make_1f1b_schedule(int stages, int microbatches);
Schedule make_interleaved_1f1b_schedule(int stages, int microbatches, int chunks);
Schedule make_zb_h1_schedule(int stages, int microbatches);
// Forward passes only, for evaluation (not a training schedule: the validator's completeness
// check does not apply).
Schedule make_forward_only_schedule(int stages, int microbatches, int chunks);

}  // namespace strata
