// Tokenizing inputs into shards + manifest (resumably), and loading prepared directories.
#include "strata/data/prepare.h"

#include <sys/stat.h>
#include <unistd.h>

#include <nlohmann/json.hpp>

#include <algorithm>
#include <chrono>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <thread>

#include "strata/core/atomic_file.h"
#include "strata/core/error.h"
#include "strata/data/token_shard.h"
#include "strata/data/tokenize_pipeline.h"

namespace fs = std::filesystem;

namespace strata {

namespace {

constexpr const char* kManifestFormat = "strata-token-shards";
constexpr int kManifestVersion = 2;  // 2 added documents and loss_mask; 1 is still read
constexpr const char* kProgressFormat = "strata-prepare-progress";

std::string shard_file_name(size_t index) {
  char name[32];
  std::snprintf(name, sizeof(name), "shard-%05zu.tok", index);
  return name;
}

// ordered_json keeps the keys in the order written here, so the file reads top-down.
nlohmann::ordered_json manifest_to_json(const CorpusManifest& manifest) {
  nlohmann::ordered_json shards = nlohmann::ordered_json::array();
  for (const auto& shard : manifest.shards) {
    shards.push_back({{"file", shard.file}, {"tokens", shard.tokens}});
  }
  nlohmann::ordered_json sources = nlohmann::ordered_json::array();
  for (const auto& source : manifest.sources) {
    sources.push_back({{"path", source.path},
                       {"bytes", source.bytes},
                       {"documents", source.documents},
                       {"tokens", source.tokens}});
  }
  return {{"format", kManifestFormat},
          {"version", kManifestVersion},
          {"tokenizer", manifest.tokenizer},
          {"vocab_size", manifest.vocab_size},
          {"dtype", manifest.dtype},
          {"total_tokens", manifest.total_tokens},
          {"documents", manifest.documents},
          {"loss_mask", manifest.loss_mask ? "completion" : "none"},
          {"shards", shards},
          {"sources", sources}};
}

int64_t json_int(const nlohmann::json& object, const char* key) {
  return object.at(key).get<int64_t>();
}

// The manifest's fields from JSON (version 1 lacks documents and loss_mask).
CorpusManifest manifest_from_json(const nlohmann::json& json) {
  CorpusManifest manifest;
  manifest.tokenizer = json.at("tokenizer").get<std::string>();
  manifest.vocab_size = json_int(json, "vocab_size");
  manifest.dtype = json.at("dtype").get<std::string>();
  manifest.total_tokens = json_int(json, "total_tokens");
  manifest.documents = json.value("documents", int64_t{0});
  manifest.loss_mask = json.value("loss_mask", std::string("none")) == "completion";
  for (const auto& shard : json.at("shards")) {
    manifest.shards.push_back({shard.at("file").get<std::string>(), json_int(shard, "tokens")});
  }
  for (const auto& source : json.at("sources")) {
    manifest.sources.push_back({source.at("path").get<std::string>(), json_int(source, "bytes"),
                                source.value("documents", int64_t{0}), json_int(source, "tokens")});
  }
  return manifest;
}

// What a preparation is asked to do: an interrupted run continues only when this is equal.
// Each input is identified by path, format, size and modification time.
nlohmann::ordered_json preparation_inputs(const std::vector<TextSource>& sources,
                                          const Tokenizer& tokenizer,
                                          const PrepareOptions& options) {
  nlohmann::ordered_json files = nlohmann::ordered_json::array();
  for (const auto& source : sources) {
    struct stat info {};
    STRATA_REQUIRE(::stat(source.path.c_str(), &info) == 0, "cannot read input ", source.path);
    files.push_back({{"path", source.path},
                     {"format", static_cast<int>(source.format)},
                     {"compression", static_cast<int>(source.compression)},
                     {"bytes", static_cast<int64_t>(info.st_size)},
                     {"modified_ns", static_cast<int64_t>(info.st_mtim.tv_sec) * 1000000000 +
                                         info.st_mtim.tv_nsec}});
  }
  const std::optional<int32_t> end_of_text = tokenizer.end_of_text_id();
  nlohmann::ordered_json inputs = {
      {"tokenizer", tokenizer.name()},
      {"vocab_size", tokenizer.vocab_size()},
      {"end_of_text_id", end_of_text ? int64_t{*end_of_text} : int64_t{-1}},
      {"field", options.chat_template != nullptr ? "messages"
                : options.prompt_completion      ? "prompt/completion"
                                                 : options.field},
      {"max_shard_bytes", options.max_shard_bytes},
      {"inputs", files}};
  // Only for chat data, so that progress files of other runs keep their keys.
  if (options.chat_template != nullptr) {
    inputs["chat_template"] = options.chat_template->fingerprint();
  }
  return inputs;
}

// Where an interrupted run picks up: document `documents` (counting every document read,
// with text or not), of which the first `tokens_into_document` tokens are in shards already.
struct ResumePoint {
  int64_t documents = 0;
  int64_t tokens_into_document = 0;
};

// Cuts the token stream into shards of tokens_per_shard tokens (the last one shorter), each
// with the document starts inside it and the loss mask. After each shard is durable,
// progress.json records it with the resume point and the manifest so far, whose per-source
// counts cover complete documents only.
class ShardWriter {
 public:
  ShardWriter(std::string dir, const Tokenizer& tokenizer, int64_t tokens_per_shard,
              nlohmann::ordered_json inputs, CorpusManifest* manifest, ResumePoint resume,
              int64_t kill_after_shards)
      : dir_(std::move(dir)),
        tokenizer_(tokenizer),
        tokens_per_shard_(tokens_per_shard),
        inputs_(std::move(inputs)),
        manifest_(manifest),
        resume_(resume),
        kill_after_shards_(kill_after_shards) {}

