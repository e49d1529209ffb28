// In-order execution of a schedule without a model: the semantics the validator checks and the
// simulator times. Each rank walks its list in order; a send never blocks (its message waits
// in an unbounded buffer, like an MPI isend waited on later); a receive blocks until the
// matching send has run. Messages travel on channels, one per (sender rank, receiver rank,
// activation or gradient), first in first out, like MPI's non-overtaking point-to-point order.
#pragma once
#include <functional>
#include <vector>

#include "strata/pipeline/schedule.h"
#include "strata/pipeline/validator.h"

namespace strata {

// Called once per action, in an order consistent with every dependency: a rank's actions in
// list order, and a receive only after its send. For a send, the returned value travels with
// the message (the simulator returns the arrival time); for a receive, `message` is that value;
// otherwise both are unused.
using ActionRunner =
    std::function<double(int rank, int action_index, const Action& action, double message)>;

// Runs the schedule to the end. Returns the problems that stopped it: a receive whose channel
// delivers a different message first, or a deadlock (no rank can progress), reported with one
// problem per stuck rank saying what it waits for. Empty when every rank finished.
std::vector<ScheduleProblem> execute_in_order(const Schedule& schedule, const ActionRunner& run);

}  // namespace strata
