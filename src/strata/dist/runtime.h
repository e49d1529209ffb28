// Process-level MPI set-up: initialization (thread level FUNNELED), finalization, and
// whether this process runs under an MPI launcher at all.
#pragma once

namespace strata {

// Initializes MPI once (idempotent); returns the world size. Safe without a launcher
// (singleton world of 1).
int init_mpi(int* argc, char*** argv);
void finalize_mpi();
bool mpi_initialized();
// Aborts every rank of the job (after a fatal error on one rank) with the exit code.
[[noreturn]] void abort_job(int exit_code);

}  // namespace strata