  void add_batch(const TokenizedBatch& batch) {
    size_t offset = 0;
    for (size_t i = 0; i < batch.document_lengths.size(); ++i) {
      const int64_t length = batch.document_lengths[i];
      add_document(batch.source, batch.first_document + static_cast<int64_t>(i),
                   batch.tokens.data() + offset,
                   batch.loss_mask.empty() ? nullptr : batch.loss_mask.data() + offset, length);
      offset += static_cast<size_t>(length);
    }
  }

  void finish() {
    if (!pending_.empty()) {
      write_shard(pending_.size(), ResumePoint{next_document_, 0});
    }
  }

 private:
  void add_document(size_t source, int64_t index, const int32_t* tokens, const uint8_t* mask,
                    int64_t length) {
    next_document_ = index + 1;
    if (index < resume_.documents || length == 0) return;
    const int64_t skip = index == resume_.documents ? resume_.tokens_into_document : 0;
    STRATA_CHECK(skip < length, "resuming ", skip, " tokens into a document of ", length);
    if (skip == 0) pending_starts_.push_back(static_cast<int64_t>(pending_.size()));
    pending_.insert(pending_.end(), tokens + skip, tokens + length);
    if (mask != nullptr) pending_mask_.insert(pending_mask_.end(), mask + skip, mask + length);
    // The pending tokens before this document were fewer than a shard, so every cut below
    // falls inside this document or at its end; only a cut at its end counts it as done.
    bool counted = false;
    while (static_cast<int64_t>(pending_.size()) >= tokens_per_shard_) {
      const int64_t left = static_cast<int64_t>(pending_.size()) - tokens_per_shard_;
      if (left == 0) {
        count_document(source, length);
        counted = true;
      }
      write_shard(static_cast<size_t>(tokens_per_shard_),
                  left == 0 ? ResumePoint{index + 1, 0} : ResumePoint{index, length - left});
    }
    if (!counted) count_document(source, length);
  }

  void count_document(size_t source, int64_t length) {
    manifest_->sources[source].documents += 1;
    manifest_->sources[source].tokens += length;
    manifest_->documents += 1;
  }

