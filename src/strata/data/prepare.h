// Corpus preparation: tokenize text files into a directory of token shards plus a JSON
// manifest (both formats in docs/data.md), and read such a directory back. Backs the
// command `strata data prepare INPUT... --out DIR` and the corpus cache.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "strata/data/text_source.h"
#include "strata/data/tokenizer.h"

namespace strata {

inline constexpr const char* kManifestName = "manifest.json";

struct PrepareOptions {
  int64_t max_shard_bytes = int64_t{64} << 20;  // token bytes per shard file, header excluded
};

// What manifest.json records.
struct CorpusManifest {
  struct Shard {
    std::string file;  // name inside the directory
    int64_t tokens = 0;
  };
  struct Source {
    std::string path;    // absolute path of the text file
    int64_t bytes = 0;   // its size on disk
    int64_t tokens = 0;  // tokens its text became (separator included)
  };
  std::string tokenizer;
  int64_t vocab_size = 0;
  std::string dtype;  // "uint16" | "uint32"
  int64_t total_tokens = 0;
  std::vector<Shard> shards;
  std::vector<Source> sources;
};

// Tokenizes `sources` in order into out_dir (created if missing; it must be empty, so no
// stale shard of an earlier run can mix in), shards first, manifest.json last. Throws
// UserError for unreadable inputs, a non-empty out_dir, or inputs without any text.
CorpusManifest prepare_sources(const std::vector<TextSource>& sources, const std::string& out_dir,
                               const Tokenizer& tokenizer, const PrepareOptions& options = {});

// Same for files and directories of .txt files, as named on the command line.
CorpusManifest prepare_corpus(const std::vector<std::string>& inputs, const std::string& out_dir,
                              const Tokenizer& tokenizer, const PrepareOptions& options = {});

// Reads and checks dir/manifest.json. Throws UserError naming the file when it is missing or
// malformed.
CorpusManifest read_manifest(const std::string& dir);

struct TokenStream {
  std::vector<int32_t> tokens;
  std::string tokenizer;
  // Where each document begins: ascending offsets into `tokens`, the first 0. Empty when the
  // source keeps no document boundaries (the whole stream is then one document).
  std::vector<int64_t> document_starts;
};

// Every token of a prepared directory (its shards in manifest order, each checked against
// the manifest) or of a single shard file.
TokenStream load_token_shards(const std::string& path);

// `strata data prepare`: prepares inputs into out_dir, prints a one-paragraph summary to
// stdout and returns the exit status (0). Bad input throws UserError for the CLI to report.
int run_data_prepare(const std::vector<std::string>& inputs, const std::string& out_dir,
                     const std::string& tokenizer = "byte");

}  // namespace strata
