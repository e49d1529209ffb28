// The corpus cache: where it lives, that an entry is built once and reused, that a changed
// source makes a new entry, that racing builders agree, and that the default fortunes
// corpus loads through it.
#include <gtest/gtest.h>

#include <sys/stat.h>

#include <filesystem>
#include <thread>

#include "data_test_helpers.h"
#include "strata/data/corpus_cache.h"
#include "strata/data/dataset.h"
#include "strata/data/prepare.h"
#include "test_support.h"

namespace fs = std::filesystem;

namespace strata {
namespace {

using testing::ScopedEnv;
using testing::TempDir;
using testing::write_text;

std::vector<TextSource> two_sources(const TempDir& dir) {
  write_text(dir.file("one.txt"), "The first document.\n");
  write_text(dir.file("two.txt"), "The second document.\n");
  return text_sources({dir.path()});
}

// Names in `dir`, sorted.
std::vector<std::string> entries(const std::string& dir) {
  std::vector<std::string> names;
  for (const auto& entry : fs::directory_iterator(dir)) {
    names.push_back(entry.path().filename().string());
  }
  std::sort(names.begin(), names.end());
  return names;
}

TEST(CacheDir, FollowsStrataThenXdgThenHome) {
  ScopedEnv strata("STRATA_CACHE_DIR", "/c/strata");
  ScopedEnv xdg("XDG_CACHE_HOME", "/c/xdg");
  ScopedEnv home("HOME", "/c/home");
  EXPECT_EQ(default_cache_dir(), "/c/strata");
  {
    ScopedEnv unset("STRATA_CACHE_DIR", nullptr);
    EXPECT_EQ(default_cache_dir(), "/c/xdg/strata");
    ScopedEnv unset_xdg("XDG_CACHE_HOME", "");
    EXPECT_EQ(default_cache_dir(), "/c/home/.cache/strata");
  }
}

TEST(CorpusCache, KeyDependsOnTokenizerAndOnEachSourcesSizeAndTime) {
  TempDir dir;
  std::vector<TextSource> sources = two_sources(dir);
  ByteTokenizer tokenizer;
  std::string key = corpus_cache_key(sources, tokenizer);
  EXPECT_EQ(key.rfind("byte-", 0), 0u) << key;
  EXPECT_EQ(key.size(), 5u + 16u);
  EXPECT_EQ(corpus_cache_key(sources, tokenizer), key);

  write_text(dir.file("two.txt"), "The second document, edited.\n");
  EXPECT_NE(corpus_cache_key(sources, tokenizer), key);
  EXPECT_NE(corpus_cache_key({sources[0]}, tokenizer), key);
}

// A tokenizer loaded from a directory is named by its path: the entry is still one
// directory level under corpus/.
class PathNamedTokenizer final : public Tokenizer {
 public:
  std::string name() const override { return "/models/some/long/path/to/a/tokenizer dir"; }
  int64_t vocab_size() const override { return 256; }
  std::vector<int32_t> encode(std::string_view text) const override {
    return ByteTokenizer().encode(text);
  }
  std::string decode(const int64_t* ids, size_t count) const override {
    return ByteTokenizer().decode(ids, count);
  }
  using Tokenizer::decode;
};

TEST(CorpusCache, TokenizersNamedByAPathGetAnEntryToo) {
  TempDir dir, cache;
  std::vector<TextSource> sources = two_sources(dir);
  PathNamedTokenizer tokenizer;
  const std::string key = corpus_cache_key(sources, tokenizer);
  EXPECT_EQ(key.find('/'), std::string::npos) << key;
  EXPECT_EQ(key.find(' '), std::string::npos) << key;
  const std::string entry = cached_corpus_dir(sources, tokenizer, cache.path());
  EXPECT_EQ(entry, cache.path() + "/corpus/" + key);
  EXPECT_EQ(load_token_shards(entry).tokens.size(), 43u);
}

TEST(CorpusCache, BuildsOnceAndReusesTheEntry) {
  TempDir dir, cache;
  std::vector<TextSource> sources = two_sources(dir);
  ByteTokenizer tokenizer;
  std::string first = cached_corpus_dir(sources, tokenizer, cache.path());
  EXPECT_EQ(first, cache.path() + "/corpus/" + corpus_cache_key(sources, tokenizer));
  struct stat before {};
  ASSERT_EQ(::stat((first + "/manifest.json").c_str(), &before), 0);

  std::string second = cached_corpus_dir(sources, tokenizer, cache.path());
  EXPECT_EQ(second, first);
  struct stat after {};
  ASSERT_EQ(::stat((second + "/manifest.json").c_str(), &after), 0);
  EXPECT_EQ(after.st_ino, before.st_ino) << "the entry was rebuilt instead of reused";
  EXPECT_EQ(after.st_mtim.tv_nsec, before.st_mtim.tv_nsec);
  EXPECT_EQ(entries(cache.path() + "/corpus").size(), 1u);
  EXPECT_EQ(tokenizer.decode(load_token_shards(first).tokens),
            "The first document.\n\nThe second document.\n\n");
}

TEST(CorpusCache, EntriesKeepDocumentBoundariesOneFortuneADocument) {
  TempDir dir, cache;
  fs::create_directories(dir.file("fortunes"));
  write_text(dir.file("fortunes/a"), "One.\n%\nTwo, longer.\n%\n");
  write_text(dir.file("fortunes/b"), "Three.\n");
  ByteTokenizer tokenizer;
  const std::string entry =
      cached_corpus_dir(fortune_sources(dir.file("fortunes")), tokenizer, cache.path());
  TokenStream stream = load_token_shards(entry);
  EXPECT_EQ(tokenizer.decode(stream.tokens), "One.\n\nTwo, longer.\n\nThree.\n\n");
  EXPECT_EQ(stream.document_starts, (std::vector<int64_t>{0, 6, 20}));
}

TEST(CorpusCache, ConcurrentBuildersAllUseOneEntry) {
  TempDir dir, cache;
  std::vector<TextSource> sources = two_sources(dir);
  ByteTokenizer tokenizer;
  constexpr int kBuilders = 6;
  std::vector<std::string> results(kBuilders);
  std::vector<std::string> failures(kBuilders);
  std::vector<std::thread> builders;
  for (int i = 0; i < kBuilders; ++i) {
    builders.emplace_back([&, i] {
      try {
        results[i] = cached_corpus_dir(sources, tokenizer, cache.path());
      } catch (const std::exception& error) {
        failures[i] = error.what();
      }
    });
  }
  for (auto& builder : builders) builder.join();
  for (int i = 0; i < kBuilders; ++i) {
    EXPECT_EQ(failures[i], "") << "builder " << i;
    EXPECT_EQ(results[i], results[0]) << "builder " << i;
  }
  // One entry, and no temporary directory left behind by the losers.
  EXPECT_EQ(entries(cache.path() + "/corpus"),
            std::vector<std::string>{corpus_cache_key(sources, tokenizer)});
  EXPECT_EQ(load_token_shards(results[0]).tokens.size(), 43u);
}

TEST(CorpusCache, OpenWithATextPathUsesTheCache) {
  TempDir dir, cache;
  two_sources(dir);
  ScopedEnv env("STRATA_CACHE_DIR", cache.path().c_str());
  DataConfig data;
  data.path = dir.file("one.txt");
  data.eval_fraction = 0.0;
  ModelConfig model;
  model.seq_len = 8;
  auto dataset = TokenDataset::open(data, model, 1);
  EXPECT_EQ(dataset->num_tokens(Split::Train), 21);
  EXPECT_EQ(entries(cache.path() + "/corpus").size(), 1u);
}

TEST(FortunesCorpus, LoadsAsTheDefaultCorpus) {
  if (!fs::is_directory(kFortuneDir)) GTEST_SKIP() << kFortuneDir << " is absent";
  TempDir cache;
  ScopedEnv env("STRATA_CACHE_DIR", cache.path().c_str());
  DataConfig data;  // source "corpus", no path, byte tokenizer, 5% eval
  ModelConfig model;
  auto dataset = TokenDataset::open(data, model, 7);
  int64_t train = dataset->num_tokens(Split::Train);
  int64_t eval = dataset->num_tokens(Split::Eval);
  EXPECT_GT(train + eval, 1000000) << dataset->description();
  EXPECT_NEAR(static_cast<double>(eval) / static_cast<double>(train + eval), 0.05, 1e-4);
  EXPECT_NE(dataset->description().find("fortunes"), std::string::npos);

  // The text is English prose: spaces and lowercase letters dominate, and no "%" separator
  // line survived.
  at::Tensor rows = dataset->rows(Split::Train, 0, 0, 64, 128);
  ByteTokenizer tokenizer;
  std::vector<int64_t> ids(rows.data_ptr<int64_t>(), rows.data_ptr<int64_t>() + rows.numel());
  std::string text = tokenizer.decode(ids);
  auto spaces = std::count(text.begin(), text.end(), ' ');
  EXPECT_GT(spaces, static_cast<int64_t>(text.size()) / 10) << text.substr(0, 300);
  EXPECT_EQ(text.find("\n%\n"), std::string::npos);

  // A second open (another rank, or the next run) reuses the one cache entry.
  auto again = TokenDataset::open(data, model, 7);
  EXPECT_EQ(again->num_tokens(Split::Train), train);
  EXPECT_EQ(entries(cache.path() + "/corpus").size(), 1u);
}

}  // namespace
}  // namespace strata