  void write_shard(size_t count, ResumePoint resume) {
    std::string name = shard_file_name(manifest_->shards.size());
    const auto first_outside = std::lower_bound(pending_starts_.begin(), pending_starts_.end(),
                                                static_cast<int64_t>(count));
    ShardContents contents{pending_.data(), count, pending_starts_.data(),
                           static_cast<size_t>(first_outside - pending_starts_.begin()),
                           pending_mask_.empty() ? nullptr : pending_mask_.data()};
    write_token_shard(dir_ + "/" + name, contents, tokenizer_.name(), tokenizer_.vocab_size());
    manifest_->shards.push_back({name, static_cast<int64_t>(count)});
    manifest_->total_tokens += static_cast<int64_t>(count);
    record_progress(resume);

    pending_.erase(pending_.begin(), pending_.begin() + static_cast<std::ptrdiff_t>(count));
    if (!pending_mask_.empty()) {
      pending_mask_.erase(pending_mask_.begin(),
                          pending_mask_.begin() + static_cast<std::ptrdiff_t>(count));
    }
    pending_starts_.erase(pending_starts_.begin(), first_outside);
    for (auto& start : pending_starts_) start -= static_cast<int64_t>(count);
    if (static_cast<int64_t>(manifest_->shards.size()) == kill_after_shards_) std::raise(SIGKILL);
  }

  void record_progress(ResumePoint resume) {
    nlohmann::ordered_json progress = {
        {"format", kProgressFormat},
        {"inputs", inputs_},
        {"resume",
         {{"documents", resume.documents}, {"tokens_into_document", resume.tokens_into_document}}},
        {"manifest", manifest_to_json(*manifest_)}};
    std::string text = progress.dump(2) + "\n";
    write_file_atomically(dir_ + "/" + kProgressName, text.data(), text.size());
  }

  std::string dir_;
  const Tokenizer& tokenizer_;
  int64_t tokens_per_shard_;
  nlohmann::ordered_json inputs_;
  CorpusManifest* manifest_;
  ResumePoint resume_;
  int64_t kill_after_shards_;
  int64_t next_document_ = 0;
  std::vector<int32_t> pending_;         // tokens not yet in a shard, fewer than a shard
  std::vector<int64_t> pending_starts_;  // document starts among them
  std::vector<uint8_t> pending_mask_;    // their loss mask (prompt/completion data)
};

// Makes out_dir ready: created if missing; empty for a new run; for an interrupted run of the
// same inputs and options, stripped of anything its progress.json does not record (a shard
// written after the last record, a temporary file) and returns where to resume.
ResumePoint prepare_output_directory(const std::string& out_dir,
                                     const nlohmann::ordered_json& inputs,
                                     CorpusManifest* manifest) {
  std::error_code error;
  fs::create_directories(out_dir, error);
  if (!fs::is_directory(out_dir)) {
    throw UserError(str("cannot create output directory ", out_dir, ": ", error.message()));
  }
  const std::string progress_path = out_dir + "/" + kProgressName;
  if (!fs::exists(progress_path, error)) {
    STRATA_REQUIRE(fs::is_empty(out_dir), "output directory ", out_dir,
                   " is not empty; choose a new directory or remove this one");
    return {};
  }
  nlohmann::json progress;
  try {
    std::ifstream in(progress_path);
    progress = nlohmann::json::parse(in);
    STRATA_REQUIRE(progress.value("format", "") == kProgressFormat, progress_path,
                   " is not a strata preparation progress file");
  } catch (const nlohmann::json::exception& failure) {
    throw UserError(str(progress_path, " is malformed (", failure.what(),
                        "); remove the directory and prepare again"));
  }
  const nlohmann::json& recorded = progress.at("inputs");
  const nlohmann::json wanted = nlohmann::json::parse(inputs.dump());
  for (const auto& [key, value] : wanted.items()) {
    STRATA_REQUIRE(
        recorded.contains(key) && recorded.at(key) == value, "output directory ", out_dir,
        " holds an interrupted preparation whose \"", key, "\" differs from this run's (recorded ",
        recorded.contains(key) ? recorded.at(key).dump() : "nothing", ", now ", value.dump(),
        "); run again with the same inputs and options to continue it, or choose a "
        "new directory");
  }
  *manifest = manifest_from_json(progress.at("manifest"));
  std::vector<std::string> keep = {kProgressName};
  for (const auto& shard : manifest->shards) keep.push_back(shard.file);
  for (const auto& entry : fs::directory_iterator(out_dir)) {
    const std::string name = entry.path().filename().string();
    if (std::find(keep.begin(), keep.end(), name) == keep.end()) fs::remove_all(entry.path());
  }
  const auto& resume = progress.at("resume");
  return {json_int(resume, "documents"), json_int(resume, "tokens_into_document")};
}

// Redraws one status line on stderr, at most five times a second, when it is a terminal.
class ProgressLine {
 public:
  explicit ProgressLine(bool wanted) : shown_(wanted && ::isatty(STDERR_FILENO) == 1) {}
  ~ProgressLine() {
    if (drawn_) std::fputc('\n', stderr);
  }
  void update(int64_t bytes, int64_t documents, int64_t tokens) {
    if (!shown_) return;
    const auto now = Clock::now();
    if (drawn_ && now - last_ < std::chrono::milliseconds(200)) return;
    last_ = now;
    drawn_ = true;
    const double seconds = std::chrono::duration<double>(now - start_).count();
    std::fprintf(stderr, "\r  %.1f MB read, %.1f MB/s, %lld documents, %lld tokens   ",
                 static_cast<double>(bytes) / 1e6,
                 seconds > 0 ? static_cast<double>(bytes) / 1e6 / seconds : 0.0,
                 static_cast<long long>(documents), static_cast<long long>(tokens));
    std::fflush(stderr);
  }

