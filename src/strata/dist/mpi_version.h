// Which MPI this binary runs on, for `strata env` and bug reports.
#pragma once
#include <string>

namespace strata {

// The MPI library's own description (MPI_Get_library_version, e.g. "Open MPI v4.1.4, ...")
// and the MPI standard it implements; callable before init_mpi and without a launcher.
std::string mpi_library_version();

}  // namespace strata
