// Finding text files and normalizing their contents before tokenization.
#include "strata/data/text_source.h"

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>

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

std::string read_file_bytes(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw UserError(str("cannot read text file ", path, ": ", std::strerror(errno)));
  std::ostringstream buffer;
  buffer << in.rdbuf();
  return buffer.str();
}

// Fortune files mark entries off with lines holding a single "%"; those become blank lines.
// A few entries underline or embolden words with terminal overstrikes ("_\bA" or "__\b\bUN");
// a backspace erases the byte before it, leaving the visible text.
std::string fortune_to_text(const std::string& bytes) {
  std::string text;
  text.reserve(bytes.size());
  size_t line_start = 0;
  while (line_start < bytes.size()) {
    size_t line_end = bytes.find('\n', line_start);
    if (line_end == std::string::npos) line_end = bytes.size();
    std::string_view line(bytes.data() + line_start, line_end - line_start);
    if (line == "%" || line == "%\r") {
      text.push_back('\n');
    } else {
      size_t kept_from = text.size();
      for (char c : line) {
        if (c == '\b') {
          if (text.size() > kept_from) text.pop_back();
        } else {
          text.push_back(c);
        }
      }
      text.push_back('\n');
    }
    line_start = line_end + 1;
  }
  return text;
}

}  // namespace

std::vector<TextSource> text_sources(const std::vector<std::string>& inputs) {
  STRATA_REQUIRE(!inputs.empty(), "no input given: name text files or directories of .txt files");
  std::vector<TextSource> sources;
  for (const auto& input : inputs) {
    std::error_code error;
    fs::file_status status = fs::status(input, error);
    if (fs::is_regular_file(status)) {
      sources.push_back({absolute_path(input), TextSource::Format::Text});
    } else if (fs::is_directory(status)) {
      std::vector<TextSource> found;
      try {
        for (const auto& entry : fs::recursive_directory_iterator(input)) {
          if (entry.is_regular_file() && entry.path().extension() == ".txt") {
            found.push_back({absolute_path(entry.path()), TextSource::Format::Text});
          }
        }
      } catch (const fs::filesystem_error& failure) {
        throw UserError(str("cannot list directory ", input, ": ", failure.what()));
      }
      STRATA_REQUIRE(!found.empty(), "directory ", input,
                     " has no .txt files; name text files directly or put .txt files in it");
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

std::string read_source_text(const TextSource& source) {
  std::string bytes = read_file_bytes(source.path);
  std::string text =
      source.format == TextSource::Format::Fortune ? fortune_to_text(bytes) : std::move(bytes);
  size_t end = text.find_last_not_of('\n');
  if (end == std::string::npos) return "";
  text.resize(end + 1);
  text.append("\n\n");
  return text;
}

}  // namespace strata
