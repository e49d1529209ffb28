// Text inputs for corpus preparation: which files a user's paths name, and how each file's
// bytes become the text that is tokenized (plain text as it is; fortune files with their "%"
// separator lines turned into blank lines and terminal overstrikes removed).
#pragma once
#include <string>
#include <vector>

namespace strata {

struct TextSource {
  enum class Format { Text, Fortune };
  std::string path;  // absolute
  Format format = Format::Text;
};

// Where the Debian package `fortunes` installs the default corpus.
inline constexpr const char* kFortuneDir = "/usr/share/games/fortunes";

// The files `inputs` name: a file is itself, a directory stands for its .txt files (searched
// recursively, sorted by path). Throws UserError for a missing path or a directory without
// .txt files.
std::vector<TextSource> text_sources(const std::vector<std::string>& inputs);

// The fortune text files directly in `dir`, sorted: regular files other than the .dat
// indexes and .u8 links; subdirectories (the offensive off/, other languages) are skipped.
// Throws UserError telling the user to run scripts/install-deps.sh or set data.path when
// there are none.
std::vector<TextSource> fortune_sources(const std::string& dir = kFortuneDir);

// The text of one source, ending in exactly one blank line ("\n\n") so that documents stay
// apart when concatenated; "" for a file without text. Throws UserError if unreadable.
std::string read_source_text(const TextSource& source);

}  // namespace strata
