// MPI start-up and shutdown for the whole process: FUNNELED threading (only the main
// thread calls MPI), errors returned rather than fatal, and a clean finalize that first lets
// abandoned operations drain.
#include "strata/dist/runtime.h"

#include <cstdio>
#include <cstdlib>

#include "strata/core/error.h"
#include "strata/dist/mpi_internal.h"

namespace strata {

namespace {
// How long finalize_mpi waits for timed-out operations that late peers may still complete.
constexpr double kFinalizeDrainS = 2.0;
}  // namespace

bool mpi_initialized() {
  int initialized = 0;
  MPI_Initialized(&initialized);
  return initialized != 0 && !dist_internal::mpi_finalized();
}

int init_mpi(int* argc, char*** argv) {
  int initialized = 0;
  MPI_Initialized(&initialized);
  if (!initialized) {
    STRATA_REQUIRE(!dist_internal::mpi_finalized(),
                   "init_mpi: MPI was already finalized in this process; it cannot restart");
    int provided = 0;
    const int rc = MPI_Init_thread(argc, argv, MPI_THREAD_FUNNELED, &provided);
    if (rc != MPI_SUCCESS) {
      throw CommError("MPI_Init_thread failed: " + dist_internal::mpi_error_string(rc));
    }
    if (provided < MPI_THREAD_FUNNELED) {
      std::fprintf(stderr,
                   "strata: warning: MPI provides thread level %d, below FUNNELED (%d); strata "
                   "calls MPI only from the main thread, but ATen's worker threads exist\n",
                   provided, MPI_THREAD_FUNNELED);
    }
  }
  // Errors come back as codes, which Comm turns into CommError with context.
  for (MPI_Comm comm : {MPI_COMM_WORLD, MPI_COMM_SELF}) {
    const int rc = MPI_Comm_set_errhandler(comm, MPI_ERRORS_RETURN);
    if (rc != MPI_SUCCESS) {
      throw CommError("MPI_Comm_set_errhandler failed: " + dist_internal::mpi_error_string(rc));
    }
  }
  dist_internal::open_census_board();
  int size = 1;
  const int rc = MPI_Comm_size(MPI_COMM_WORLD, &size);
  if (rc != MPI_SUCCESS) {
    throw CommError("MPI_Comm_size(MPI_COMM_WORLD) failed: " + dist_internal::mpi_error_string(rc));
  }
  return size;
}

void finalize_mpi() {
  if (!mpi_initialized()) return;
  dist_internal::drain_global_graveyard(kFinalizeDrainS);
  dist_internal::free_custom_ops();
  dist_internal::close_census_board();
  const int rc = MPI_Finalize();
  if (rc != MPI_SUCCESS) {
    std::fprintf(stderr, "strata: MPI_Finalize failed: %s\n",
                 dist_internal::mpi_error_string(rc).c_str());
  }
}

void abort_job(int exit_code) {
  std::fflush(stdout);
  std::fflush(stderr);
  if (mpi_initialized()) MPI_Abort(MPI_COMM_WORLD, exit_code);
  std::_Exit(exit_code);  // no MPI (or MPI_Abort returned): end this process
}

}  // namespace strata
