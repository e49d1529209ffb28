// Corpus preparation of every input format: JSON lines (plain, gzip, zstd) with a chosen
// field or prompt/completion records, fortune entries, the document index the shards keep,
// the end-of-text separator, bad records named by file:line, and output that does not depend
// on the thread count.
#include <gtest/gtest.h>
#include <zlib.h>
#include <zstd.h>

#include <filesystem>
#include <map>

#include "data_test_helpers.h"
#include "expect_error.h"
#include "strata/data/dataset.h"
#include "strata/data/document_reader.h"
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

// Bytes as tokens, plus id 256 as the end-of-text token: documents end in it untrimmed.
class ByteTokenizerWithEndOfText final : public Tokenizer {
 public:
  std::string name() const override { return "byte-eot"; }
  int64_t vocab_size() const override { return 257; }
  std::vector<int32_t> encode(std::string_view text) const override {
    return ByteTokenizer().encode(text);
  }
  std::optional<int32_t> end_of_text_id() const override { return 256; }
  std::string decode(const int64_t* ids, size_t count) const override {
    return ByteTokenizer().decode(ids, count);
  }
  using Tokenizer::decode;
};

void write_gzip(const std::string& path, const std::string& text) {
  gzFile file = gzopen(path.c_str(), "wb");
  ASSERT_NE(file, nullptr);
  ASSERT_EQ(gzwrite(file, text.data(), static_cast<unsigned>(text.size())),
            static_cast<int>(text.size()));
  ASSERT_EQ(gzclose(file), Z_OK);
}

void write_zstd(const std::string& path, const std::string& text) {
  std::string compressed(ZSTD_compressBound(text.size()), '\0');
  const size_t size =
      ZSTD_compress(compressed.data(), compressed.size(), text.data(), text.size(), 3);
  ASSERT_FALSE(ZSTD_isError(size));
  compressed.resize(size);
  write_text(path, compressed);
}

// Every file of a directory by name, to compare two outputs byte for byte.
std::map<std::string, std::string> directory_bytes(const std::string& dir) {
  std::map<std::string, std::string> files;
  for (const auto& entry : fs::directory_iterator(dir)) {
    files[entry.path().filename().string()] = read_bytes(entry.path().string());
  }
  return files;
}

const char* const kRecords =
    "{\"text\": \"first\\n\", \"id\": 1}\n"
    "\n"
    "{\"id\": 2, \"text\": \"second\", \"body\": \"other\"}\n"
    "  \n"
    "{\"text\": \"\"}\n"
    "{\"text\": \"third \\u00e9\"}";  // no final newline

TEST(PrepareJsonl, EachRecordIsADocumentSeparatedByABlankLine) {
  TempDir dir;
  write_text(dir.file("d.jsonl"), kRecords);
  ByteTokenizer tokenizer;
  CorpusManifest manifest = prepare_corpus({dir.file("d.jsonl")}, dir.file("out"), tokenizer);
  const std::string expected = "first\n\nsecond\n\nthird \xC3\xA9\n\n";
  TokenStream stream = load_token_shards(dir.file("out"));
  EXPECT_EQ(tokenizer.decode(stream.tokens), expected);
  EXPECT_EQ(stream.document_starts, (std::vector<int64_t>{0, 7, 15}));
  EXPECT_EQ(manifest.documents, 3);  // the empty text is no document
  EXPECT_EQ(manifest.sources[0].documents, 3);
  EXPECT_EQ(manifest.sources[0].tokens, static_cast<int64_t>(expected.size()));
  EXPECT_EQ(read_manifest(dir.file("out")).documents, 3);
}

TEST(PrepareJsonl, TheFieldIsChosenByName) {
  TempDir dir;
  write_text(dir.file("d.jsonl"), "{\"body\": \"b1\"}\n{\"body\": \"b2\"}\n");
  ByteTokenizer tokenizer;
  PrepareOptions options;
  options.field = "body";
  prepare_corpus({dir.file("d.jsonl")}, dir.file("out"), tokenizer, options);
  EXPECT_EQ(tokenizer.decode(load_token_shards(dir.file("out")).tokens), "b1\n\nb2\n\n");
}

