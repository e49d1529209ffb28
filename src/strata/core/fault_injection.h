// Fault injection for the tests of fault tolerance (docs/launch.md, "Testing a restart"):
// with STRATA_INJECT_FAULT="SIGNAL POINT STEP RANK [ATTEMPT]" in the environment, rank RANK
// raises SIGKILL or SIGSTOP on itself (SIGNAL: KILL or STOP) when it reaches POINT at step STEP:
//   step         before running step STEP (0-based; steps 0..STEP-1 are done)
//   save         in the save after step STEP, once this rank's file is written, before the
//                commit
//   async_write  in the background writer of the asynchronous save after step STEP, once
//                this rank's file is written
// Only in attempt ATTEMPT of a job (default 0, the first; STRATA_ATTEMPT, set by the
// supervisor, absent means 0), so that the restarted job runs through. Several faults are
// separated by ',' (e.g. one per attempt).
#pragma once
#include <cstdint>

namespace strata {

void inject_fault(const char* point, int64_t step, int rank);

}  // namespace strata
