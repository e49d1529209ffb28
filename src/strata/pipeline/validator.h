// The schedule validator: proves that a schedule is one an executor can run to the end and
// that the run trains the model correctly. What it guarantees, when it returns no problem:
//  - shape: p rank lists, every microbatch in [0, m), chunk in [0, v), every send and receive
//    names the adjacent virtual stage in the direction of its data;
//  - completeness: on every virtual stage, every microbatch has exactly one F, and either one
//    full backward or one B (input grad) plus one W (weight grad), and nothing else;
//  - matching: for every ordered pair of ranks and each kind of data (activations, gradients),
//    the sender's sends and the receiver's receives name the same (microbatch, virtual stage)
//    messages in the same order, so MPI's non-overtaking order (one tag per kind) pairs them;
//  - dependencies: F of stage s runs after its input arrived from s-1 (so after F of s-1), a
//    backward after the F of the same microbatch and after its gradient arrived from s+1,
//    a send after the compute that produces its data, W after its B;
//  - no deadlock: executing every list in order, sends never blocking (buffered, waited on
//    later) and receives blocking until their message was sent, every rank reaches its end.
// The last two are checked by running that execution: a state where no rank can progress is
// reported with what each stuck rank waits for.
#pragma once
#include <string>
#include <vector>

#include "strata/pipeline/schedule.h"

namespace strata {

struct ScheduleProblem {
  int rank = -1;          // -1 when the problem is not one rank's (a missing rank list)
  int action_index = -1;  // index in the rank's list; -1 when it concerns the list as a whole
  std::string message;
};

// "rank 2 action 14: F(mb 3, chunk 0): ..."
std::string to_string(const ScheduleProblem& problem);

// Every problem found (empty when the schedule is valid). Structural problems stop the check
// before the execution is attempted, so each reported problem is a real one, not an echo.
std::vector<ScheduleProblem> validate_schedule(const Schedule& schedule);

// Throws UserError listing the problems (at most the first 20) when there are any.
void require_valid_schedule(const Schedule& schedule);

}  // namespace strata
