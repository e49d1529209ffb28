// Cache directory resolution, cache keys, and race-safe creation of cache entries.
#include "strata/data/corpus_cache.h"

#include <sys/stat.h>

#include <cctype>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>

#include "strata/core/atomic_file.h"
#include "strata/core/error.h"
#include "strata/core/hash.h"
#include "strata/data/prepare.h"

namespace fs = std::filesystem;

namespace strata {

namespace {

// Bumped whenever text normalization or the shard layout changes, so old entries are not
// reused for a different token stream. 2: each fortune is a document, shards keep document
// boundaries.
constexpr int kCacheFormatVersion = 2;

// A tokenizer's name as part of a file name: a tokenizer loaded from a directory is named by
// its path, so '/' and other bytes outside [A-Za-z0-9._-] become '_', and only the last 32
// bytes are kept (the hash in the key covers the whole name).
std::string file_name_part(const std::string& name) {
  std::string part = name.size() > 32 ? name.substr(name.size() - 32) : name;
  for (char& c : part) {
    if (!std::isalnum(static_cast<unsigned char>(c)) && c != '.' && c != '_' && c != '-') c = '_';
  }
  return part;
}

bool is_prepared(const std::string& dir) {
  std::error_code error;
  return fs::is_regular_file(dir + "/" + kManifestName, error);
}

}  // namespace

std::string corpus_cache_key(const std::vector<TextSource>& sources, const Tokenizer& tokenizer) {
  std::string description =
      str("strata-corpus-cache ", kCacheFormatVersion, "\n", "tokenizer ", tokenizer.name(), "\n");
  for (const auto& source : sources) {
    struct stat info {};
    if (::stat(source.path.c_str(), &info) != 0) {
      throw UserError(str("cannot read text file ", source.path, ": ", std::strerror(errno)));
    }
    description += str(source.path, "\t", static_cast<int>(source.format), "\t", info.st_size, "\t",
                       info.st_mtim.tv_sec, ".", info.st_mtim.tv_nsec, "\n");
  }
  return file_name_part(tokenizer.name()) + "-" + hex64(fnv1a(description));
}

std::string cached_corpus_dir(const std::vector<TextSource>& sources, const Tokenizer& tokenizer,
                              const std::string& cache_dir) {
  std::string parent = cache_dir + "/corpus";
  std::string final_dir = parent + "/" + corpus_cache_key(sources, tokenizer);
  if (is_prepared(final_dir)) return final_dir;

  std::error_code error;
  fs::create_directories(parent, error);
  if (!fs::is_directory(parent)) {
    throw UserError(str("cannot create the corpus cache directory ", parent, ": ", error.message(),
                        "; set STRATA_CACHE_DIR to a writable directory"));
  }
  // The temporary name starts with '.' and lives next to the final one, so the rename stays
  // on one file system and is atomic.
  std::string building =
      unique_sibling_path(parent + "/." + fs::path(final_dir).filename().string());
  try {
    prepare_sources(sources, building, tokenizer);
  } catch (...) {
    fs::remove_all(building, error);
    throw;
  }
  if (std::rename(building.c_str(), final_dir.c_str()) != 0) {
    int reason = errno;
    fs::remove_all(building, error);
    // Losing the race (the winner's directory is already there and not empty) is fine.
    if (!is_prepared(final_dir)) {
      throw UserError(
          str("cannot move the prepared corpus into ", final_dir, ": ", std::strerror(reason)));
    }
  }
  return final_dir;
}

}  // namespace strata