TEST(PrepareJsonl, GzipAndZstdFilesGiveTheSameShards) {
  TempDir dir;
  // Long enough for several reads of the decompressors and several batches.
  std::string records;
  for (int i = 0; i < 3000; ++i)
    records += "{\"text\": \"record number " + std::to_string(i) + "\"}\n";
  write_text(dir.file("plain.jsonl"), records);
  write_gzip(dir.file("packed.jsonl.gz"), records);
  write_zstd(dir.file("packed.jsonl.zst"), records);
  ByteTokenizer tokenizer;
  prepare_corpus({dir.file("plain.jsonl")}, dir.file("plain"), tokenizer);
  prepare_corpus({dir.file("packed.jsonl.gz")}, dir.file("gz"), tokenizer);
  prepare_corpus({dir.file("packed.jsonl.zst")}, dir.file("zst"), tokenizer);
  const TokenStream plain = load_token_shards(dir.file("plain"));
  EXPECT_EQ(plain.document_starts.size(), 3000u);
  for (const char* packed : {"gz", "zst"}) {
    SCOPED_TRACE(packed);
    const TokenStream stream = load_token_shards(dir.file(packed));
    EXPECT_EQ(stream.tokens, plain.tokens);
    EXPECT_EQ(stream.document_starts, plain.document_starts);
  }
}

TEST(PrepareJsonl, DirectoriesIncludeJsonlFilesOfEveryCompression) {
  TempDir dir;
  write_text(dir.file("a.txt"), "A");
  write_text(dir.file("b.jsonl"), "{\"text\": \"B\"}\n");
  write_gzip(dir.file("c.jsonl.gz"), "{\"text\": \"C\"}\n");
  write_zstd(dir.file("d.jsonl.zst"), "{\"text\": \"D\"}\n");
  std::vector<TextSource> sources = text_sources({dir.path()});
  ASSERT_EQ(sources.size(), 4u);
  EXPECT_EQ(sources[0].format, TextSource::Format::Text);
  EXPECT_EQ(sources[1].format, TextSource::Format::Jsonl);
  EXPECT_EQ(sources[2].compression, TextSource::Compression::Gzip);
  EXPECT_EQ(sources[3].compression, TextSource::Compression::Zstd);
  ByteTokenizer tokenizer;
  prepare_corpus({dir.path()}, dir.file("out"), tokenizer);
  EXPECT_EQ(tokenizer.decode(load_token_shards(dir.file("out")).tokens), "A\n\nB\n\nC\n\nD\n\n");
}

TEST(PrepareJsonl, BadRecordsAreNamedByFileLineAndField) {
  TempDir dir;
  ByteTokenizer tokenizer;
  const std::string path = dir.file("bad.jsonl");
  const std::vector<std::pair<std::string, std::vector<std::string>>> cases = {
      {"{\"text\": \"ok\"}\n{not json}\n", {path + ":2", "not a JSON record"}},
      {"{\"text\": \"ok\"}\n\n[1, 2]\n", {path + ":3", "not a JSON object"}},
      {"{\"body\": \"x\"}\n", {path + ":1", "no field \"text\"", "--field"}},
      {"{\"text\": 5}\n", {path + ":1", "field \"text\" is not a string"}},
  };
  for (size_t i = 0; i < cases.size(); ++i) {
    SCOPED_TRACE(cases[i].first);
    write_text(path, cases[i].first);
    expect_user_error(
        [&] { prepare_corpus({path}, dir.file("out" + std::to_string(i)), tokenizer); },
        cases[i].second);
  }
  write_text(dir.file("broken.jsonl.gz"), "this is not gzip at all");
  expect_user_error(
      [&] { prepare_corpus({dir.file("broken.jsonl.gz")}, dir.file("gz-out"), tokenizer); },
      {dir.file("broken.jsonl.gz") + ":1", "not a JSON record"});  // zlib reads it as plain
  write_text(dir.file("broken.jsonl.zst"), "this is not zstd at all");
  expect_user_error(
      [&] { prepare_corpus({dir.file("broken.jsonl.zst")}, dir.file("zst-out"), tokenizer); },
      {"broken.jsonl.zst", "not a valid zstd file"});
}

TEST(PrepareJsonl, TheEndOfTextTokenSeparatesDocumentsUntrimmed) {
  TempDir dir;
  write_text(dir.file("d.jsonl"), "{\"text\": \"a\\n\"}\n{\"text\": \"bc\"}\n");
  write_text(dir.file("e.txt"), "de\n\n");
  ByteTokenizerWithEndOfText tokenizer;
  CorpusManifest manifest =
      prepare_corpus({dir.file("d.jsonl"), dir.file("e.txt")}, dir.file("out"), tokenizer);
  TokenStream stream = load_token_shards(dir.file("out"));
  EXPECT_EQ(stream.tokens,
            (std::vector<int32_t>{'a', '\n', 256, 'b', 'c', 256, 'd', 'e', '\n', '\n', 256}));
  EXPECT_EQ(stream.document_starts, (std::vector<int64_t>{0, 3, 6}));
  EXPECT_EQ(manifest.dtype, "uint16");
}

