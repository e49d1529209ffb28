// Tokenizing text into shards + manifest, and loading prepared directories.
#include "strata/data/prepare.h"

#include <nlohmann/json.hpp>

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <fstream>

#include "strata/core/error.h"
#include "strata/data/atomic_file.h"
#include "strata/data/token_shard.h"

namespace fs = std::filesystem;

namespace strata {

namespace {

constexpr const char* kManifestFormat = "strata-token-shards";
constexpr int kManifestVersion = 1;

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
    sources.push_back({{"path", source.path}, {"bytes", source.bytes}, {"tokens", source.tokens}});
  }
  return {{"format", kManifestFormat},
          {"version", kManifestVersion},
          {"tokenizer", manifest.tokenizer},
          {"vocab_size", manifest.vocab_size},
          {"dtype", manifest.dtype},
          {"total_tokens", manifest.total_tokens},
          {"shards", shards},
          {"sources", sources}};
}

// Accumulates tokens and writes a shard each time a full one is ready.
class ShardWriter {
 public:
  ShardWriter(std::string dir, const Tokenizer& tokenizer, int64_t max_shard_bytes,
              CorpusManifest* manifest)
      : dir_(std::move(dir)), tokenizer_(tokenizer), manifest_(manifest) {
    int64_t width =
        static_cast<int64_t>(shard_dtype_bytes(shard_dtype_for_vocab(tokenizer.vocab_size())));
    tokens_per_shard_ = std::max<int64_t>(1, max_shard_bytes / width);
  }

  void append(const std::vector<int32_t>& tokens) {
    pending_.insert(pending_.end(), tokens.begin(), tokens.end());
    size_t written = 0;
    while (static_cast<int64_t>(pending_.size() - written) >= tokens_per_shard_) {
      write(pending_.data() + written, static_cast<size_t>(tokens_per_shard_));
      written += static_cast<size_t>(tokens_per_shard_);
    }
    pending_.erase(pending_.begin(), pending_.begin() + static_cast<std::ptrdiff_t>(written));
  }

  void finish() {
    if (!pending_.empty()) write(pending_.data(), pending_.size());
    pending_.clear();
  }

 private:
  void write(const int32_t* tokens, size_t count) {
    std::string name = shard_file_name(manifest_->shards.size());
    write_token_shard(dir_ + "/" + name, tokens, count, tokenizer_.name(), tokenizer_.vocab_size());
    manifest_->shards.push_back({name, static_cast<int64_t>(count)});
  }

  std::string dir_;
  const Tokenizer& tokenizer_;
  CorpusManifest* manifest_;
  int64_t tokens_per_shard_ = 0;
  std::vector<int32_t> pending_;  // tokens not yet in a shard, fewer than tokens_per_shard_
};

int64_t json_int(const nlohmann::json& object, const char* key) {
  return object.at(key).get<int64_t>();
}

}  // namespace

CorpusManifest prepare_sources(const std::vector<TextSource>& sources, const std::string& out_dir,
                               const Tokenizer& tokenizer, const PrepareOptions& options) {
  STRATA_CHECK(options.max_shard_bytes > 0, "max_shard_bytes ", options.max_shard_bytes);
  std::error_code error;
  fs::create_directories(out_dir, error);
  if (!fs::is_directory(out_dir)) {
    throw UserError(str("cannot create output directory ", out_dir, ": ", error.message()));
  }
  STRATA_REQUIRE(fs::is_empty(out_dir), "output directory ", out_dir,
                 " is not empty; choose a new directory or remove this one");

  CorpusManifest manifest;
  manifest.tokenizer = tokenizer.name();
  manifest.vocab_size = tokenizer.vocab_size();
  manifest.dtype = shard_dtype_name(shard_dtype_for_vocab(tokenizer.vocab_size()));
  ShardWriter writer(out_dir, tokenizer, options.max_shard_bytes, &manifest);
  for (const auto& source : sources) {
    std::vector<int32_t> tokens = tokenizer.encode(read_source_text(source));
    int64_t bytes = static_cast<int64_t>(fs::file_size(source.path, error));
    manifest.sources.push_back(
        {source.path, error ? 0 : bytes, static_cast<int64_t>(tokens.size())});
    manifest.total_tokens += static_cast<int64_t>(tokens.size());
    writer.append(tokens);
  }
  STRATA_REQUIRE(manifest.total_tokens > 0, "the ", sources.size(),
                 " input file(s) hold no text to tokenize");
  writer.finish();

  std::string text = manifest_to_json(manifest).dump(2) + "\n";
  write_file_atomically(out_dir + "/" + kManifestName, text.data(), text.size());
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
                 ": data.path must be a directory made by `strata data prepare` or a shard file");
  CorpusManifest manifest;
  try {
    nlohmann::json json = nlohmann::json::parse(in);
    STRATA_REQUIRE(json.value("format", "") == kManifestFormat, "manifest ", path,
                   " is not a strata token-shard manifest (its \"format\" is not \"",
                   kManifestFormat, "\")");
    STRATA_REQUIRE(json_int(json, "version") == kManifestVersion, "manifest ", path,
                   " has version ", json_int(json, "version"), "; this build reads version ",
                   kManifestVersion);
    manifest.tokenizer = json.at("tokenizer").get<std::string>();
    manifest.vocab_size = json_int(json, "vocab_size");
    manifest.dtype = json.at("dtype").get<std::string>();
    manifest.total_tokens = json_int(json, "total_tokens");
    for (const auto& shard : json.at("shards")) {
      manifest.shards.push_back({shard.at("file").get<std::string>(), json_int(shard, "tokens")});
    }
    for (const auto& source : json.at("sources")) {
      manifest.sources.push_back({source.at("path").get<std::string>(), json_int(source, "bytes"),
                                  json_int(source, "tokens")});
    }
  } catch (const nlohmann::json::exception& failure) {
    throw UserError(str("manifest ", path, " is malformed: ", failure.what()));
  }
  return manifest;
}

