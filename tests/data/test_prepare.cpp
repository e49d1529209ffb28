// Preparing text into shards + manifest, loading it back, finding text files and fortune
// files, and the refusals for bad inputs.
#include <gtest/gtest.h>

#include <filesystem>

#include "data_test_helpers.h"
#include "expect_error.h"
#include "mutation.h"
#include "strata/data/prepare.h"
#include "strata/data/token_shard.h"
#include "test_support.h"

namespace fs = std::filesystem;

namespace strata {
namespace {

using testing::expect_user_error;
using testing::read_bytes;
using testing::TempDir;
using testing::write_text;

// A directory with two .txt files (one nested), an empty .txt file and a non-.txt file.
struct TextTree {
  TempDir dir{"strata-text"};
  TextTree() {
    fs::create_directories(dir.file("sub"));
    write_text(dir.file("a.txt"), "Alpha text.\n");
    write_text(dir.file("sub/b.txt"), "B\xC3\xA9ta\n\n\n");
    write_text(dir.file("empty.txt"), "");
    write_text(dir.file("notes.md"), "not included");
  }
};

TEST(TextSources, DirectoriesStandForTheirTxtFilesSorted) {
  TextTree tree;
  std::vector<TextSource> sources = text_sources({tree.dir.path()});
  ASSERT_EQ(sources.size(), 3u);  // notes.md is left out
  EXPECT_EQ(sources[0].path, tree.dir.file("a.txt"));
  EXPECT_EQ(sources[1].path, tree.dir.file("empty.txt"));
  EXPECT_EQ(sources[2].path, tree.dir.file("sub/b.txt"));
  EXPECT_EQ(sources[0].format, TextSource::Format::Text);
}

TEST(TextSources, FilesNamedDirectlyAreTakenWhateverTheirExtension) {
  TextTree tree;
  std::vector<TextSource> sources = text_sources({tree.dir.file("notes.md")});
  ASSERT_EQ(sources.size(), 1u);
  EXPECT_EQ(sources[0].path, tree.dir.file("notes.md"));
}

TEST(TextSources, MissingPathsAndDirectoriesWithoutTextAreRefused) {
  TempDir dir;
  expect_user_error([&] { text_sources({dir.file("nope")}); },
                    {dir.file("nope"), "does not exist"});
  expect_user_error([&] { text_sources({dir.path()}); }, {dir.path(), "no .txt or .jsonl files"});
  expect_user_error([] { text_sources({}); }, {"no input"});
}

TEST(FortuneSources, TakesTopLevelTextFilesOnly) {
  TempDir dir;
  write_text(dir.file("cookie"), "a\n%\nb\n");
  write_text(dir.file("cookie.dat"), "index");
  fs::create_symlink("cookie", dir.file("cookie.u8"));
  write_text(dir.file("art"), "c\n");
  fs::create_directories(dir.file("off"));
  write_text(dir.file("off/rude"), "skipped\n");
  std::vector<TextSource> sources = fortune_sources(dir.path());
  ASSERT_EQ(sources.size(), 2u);
  EXPECT_EQ(sources[0].path, dir.file("art"));
  EXPECT_EQ(sources[1].path, dir.file("cookie"));
  EXPECT_EQ(sources[1].format, TextSource::Format::Fortune);
}

TEST(FortuneSources, AMissingPackageIsAUserErrorSayingWhatToDo) {
  TempDir dir;
  expect_user_error([&] { fortune_sources(dir.file("fortunes")); },
                    {"fortunes", "scripts/install-deps.sh", "data.path"});
}

TEST(PrepareCorpus, WritesShardsAndAManifestThatLoadBack) {
  TextTree tree;
  TempDir out;
  std::string out_dir = out.file("prepared");
  PrepareOptions options;
  options.max_shard_bytes = 16;  // 8 uint16 tokens per shard, to get several shards
  ByteTokenizer tokenizer;
  CorpusManifest manifest = prepare_corpus({tree.dir.path()}, out_dir, tokenizer, options);

  std::string expected_text = "Alpha text.\n\nB\xC3\xA9ta\n\n";
  int64_t total = static_cast<int64_t>(expected_text.size());
  EXPECT_EQ(manifest.total_tokens, total);
  EXPECT_EQ(manifest.tokenizer, "byte");
  EXPECT_EQ(manifest.vocab_size, 256);
  EXPECT_EQ(manifest.dtype, "uint16");
  ASSERT_EQ(manifest.sources.size(), 3u);
  EXPECT_EQ(manifest.sources[0].tokens, 13);
  EXPECT_EQ(manifest.sources[0].bytes, 12);
  EXPECT_EQ(manifest.sources[1].tokens, 0);
  EXPECT_EQ(manifest.sources[2].path, tree.dir.file("sub/b.txt"));
  ASSERT_EQ(static_cast<int64_t>(manifest.shards.size()), (total + 7) / 8);
  EXPECT_EQ(manifest.shards[0].file, "shard-00000.tok");
  EXPECT_EQ(manifest.shards[0].tokens, 8);
  EXPECT_EQ(manifest.shards.back().tokens, total - 8 * (total / 8));

  CorpusManifest reread = read_manifest(out_dir);
  EXPECT_EQ(reread.total_tokens, total);
  EXPECT_EQ(reread.shards.size(), manifest.shards.size());
  EXPECT_EQ(reread.sources.size(), 3u);

  TokenStream stream = load_token_shards(out_dir);
  EXPECT_EQ(stream.tokenizer, "byte");
  EXPECT_EQ(tokenizer.decode(stream.tokens), expected_text);
  EXPECT_EQ(stream.document_starts, (std::vector<int64_t>{0, 13}));  // each file is a document
  EXPECT_TRUE(stream.loss_mask.empty());
}

TEST(PrepareCorpus, DefaultShardsHoldUpTo64MiBOfTokens) {
  TextTree tree;
  TempDir out;
  ByteTokenizer tokenizer;
  CorpusManifest manifest = prepare_corpus({tree.dir.path()}, out.file("p"), tokenizer);
  EXPECT_EQ(PrepareOptions{}.max_shard_bytes, 64 << 20);
  EXPECT_EQ(manifest.shards.size(), 1u);
}

TEST(PrepareCorpus, ASingleShardFileLoadsToo) {
  TempDir dir;
  write_token_shard(dir.file("one.tok"), std::vector<int32_t>{5, 6, 7}, "byte", 256);
  TokenStream stream = load_token_shards(dir.file("one.tok"));
  EXPECT_EQ(stream.tokens, (std::vector<int32_t>{5, 6, 7}));
  EXPECT_EQ(stream.tokenizer, "byte");
}

TEST(PrepareCorpus, RefusesANonEmptyOutputDirectory) {
  TextTree tree;
  TempDir out;
  write_text(out.file("old.tok"), "stale");
  ByteTokenizer tokenizer;
  expect_user_error([&] { prepare_corpus({tree.dir.path()}, out.path(), tokenizer); },
                    {out.path(), "not empty"});
}

TEST(PrepareCorpus, RefusesInputsWithoutText) {
  TempDir dir;
  write_text(dir.file("empty.txt"), "\n\n");
  ByteTokenizer tokenizer;
  expect_user_error([&] { prepare_corpus({dir.path()}, dir.file("out"), tokenizer); }, {"no text"});
}

TEST(LoadTokenShards, RefusesDirectoriesWithoutAManifest) {
  TempDir dir;
  expect_user_error([&] { load_token_shards(dir.path()); },
                    {"no manifest.json in " + dir.path(), "strata data prepare"});
  expect_user_error([&] { load_token_shards(dir.file("absent")); },
                    {dir.file("absent"), "does not exist"});
}

TEST(LoadTokenShards, RefusesAMalformedManifest) {
  TempDir dir;
  write_text(dir.file("manifest.json"), "{ not json");
  expect_user_error([&] { load_token_shards(dir.path()); }, {"manifest.json", "malformed"});
  write_text(dir.file("manifest.json"), "{\"format\": \"something-else\"}");
  expect_user_error([&] { load_token_shards(dir.path()); }, {"not a strata token-shard"});
}

TEST(LoadTokenShards, RefusesShardsThatDisagreeWithTheManifest) {
  TextTree tree;
  TempDir out;
  ByteTokenizer tokenizer;
  std::string dir = out.file("p");
  prepare_corpus({tree.dir.path()}, dir, tokenizer);
  write_token_shard(dir + "/shard-00000.tok", std::vector<int32_t>{1, 2}, "byte", 256);
  expect_user_error([&] { load_token_shards(dir); },
                    {"shard-00000.tok", "holds 2 tokens but its manifest says"});
}

// Prepared directories are untrusted input: thousands of corrupted manifests and shard
// headers end in a UserError (or a valid load), never a crash or an allocation the files do
// not justify (a manifest may claim 2^63 tokens).
TEST(LoadTokenShards, CorruptManifestsAndShardHeadersAreRefusedCleanly) {
  TextTree tree;
  TempDir out;
  ByteTokenizer tokenizer;
  const std::string dir = out.file("p");
  PrepareOptions options;
  options.max_shard_bytes = 16;  // several shards
  prepare_corpus({tree.dir.path()}, dir, tokenizer, options);
  const std::string manifest = read_bytes(dir + "/manifest.json");
  const std::string shard_path = dir + "/shard-00000.tok";
  const std::string shard = read_bytes(shard_path);

  std::mt19937 random(14);
  int refused = 0;
  constexpr int kMutations = 2000;
  for (int mutation = 0; mutation < kMutations; ++mutation) {
    const bool of_manifest = mutation % 2 == 0;
    if (of_manifest) {
      write_text(dir + "/manifest.json", testing::mutate(manifest, random));
    } else {  // the binary header: its 64 bytes mutated, the tokens kept
      write_text(shard_path, testing::mutate(shard.substr(0, kShardHeaderBytes), random) +
                                 shard.substr(kShardHeaderBytes));
    }
    refused += testing::refused_cleanly(mutation, [&] { load_token_shards(dir); });
    write_text(of_manifest ? dir + "/manifest.json" : shard_path, of_manifest ? manifest : shard);
  }
  EXPECT_GT(refused, kMutations / 2) << "most mutations must be refused";
}

TEST(RunDataPrepare, PreparesAndReturnsZero) {
  TextTree tree;
  TempDir out;
  ::testing::internal::CaptureStdout();
  int status = run_data_prepare({tree.dir.file("a.txt"), tree.dir.file("sub")}, out.file("p"));
  std::string printed = ::testing::internal::GetCapturedStdout();
  EXPECT_EQ(status, 0);
  EXPECT_NE(printed.find("prepared 20 tokens (2 documents) from 2 file(s) into 1 shard(s)"),
            std::string::npos)
      << printed;
  EXPECT_EQ(load_token_shards(out.file("p")).tokens.size(), 20u);
  expect_user_error([&] { run_data_prepare({tree.dir.path()}, out.file("q"), "bpe"); },
                    {"data.tokenizer = \"bpe\""});
}

}  // namespace
}  // namespace strata
