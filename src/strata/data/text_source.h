// Text inputs for corpus preparation: which files a user's paths name and in which format
// each is read (document_reader.h splits them into documents).
#pragma once
#include <string>
#include <vector>

namespace strata {

struct TextSource {
  // Text: the file is one document. Fortune: each "%"-separated entry is one. Jsonl: each
  // line is a JSON record holding one document; the file may be gzip or zstd compressed.
  enum class Format { Text, Fortune, Jsonl };
  enum class Compression { None, Gzip, Zstd };
  std::string path;  // absolute
  Format format = Format::Text;
  Compression compression = Compression::None;
};

// Where the Debian package `fortunes` installs the default corpus.
inline constexpr const char* kFortuneDir = "/usr/share/games/fortunes";

// The files `inputs` name: a file is itself, a directory stands for its .txt, .jsonl,
// .jsonl.gz and .jsonl.zst files (searched recursively, sorted by path). A name ending in
// .jsonl, .jsonl.gz or .jsonl.zst is read as JSON lines, anything else as plain text. Throws
// UserError for a missing path or a directory without such files.
std::vector<TextSource> text_sources(const std::vector<std::string>& inputs);

// The fortune text files directly in `dir`, sorted: regular files other than the .dat
// indexes and .u8 links; subdirectories (the offensive off/, other languages) are skipped.
// Throws UserError telling the user to run scripts/install-deps.sh or set data.path when
// there are none.
std::vector<TextSource> fortune_sources(const std::string& dir = kFortuneDir);

}  // namespace strata
