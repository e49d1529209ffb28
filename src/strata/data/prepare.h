// Corpus preparation: tokenize text and JSON-lines files into a directory of token shards
// (with document boundaries and, for prompt/completion data, a loss mask) plus a JSON
// manifest (formats in docs/data.md), and read such a directory back. Backs the command
// `strata data prepare INPUT... --out DIR` and the corpus cache. Preparation uses every core,
// and an interrupted run resumes after its last complete shard.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "strata/data/chat_template.h"
#include "strata/data/text_source.h"
#include "strata/data/tokenizer.h"

namespace strata {

inline constexpr const char* kManifestName = "manifest.json";
// Present only while a preparation is unfinished: what it was asked to do and how far it got.
inline constexpr const char* kProgressName = "progress.json";

struct PrepareOptions {
  int64_t max_shard_bytes = int64_t{64} << 20;  // token bytes per shard file, header excluded
  std::string field = "text";                   // the JSON field holding a record's text
  bool prompt_completion = false;  // JSON records of "prompt" and "completion"; stores a mask
  // JSON records of chat "messages" rendered by this template; stores a mask on the assistant
  // turns. Not owned. Exclusive with prompt_completion.
  const ChatTemplate* chat_template = nullptr;
  int threads = 0;            // tokenizer threads; 0 = every core
  bool progress_bar = false;  // redraw a progress line on stderr (only if it is a terminal)
  // For the tests of resumption: the process kills itself (SIGKILL) once this many shards
  // are recorded; -1 = never. `strata data prepare` reads it from
  // STRATA_PREPARE_KILL_AFTER_SHARDS.
  int64_t kill_after_shards = -1;
};

// What manifest.json records.
struct CorpusManifest {
  struct Shard {
    std::string file;  // name inside the directory
    int64_t tokens = 0;
  };
  struct Source {
    std::string path;       // absolute path of the input file
    int64_t bytes = 0;      // its size on disk
    int64_t documents = 0;  // documents with text in it
    int64_t tokens = 0;     // tokens its text became (separators included)
  };
  std::string tokenizer;
  int64_t vocab_size = 0;
  std::string dtype;  // "uint16" | "uint32"
  int64_t total_tokens = 0;
  int64_t documents = 0;
  bool loss_mask = false;  // the shards carry a loss mask (prompt/completion or chat data)
  std::vector<Shard> shards;
  std::vector<Source> sources;
};

// Tokenizes `sources` in order into out_dir (created if missing), shards first, manifest.json
// last. out_dir must be empty, so no stale shard of an earlier run can mix in, unless it holds
// the progress.json of an interrupted run with the same inputs and options: then the run
// continues after its last recorded shard, and the result is byte for byte that of an
// uninterrupted run. Throws UserError for unreadable inputs or bad JSON lines (naming
// file:line), a non-empty out_dir, an interrupted run of other inputs or options, or inputs
// without any text.
CorpusManifest prepare_sources(const std::vector<TextSource>& sources, const std::string& out_dir,
                               const Tokenizer& tokenizer, const PrepareOptions& options = {});

// Same for files and directories of .txt and .jsonl files, as named on the command line.
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
  // Empty, or one entry per token: 1 where the token carries loss as a target (the
  // completion of prompt/completion data), 0 where it does not.
  std::vector<uint8_t> loss_mask;
};

// Every token of a prepared directory (its shards in manifest order, each checked against
// the manifest) or of a single shard file, with the document starts and loss mask they
// store. Shards of format version 1 keep no boundaries: a stream with any of them has none.
TokenStream load_token_shards(const std::string& path);

// The template `strata data prepare --chat` renders with: `file` (--chat-template) if given,
// else the chat_template of the tokenizer directory's tokenizer_config.json. Throws UserError
// when there is none, before any input is read.
ChatTemplate data_chat_template(const std::string& tokenizer, const std::string& file);

// `strata data prepare`: prepares inputs into out_dir, prints a one-paragraph summary to
// stdout and returns the exit status (0). Bad input throws UserError for the CLI to report.
int run_data_prepare(const std::vector<std::string>& inputs, const std::string& out_dir,
                     const std::string& tokenizer = "byte", PrepareOptions options = {});

}  // namespace strata
