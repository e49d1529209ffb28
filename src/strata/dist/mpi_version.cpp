// MPI_Get_library_version and MPI_Get_version: two of the calls MPI allows before MPI_Init.
#include "strata/dist/mpi_version.h"

#include <algorithm>

#include "strata/dist/mpi_internal.h"

namespace strata {

std::string mpi_library_version() {
  char library[MPI_MAX_LIBRARY_VERSION_STRING];
  int length = 0, major = 0, minor = 0;
  MPI_Get_library_version(library, &length);
  MPI_Get_version(&major, &minor);
  std::string text(library, static_cast<size_t>(std::max(length, 0)));
  while (!text.empty() && (text.back() == '\n' || text.back() == '\0')) text.pop_back();
  return text + " (MPI " + std::to_string(major) + "." + std::to_string(minor) + ")";
}

}  // namespace strata