TEST(PrepareFortunes, EachEntryIsADocument) {
  TempDir dir;
  write_text(dir.file("f"),
             "First one.\n\t\t-- Someone\n%\nIt's *__\b\bUN*lucky.\n%\n%\nLast\n%\n");
  ByteTokenizer tokenizer;
  prepare_sources({{dir.file("f"), TextSource::Format::Fortune}}, dir.file("out"), tokenizer);
  TokenStream stream = load_token_shards(dir.file("out"));
  EXPECT_EQ(tokenizer.decode(stream.tokens),
            "First one.\n\t\t-- Someone\n\nIt's *UN*lucky.\n\nLast\n\n");
  EXPECT_EQ(stream.document_starts, (std::vector<int64_t>{0, 25, 42}));
}

TEST(PrepareDocumentIndex, BoundariesSurviveShardsThatCutDocuments) {
  TempDir dir;
  std::string records;
  std::vector<int64_t> starts;
  int64_t offset = 0;
  for (int i = 0; i < 40; ++i) {
    const std::string text(static_cast<size_t>(1 + (i * 7) % 23), static_cast<char>('a' + i % 26));
    records += "{\"text\": \"" + text + "\"}\n";
    starts.push_back(offset);
    offset += static_cast<int64_t>(text.size()) + 2;
  }
  write_text(dir.file("d.jsonl"), records);
  ByteTokenizer tokenizer;
  PrepareOptions options;
  options.max_shard_bytes = 22;  // 11 tokens: shards begin inside documents and at their starts
  CorpusManifest manifest =
      prepare_corpus({dir.file("d.jsonl")}, dir.file("out"), tokenizer, options);
  EXPECT_EQ(manifest.shards.size(), static_cast<size_t>((offset + 10) / 11));
  TokenStream stream = load_token_shards(dir.file("out"));
  EXPECT_EQ(static_cast<int64_t>(stream.tokens.size()), offset);
  EXPECT_EQ(stream.document_starts, starts);
  // Each shard lists only the starts inside it, relative to its first token.
  TokenShard second = read_token_shard(dir.file("out/shard-00001.tok"));
  std::vector<int64_t> inside;
  for (int64_t start : starts) {
    if (start >= 11 && start < 22) inside.push_back(start - 11);
  }
  EXPECT_EQ(second.document_starts, inside);
}

TEST(PrepareThreads, AnyThreadCountWritesTheSameBytes) {
  TempDir dir;
  std::string records, more;
  for (int i = 0; i < 20000; ++i) {
    records += "{\"text\": \"document " + std::to_string(i * 7919 % 10007) + "\"}\n";
    if (i % 3 == 0) more += "{\"text\": \"more " + std::to_string(i) + "\"}\n";
  }
  write_text(dir.file("d.jsonl"), records);
  write_text(dir.file("e.txt"), "a text file between them");
  write_text(dir.file("f.jsonl"), more);
  ByteTokenizer tokenizer;
  std::map<std::string, std::string> reference;
  for (int threads : {1, 2, 5}) {
    SCOPED_TRACE(threads);
    PrepareOptions options;
    options.threads = threads;
    options.max_shard_bytes = 100000;
    const std::string out = dir.file("out" + std::to_string(threads));
    prepare_corpus({dir.file("d.jsonl"), dir.file("e.txt"), dir.file("f.jsonl")}, out, tokenizer,
                   options);
    std::map<std::string, std::string> files = directory_bytes(out);
    EXPECT_GT(files.size(), 3u);
    if (reference.empty()) reference = files;
    EXPECT_TRUE(files == reference) << "threads " << threads << " wrote other bytes";
  }
}

TEST(PrepareThreads, TheFirstBadRecordIsReportedWhateverTheThreadCount) {
  TempDir dir;
  std::string records;
  for (int i = 0; i < 50000; ++i) records += "{\"text\": \"fine " + std::to_string(i) + "\"}\n";
  records += "{broken}\n";
  for (int i = 0; i < 1000; ++i) records += "also broken\n";
  write_text(dir.file("d.jsonl"), records);
  ByteTokenizer tokenizer;
  for (int threads : {1, 4}) {
    PrepareOptions options;
    options.threads = threads;
    expect_user_error(
        [&] {
          prepare_corpus({dir.file("d.jsonl")}, dir.file("out" + std::to_string(threads)),
                         tokenizer, options);
        },
        {dir.file("d.jsonl") + ":50001"});
  }
}