 private:
  using Clock = std::chrono::steady_clock;
  bool shown_;
  bool drawn_ = false;
  Clock::time_point start_ = Clock::now(), last_;
};

int thread_count(int requested) {
  if (requested > 0) return requested;
  return std::max(1, static_cast<int>(std::thread::hardware_concurrency()));
}

}  // namespace

CorpusManifest prepare_sources(const std::vector<TextSource>& sources, const std::string& out_dir,
                               const Tokenizer& tokenizer, const PrepareOptions& options) {
  STRATA_CHECK(options.max_shard_bytes > 0, "max_shard_bytes ", options.max_shard_bytes);
  STRATA_REQUIRE(options.threads >= 0, "--threads (", options.threads,
                 ") must be at least 1, or 0 for every core");
  STRATA_REQUIRE(!(options.prompt_completion && options.chat_template != nullptr),
                 "--prompt-completion and --chat exclude each other: a record is one or the other");
  const nlohmann::ordered_json inputs = preparation_inputs(sources, tokenizer, options);
  CorpusManifest manifest;
  const ResumePoint resume = prepare_output_directory(out_dir, inputs, &manifest);
  if (manifest.sources.empty()) {
    manifest.tokenizer = tokenizer.name();
    manifest.vocab_size = tokenizer.vocab_size();
    manifest.dtype = shard_dtype_name(shard_dtype_for_vocab(tokenizer.vocab_size()));
    manifest.loss_mask = options.prompt_completion || options.chat_template != nullptr;
    for (const auto& source : sources) {
      std::error_code error;
      const auto bytes = static_cast<int64_t>(fs::file_size(source.path, error));
      manifest.sources.push_back({source.path, error ? 0 : bytes, 0, 0});
    }
  }

  const int64_t width =
      static_cast<int64_t>(shard_dtype_bytes(shard_dtype_for_vocab(tokenizer.vocab_size())));
  ShardWriter writer(out_dir, tokenizer, std::max<int64_t>(1, options.max_shard_bytes / width),
                     inputs, &manifest, resume, options.kill_after_shards);
  {
    TokenizePipeline pipeline(
        sources, tokenizer,
        DocumentFields{options.field, options.prompt_completion, options.chat_template},
        thread_count(options.threads), resume.documents);
    ProgressLine progress(options.progress_bar);
    int64_t bytes_read = 0, tokens_made = 0;  // this run's, for the progress line
    TokenizedBatch batch;
    while (pipeline.next(&batch)) {
      writer.add_batch(batch);
      bytes_read += batch.input_bytes;
      tokens_made += static_cast<int64_t>(batch.tokens.size());
      progress.update(bytes_read, manifest.documents, tokens_made);
    }
  }
  writer.finish();
  STRATA_REQUIRE(manifest.total_tokens > 0, "the ", sources.size(),
                 " input file(s) hold no text to tokenize");

  std::string text = manifest_to_json(manifest).dump(2) + "\n";
  write_file_atomically(out_dir + "/" + kManifestName, text.data(), text.size());
  std::error_code error;
  fs::remove(out_dir + "/" + kProgressName, error);  // the manifest now says it is complete
  return manifest;
}

CorpusManifest prepare_corpus(const std::vector<std::string>& inputs, const std::string& out_dir,
                              const Tokenizer& tokenizer, const PrepareOptions& options) {
  return prepare_sources(text_sources(inputs), out_dir, tokenizer, options);
}

CorpusManifest read_manifest(const std::string& dir) {
  std::string path = dir + "/" + kManifestName;
  std::ifstream in(path);
  STRATA_REQUIRE(in.good(), "no ", kManifestName, " in ", dir,
                 ": data.path must be a directory made by `strata data prepare` or a shard file",
                 fs::exists(dir + "/" + kProgressName)
                     ? str(" (", dir,
                           " holds an unfinished preparation: run the same `strata "
                           "data prepare` again to finish it)")
                     : "");
  try {
    nlohmann::json json = nlohmann::json::parse(in);
    STRATA_REQUIRE(json.value("format", "") == kManifestFormat, "manifest ", path,
                   " is not a strata token-shard manifest (its \"format\" is not \"",
                   kManifestFormat, "\")");
    const int64_t version = json_int(json, "version");
    STRATA_REQUIRE(version == 1 || version == kManifestVersion, "manifest ", path, " has version ",
                   version, "; this build reads versions 1 and ", kManifestVersion);
    return manifest_from_json(json);
  } catch (const nlohmann::json::exception& failure) {
    throw UserError(str("manifest ", path, " is malformed: ", failure.what()));
  }
}

TokenStream load_token_shards(const std::string& path) {
  std::error_code error;
  TokenStream stream;
  std::vector<std::string> files;
  CorpusManifest manifest;
  const bool directory = fs::is_directory(path, error);
  if (!directory) {
    STRATA_REQUIRE(fs::exists(path, error), "data.path ", path,
                   " does not exist: give a directory made by `strata data prepare` or a shard "
                   "file");
    files.push_back(path);
  } else {
    manifest = read_manifest(path);
    // The manifest is untrusted: reserve no more than its shard files can hold (2-byte
    // tokens at the least), and read only files inside the directory.
    uint64_t capacity = 0;
    for (const auto& entry : manifest.shards) {
      STRATA_REQUIRE(!entry.file.empty() && entry.file != "." && entry.file != ".." &&
                         entry.file.find('/') == std::string::npos,
                     "manifest of ", path, " names shard \"", entry.file,
                     "\", which is not a plain file name; prepare the directory again with "
                     "`strata data prepare`");
      const uintmax_t bytes = fs::file_size(path + "/" + entry.file, error);
      if (!error) capacity += bytes / 2;
      files.push_back(path + "/" + entry.file);
    }
    stream.tokens.reserve(static_cast<size_t>(std::min<uint64_t>(
        capacity, static_cast<uint64_t>(std::max<int64_t>(0, manifest.total_tokens)))));
  }
  bool keeps_boundaries = true;
  size_t masked_shards = 0;
  for (size_t i = 0; i < files.size(); ++i) {
    TokenShard shard = read_token_shard(files[i]);
    if (i == 0 && manifest.tokenizer.empty()) manifest.tokenizer = shard.tokenizer;
    STRATA_REQUIRE(shard.tokenizer == shard_tokenizer_label(manifest.tokenizer), "token shard ",
                   files[i], " was made by tokenizer \"", shard.tokenizer,
                   "\" but its manifest says \"", manifest.tokenizer, "\"");
    STRATA_REQUIRE(
        !directory || static_cast<int64_t>(shard.tokens.size()) == manifest.shards[i].tokens,
        "token shard ", files[i], " holds ", shard.tokens.size(), " tokens but its manifest says ",
        manifest.shards[i].tokens);
    keeps_boundaries = keeps_boundaries && shard.version >= 2;
    masked_shards += shard.loss_mask.empty() ? 0 : 1;
    const auto offset = static_cast<int64_t>(stream.tokens.size());
    for (int64_t start : shard.document_starts) stream.document_starts.push_back(offset + start);
    stream.tokens.insert(stream.tokens.end(), shard.tokens.begin(), shard.tokens.end());
    stream.loss_mask.insert(stream.loss_mask.end(), shard.loss_mask.begin(), shard.loss_mask.end());
  }
  stream.tokenizer = manifest.tokenizer;
  STRATA_REQUIRE(!directory || static_cast<int64_t>(stream.tokens.size()) == manifest.total_tokens,
                 "the shards in ", path, " hold ", stream.tokens.size(),
                 " tokens but the manifest's total_tokens is ", manifest.total_tokens);
  STRATA_REQUIRE(masked_shards == 0 || masked_shards == files.size(), "only ", masked_shards,
                 " of the ", files.size(), " shards in ", path,
                 " carry a loss mask; prepare the directory again with `strata data prepare`");
  if (!keeps_boundaries) stream.document_starts.clear();
  // Tokens before the first recorded start (a shard read alone that begins inside a
  // document) form a document of their own.
  if (!stream.document_starts.empty() && stream.document_starts.front() != 0) {
    stream.document_starts.insert(stream.document_starts.begin(), 0);
  }
  return stream;
}

ChatTemplate data_chat_template(const std::string& tokenizer, const std::string& file) {
  std::error_code error;
  const bool directory = !tokenizer.empty() && fs::is_directory(tokenizer, error);
  STRATA_REQUIRE(directory || !file.empty(), "--chat needs a chat template: --tokenizer ",
                 tokenizer,
                 " is not a directory with a tokenizer_config.json; give one with "
                 "--chat-template FILE");
  if (directory) return ChatTemplate::from_model_dir(tokenizer, file);
  std::ifstream in(file, std::ios::binary);
  std::ostringstream text;
  text << in.rdbuf();
  STRATA_REQUIRE(in.good() || in.eof(), "cannot read chat template ", file);
  return ChatTemplate(text.str(), file, jinja::Json::object());
}

int run_data_prepare(const std::vector<std::string>& inputs, const std::string& out_dir,
                     const std::string& tokenizer_name, PrepareOptions options) {
  auto tokenizer = make_tokenizer(tokenizer_name);
  if (const char* kill = std::getenv("STRATA_PREPARE_KILL_AFTER_SHARDS"); kill && *kill) {
    options.kill_after_shards = std::atoll(kill);
  }
  const auto start = std::chrono::steady_clock::now();
  CorpusManifest manifest = prepare_corpus(inputs, out_dir, *tokenizer, options);
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  int64_t bytes = 0;
  for (const auto& source : manifest.sources) bytes += source.bytes;
  std::printf(
      "prepared %lld tokens (%lld documents) from %zu file(s) into %zu shard(s) in %s\n"
      "  %.1f MB of input in %.2f s (%.1f MB/s, %d threads)\n"
      "  tokenizer %s (vocab %lld), stored as %s%s; manifest %s/%s\n"
      "  train on it with: data.source = \"shards\", data.path = \"%s\"%s\n",
      static_cast<long long>(manifest.total_tokens), static_cast<long long>(manifest.documents),
      manifest.sources.size(), manifest.shards.size(), out_dir.c_str(),
      static_cast<double>(bytes) / 1e6, seconds,
      seconds > 0 ? static_cast<double>(bytes) / 1e6 / seconds : 0.0, thread_count(options.threads),
      manifest.tokenizer.c_str(), static_cast<long long>(manifest.vocab_size),
      manifest.dtype.c_str(), manifest.loss_mask ? " with a completion loss mask" : "",
      out_dir.c_str(), kManifestName, out_dir.c_str(),
      manifest.loss_mask ? ", data.loss_mask = \"completion\"" : "");
  return 0;
}

}  // namespace strata