TokenStream load_token_shards(const std::string& path) {
  std::error_code error;
  TokenStream stream;
  if (!fs::is_directory(path, error)) {
    STRATA_REQUIRE(fs::exists(path, error), "data.path ", path,
                   " does not exist: give a directory made by `strata data prepare` or a shard "
                   "file");
    TokenShard shard = read_token_shard(path);
    stream.tokens = std::move(shard.tokens);
    stream.tokenizer = shard.tokenizer;
    return stream;
  }
  CorpusManifest manifest = read_manifest(path);
  stream.tokenizer = manifest.tokenizer;
  // The manifest is untrusted: reserve no more than its shard files can hold (2-byte tokens
  // at the least), and read only files inside the directory.
  uint64_t capacity = 0;
  for (const auto& entry : manifest.shards) {
    STRATA_REQUIRE(!entry.file.empty() && entry.file != "." && entry.file != ".." &&
                       entry.file.find('/') == std::string::npos,
                   "manifest of ", path, " names shard \"", entry.file,
                   "\", which is not a plain file name; prepare the directory again with "
                   "`strata data prepare`");
    const uintmax_t bytes = fs::file_size(path + "/" + entry.file, error);
    if (!error) capacity += bytes / 2;
  }
  stream.tokens.reserve(static_cast<size_t>(std::min<uint64_t>(
      capacity, static_cast<uint64_t>(std::max<int64_t>(0, manifest.total_tokens)))));
  for (const auto& entry : manifest.shards) {
    std::string file = path + "/" + entry.file;
    TokenShard shard = read_token_shard(file);
    STRATA_REQUIRE(shard.tokenizer == manifest.tokenizer, "token shard ", file,
                   " was made by tokenizer \"", shard.tokenizer, "\" but its manifest says \"",
                   manifest.tokenizer, "\"");
    STRATA_REQUIRE(static_cast<int64_t>(shard.tokens.size()) == entry.tokens, "token shard ", file,
                   " holds ", shard.tokens.size(), " tokens but its manifest says ", entry.tokens);
    stream.tokens.insert(stream.tokens.end(), shard.tokens.begin(), shard.tokens.end());
  }
  STRATA_REQUIRE(static_cast<int64_t>(stream.tokens.size()) == manifest.total_tokens,
                 "the shards in ", path, " hold ", stream.tokens.size(),
                 " tokens but the manifest's total_tokens is ", manifest.total_tokens);
  return stream;
}

int run_data_prepare(const std::vector<std::string>& inputs, const std::string& out_dir,
                     const std::string& tokenizer_name) {
  auto tokenizer = make_tokenizer(tokenizer_name);
  CorpusManifest manifest = prepare_corpus(inputs, out_dir, *tokenizer);
  std::printf(
      "prepared %lld tokens from %zu file(s) into %zu shard(s) in %s\n"
      "  tokenizer %s (vocab %lld), stored as %s; manifest %s/%s\n"
      "  train on it with: data.source = \"shards\", data.path = \"%s\"\n",
      static_cast<long long>(manifest.total_tokens), manifest.sources.size(),
      manifest.shards.size(), out_dir.c_str(), manifest.tokenizer.c_str(),
      static_cast<long long>(manifest.vocab_size), manifest.dtype.c_str(), out_dir.c_str(),
      kManifestName, out_dir.c_str());
  return 0;
}

}  // namespace strata
