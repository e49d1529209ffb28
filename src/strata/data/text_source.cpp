// Finding text files and telling their formats apart.
#include "strata/data/text_source.h"

#include <algorithm>
#include <filesystem>

#include "strata/core/error.h"

namespace fs = std::filesystem;

namespace strata {

namespace {

std::string absolute_path(const fs::path& path) {
  return fs::absolute(path).lexically_normal().string();
}

bool has_suffix(const std::string& text, const std::string& suffix) {
  return text.size() >= suffix.size() &&
         text.compare(text.size() - suffix.size(), suffix.size(), suffix) == 0;
}

// The source a file name stands for: JSON lines by suffix (compressed or not), else text.
TextSource source_for(const fs::path& path) {
  const std::string name = path.filename().string();
  TextSource source{absolute_path(path)};
  if (has_suffix(name, ".jsonl")) {
    source.format = TextSource::Format::Jsonl;
  } else if (has_suffix(name, ".jsonl.gz")) {
    source = {source.path, TextSource::Format::Jsonl, TextSource::Compression::Gzip};
  } else if (has_suffix(name, ".jsonl.zst")) {
    source = {source.path, TextSource::Format::Jsonl, TextSource::Compression::Zstd};
  }
  return source;
}

bool is_listed_in_directories(const fs::path& path) {
  const std::string name = path.filename().string();
  return path.extension() == ".txt" || has_suffix(name, ".jsonl") ||
         has_suffix(name, ".jsonl.gz") || has_suffix(name, ".jsonl.zst");
}

}  // namespace

std::vector<TextSource> text_sources(const std::vector<std::string>& inputs) {
  STRATA_REQUIRE(!inputs.empty(),
                 "no input given: name text or .jsonl files, or directories holding them");
  std::vector<TextSource> sources;
  for (const auto& input : inputs) {
    std::error_code error;
    fs::file_status status = fs::status(input, error);
    if (fs::is_regular_file(status)) {
      sources.push_back(source_for(input));
    } else if (fs::is_directory(status)) {
      std::vector<TextSource> found;
      try {
        for (const auto& entry : fs::recursive_directory_iterator(input)) {
          if (entry.is_regular_file() && is_listed_in_directories(entry.path())) {
            found.push_back(source_for(entry.path()));
          }
        }
      } catch (const fs::filesystem_error& failure) {
        throw UserError(str("cannot list directory ", input, ": ", failure.what()));
      }
      STRATA_REQUIRE(!found.empty(), "directory ", input,
                     " has no .txt or .jsonl files; name text files directly or put .txt or "
                     ".jsonl files in it");
      std::sort(found.begin(), found.end(),
                [](const TextSource& a, const TextSource& b) { return a.path < b.path; });
      sources.insert(sources.end(), found.begin(), found.end());
    } else {
      throw UserError(str("input ", input, " does not exist (or is not a file or directory)"));
    }
  }
  return sources;
}

std::vector<TextSource> fortune_sources(const std::string& dir) {
  std::vector<TextSource> sources;
  std::error_code error;
  if (fs::is_directory(dir, error)) {
    for (const auto& entry : fs::directory_iterator(dir)) {
      std::string name = entry.path().filename().string();
      if (entry.is_symlink() || !entry.is_regular_file()) continue;
      if (has_suffix(name, ".dat") || has_suffix(name, ".u8") || name.front() == '.') continue;
      sources.push_back({absolute_path(entry.path()), TextSource::Format::Fortune});
    }
  }
  STRATA_REQUIRE(!sources.empty(),
                 "the default corpus (data.source = \"corpus\" with no "
                 "data.path) needs the Debian package `fortunes`, but ",
                 dir,
                 " holds no fortune files: run scripts/install-deps.sh, or set data.path to a "
                 "text file or a directory of .txt files");
  std::sort(sources.begin(), sources.end(),
            [](const TextSource& a, const TextSource& b) { return a.path < b.path; });
  return sources;
}

}  // namespace strata
