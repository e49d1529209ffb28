// Formatting of internal-invariant failures.
#include "strata/core/error.h"

namespace strata::detail {

void throw_internal(const char* file, int line, const char* condition, const std::string& message) {
  throw InternalError(str("bug at ", file, ":", line, ": check '", condition, "' failed",
                          message.empty() ? "" : ": ", message));
}

}  // namespace strata::detail