TEST(PreparePromptCompletion, OnlyCompletionTokensCarryLoss) {
  TempDir dir;
  write_text(dir.file("sft.jsonl"),
             "{\"prompt\": \"Q1 \", \"completion\": \"A1\\n\"}\n"
             "{\"prompt\": \"\", \"completion\": \"A2\"}\n");
  ByteTokenizer tokenizer;
  PrepareOptions options;
  options.prompt_completion = true;
  options.max_shard_bytes = 10;  // 5 tokens a shard: the mask crosses shards
  CorpusManifest manifest =
      prepare_corpus({dir.file("sft.jsonl")}, dir.file("out"), tokenizer, options);
  EXPECT_TRUE(manifest.loss_mask);
  EXPECT_TRUE(read_manifest(dir.file("out")).loss_mask);
  TokenStream stream = load_token_shards(dir.file("out"));
  EXPECT_EQ(tokenizer.decode(stream.tokens), "Q1 A1\n\nA2\n\n");
  EXPECT_EQ(stream.loss_mask, (std::vector<uint8_t>{0, 0, 0, 1, 1, 1, 1, 1, 1, 1, 1}));
  EXPECT_EQ(stream.document_starts, (std::vector<int64_t>{0, 7}));

  write_text(dir.file("plain.jsonl"), "{\"text\": \"no prompt here\"}\n");
  expect_user_error(
      [&] { prepare_corpus({dir.file("plain.jsonl")}, dir.file("out2"), tokenizer, options); },
      {dir.file("plain.jsonl") + ":1", "no field \"prompt\"", "\"completion\""});
}

TEST(PreparePromptCompletion, TheDatasetServesTheMaskOfTheTargets) {
  TempDir dir;
  std::string records;
  for (int i = 0; i < 50; ++i) {
    records += "{\"prompt\": \"p" + std::to_string(i) + "\", \"completion\": \"c\"}\n";
  }
  write_text(dir.file("sft.jsonl"), records);
  ByteTokenizer tokenizer;
  PrepareOptions options;
  options.prompt_completion = true;
  prepare_corpus({dir.file("sft.jsonl")}, dir.file("sft"), tokenizer, options);
  write_text(dir.file("plain.txt"), "plain text, no prompts, no mask at all");
  prepare_corpus({dir.file("plain.txt")}, dir.file("plain"), tokenizer);
  DataConfig data;
  data.source = DataSource::shards;
  data.path = dir.file("sft");
  data.loss_mask = LossMask::completion;
  data.eval_fraction = 0;
  ModelConfig model;
  model.vocab_size = 256;
  model.seq_len = 8;
  auto dataset = TokenDataset::open(data, model, 7);
  ASSERT_TRUE(dataset->has_loss_mask());
  const TokenStream stream = load_token_shards(dir.file("sft"));
  const at::Tensor rows = dataset->rows(Split::Train, 3, 0, 5, 8);
  const at::Tensor mask = dataset->loss_mask_rows(Split::Train, 3, 0, 5, 8);
  ASSERT_EQ(mask.sizes(), (at::IntArrayRef{5, 8}));
  int64_t carried = 0;
  for (int64_t r = 0; r < 5; ++r) {
    // Find the row's start in the stream by its tokens, then compare the targets' mask.
    std::vector<int32_t> row(9);
    for (int64_t j = 0; j < 9; ++j) row[j] = static_cast<int32_t>(rows[r][j].item<int64_t>());
    const auto at = std::search(stream.tokens.begin(), stream.tokens.end(), row.begin(), row.end());
    ASSERT_NE(at, stream.tokens.end());
    const auto start = static_cast<size_t>(at - stream.tokens.begin());
    for (int64_t j = 0; j < 8; ++j) {
      EXPECT_EQ(mask[r][j].item<int64_t>(), stream.loss_mask[start + 1 + j]) << r << "," << j;
      carried += stream.loss_mask[start + 1 + j];
    }
  }
  EXPECT_EQ(dataset->loss_tokens(Split::Train, 3, 5, 8), carried);

  data.loss_mask = LossMask::none;
  auto unmasked = TokenDataset::open(data, model, 7);
  EXPECT_FALSE(unmasked->has_loss_mask());
  EXPECT_EQ(unmasked->loss_tokens(Split::Train, 3, 5, 8), 40);

  data.path = dir.file("plain");
  data.loss_mask = LossMask::completion;
  data.tokenizer = "byte";
  expect_user_error([&] { TokenDataset::open(data, model, 7); },
                    {"data.loss_mask = \"completion\"", "--prompt-completion"});
}

}  // namespace
}  // namespace strata
