// The supervisor of `strata train --nproc N` (N > 1): it stays the parent of mpirun and owns
// the restart loop (docs/launch.md). When a rank dies (signal, non-zero exit) or declares
// itself hung (a communication timeout, the step watchdog), mpirun ends the others and exits;
// the supervisor prints what happened (which rank, the signal or the rank's own message, the
// last completed step, the checkpoint the restart resumes from, "restart k of n") and starts
// the job again after fault.restart_backoff_s, with checkpoint.resume = "auto", up to
// fault.max_restarts times. A user error (exit code 2: bad config, no usable checkpoint) is
// not retried. SIGINT or SIGTERM to the supervisor ends every rank and exits 130 or 143.
// On hosts (--hosts, --hostfile) with fault.elastic, a restart first probes the hosts and goes
// on with those that answer (at least fault.min_hosts), in the layout the planner chooses for
// their slots (parallel.auto), train.global_batch kept; with fault.elastic_grow lost hosts that
// answer again are taken back.
#pragma once
#include <string>
#include <vector>

#include "strata/core/config.h"
#include "strata/dist/launcher.h"

namespace strata {

// What one failed attempt's stderr says about its first failure.
struct FailureReport {
  int rank = -1;            // the world rank that failed first, -1 when unknown
  std::string what;         // "killed by signal 9 (Killed)", or the rank's own message
  bool user_error = false;  // a "strata: error:" line: bad input, a restart would not help
  bool aborted = false;     // a rank aborted the job: later signal reports are its clean-up
};

// Reads one line of the job's stderr into `report`. The first failure named wins, except that
// Open MPI's report of a rank killed by a signal wins over the other ranks' messages (which
// may be its consequences) unless a rank had aborted the job (then the signal is mpirun
// ending the others).
void read_failure_line(const std::string& line, FailureReport* report);

// Runs `program_args` on the target's ranks under mpirun until it succeeds, a user error, a
// stop signal, or fault.max_restarts restarts; returns the exit code for the `strata` process.
int supervise_training(const Config& validated, const LaunchTarget& target,
                       const std::vector<std::string>& program_args);

}  // namespace strata
