// The cache directory (cache_dir.h).
#include "strata/core/cache_dir.h"

#include <cstdlib>

#include "strata/core/error.h"

namespace strata {
namespace {

std::string non_empty_env(const char* name) {
  const char* value = std::getenv(name);
  return value != nullptr ? value : "";
}

}  // namespace

std::string default_cache_dir() {
  if (auto dir = non_empty_env("STRATA_CACHE_DIR"); !dir.empty()) return dir;
  if (auto dir = non_empty_env("XDG_CACHE_HOME"); !dir.empty()) return dir + "/strata";
  if (auto dir = non_empty_env("HOME"); !dir.empty()) return dir + "/.cache/strata";
  throw UserError("no cache directory: set STRATA_CACHE_DIR (or XDG_CACHE_HOME or HOME)");
}

}  // namespace strata
