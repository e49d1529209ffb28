// Token shards: exact bytes on disk, round trips in both dtypes, atomic writes, and a
// UserError naming the file and the defect for every kind of corruption.
#include <gtest/gtest.h>

#include <filesystem>

#include "data_test_helpers.h"
#include "expect_error.h"
#include "strata/data/token_shard.h"
#include "test_support.h"

namespace strata {
namespace {

using testing::expect_user_error;
using testing::read_bytes;
using testing::TempDir;
using testing::write_text;

uint64_t little_endian(const std::string& bytes, size_t offset, size_t width) {
  uint64_t value = 0;
  for (size_t i = 0; i < width; ++i) {
    value |= static_cast<uint64_t>(static_cast<unsigned char>(bytes[offset + i])) << (8 * i);
  }
  return value;
}

TEST(TokenShard, HeaderAndPayloadAreLaidOutAsDocumented) {
  TempDir dir;
  std::string path = dir.file("a.tok");
  write_token_shard(path, std::vector<int32_t>{1, 258, 65535}, "byte", 65536);
  std::string bytes = read_bytes(path);
  ASSERT_EQ(bytes.size(), kShardHeaderBytes + 3 * 2 + 8);
  EXPECT_EQ(bytes.substr(0, 8), std::string("STRATOK\0", 8));
  EXPECT_EQ(little_endian(bytes, 8, 4), 2u);   // version
  EXPECT_EQ(little_endian(bytes, 12, 4), 1u);  // dtype: uint16
  EXPECT_EQ(little_endian(bytes, 16, 8), 3u);  // token count
  EXPECT_EQ(bytes.substr(24, 5), std::string("byte\0", 5));
  EXPECT_EQ(bytes.substr(29, 35), std::string(35, '\0'));  // name padding + reserved
  EXPECT_EQ(little_endian(bytes, 64, 2), 1u);
  EXPECT_EQ(little_endian(bytes, 66, 2), 258u);
  EXPECT_EQ(little_endian(bytes, 68, 2), 65535u);
  EXPECT_EQ(little_endian(bytes, 70, 8), 0u);  // no document starts
}

TEST(TokenShard, DocumentStartsAndTheLossMaskFollowTheIds) {
  TempDir dir;
  std::string path = dir.file("a.tok");
  const std::vector<int32_t> tokens = {7, 8, 9, 10, 11};
  const std::vector<int64_t> starts = {1, 4};
  const std::vector<uint8_t> mask = {0, 0, 1, 1, 0};
  write_token_shard(path, ShardContents{tokens.data(), 5, starts.data(), 2, mask.data()}, "byte",
                    256);
  std::string bytes = read_bytes(path);
  ASSERT_EQ(bytes.size(), kShardHeaderBytes + 5 * 2 + 8 + 2 * 8 + 5);
  EXPECT_EQ(little_endian(bytes, 56, 4), 1u);  // flags: a loss mask follows
  EXPECT_EQ(little_endian(bytes, 74, 8), 2u);  // two document starts
  EXPECT_EQ(little_endian(bytes, 82, 8), 1u);
  EXPECT_EQ(little_endian(bytes, 90, 8), 4u);
  EXPECT_EQ(bytes.substr(98), std::string("\0\0\1\1\0", 5));
  TokenShard shard = read_token_shard(path);
  EXPECT_EQ(shard.version, 2u);
  EXPECT_EQ(shard.tokens, tokens);
  EXPECT_EQ(shard.document_starts, starts);
  EXPECT_EQ(shard.loss_mask, mask);
}

TEST(TokenShard, LongTokenizerNamesAreStoredAsAHash) {
  TempDir dir;
  const std::string long_name = "/models/some/rather/long/path/to/gpt2";
  EXPECT_EQ(shard_tokenizer_label("byte"), "byte");
  const std::string label = shard_tokenizer_label(long_name);
  EXPECT_EQ(label.size(), 17u);
  EXPECT_EQ(label[0], '#');
  EXPECT_NE(label, shard_tokenizer_label(long_name + "2"));
  EXPECT_EQ(shard_tokenizer_label(label), label);
  write_token_shard(dir.file("s.tok"), std::vector<int32_t>{1}, long_name, 50257);
  EXPECT_EQ(read_token_shard(dir.file("s.tok")).tokenizer, label);
}

TEST(TokenShard, ReadsVersionOneShardsWithoutBoundaries) {
  TempDir dir;
  std::string bytes(kShardHeaderBytes, '\0');
  bytes.replace(0, 8, std::string("STRATOK\0", 8));
  bytes[8] = 1;   // version 1
  bytes[12] = 1;  // uint16
  bytes[16] = 2;  // two tokens
  bytes.replace(24, 4, "byte");
  bytes += std::string("\x05\0\x06\0", 4);
  write_text(dir.file("v1.tok"), bytes);
  TokenShard shard = read_token_shard(dir.file("v1.tok"));
  EXPECT_EQ(shard.version, 1u);
  EXPECT_EQ(shard.tokens, (std::vector<int32_t>{5, 6}));
  EXPECT_TRUE(shard.document_starts.empty());
  EXPECT_TRUE(shard.loss_mask.empty());
}

TEST(TokenShard, RoundTripsUint16) {
  TempDir dir;
  std::vector<int32_t> tokens;
  for (int32_t i = 0; i < 1000; ++i) tokens.push_back((i * 37) % 256);
  write_token_shard(dir.file("s.tok"), tokens, "byte", 256);
  TokenShard shard = read_token_shard(dir.file("s.tok"));
  EXPECT_EQ(shard.dtype, ShardDtype::UInt16);
  EXPECT_EQ(shard.tokenizer, "byte");
  EXPECT_EQ(shard.tokens, tokens);

  write_token_shard(dir.file("empty.tok"), std::vector<int32_t>{}, "byte", 256);
  EXPECT_TRUE(read_token_shard(dir.file("empty.tok")).tokens.empty());
}

TEST(TokenShard, RoundTripsUint32ForLargeVocabularies) {
  TempDir dir;
  std::vector<int32_t> tokens = {0, 65535, 65536, 99999, 7};
  write_token_shard(dir.file("s.tok"), tokens, "wide", 100000);
  EXPECT_EQ(read_bytes(dir.file("s.tok")).size(), kShardHeaderBytes + 5 * 4 + 8);
  TokenShard shard = read_token_shard(dir.file("s.tok"));
  EXPECT_EQ(shard.dtype, ShardDtype::UInt32);
  EXPECT_EQ(shard.tokenizer, "wide");
  EXPECT_EQ(shard.tokens, tokens);
}

TEST(TokenShard, DtypeIsTheNarrowestThatHoldsTheVocabulary) {
  EXPECT_EQ(shard_dtype_for_vocab(1), ShardDtype::UInt16);
  EXPECT_EQ(shard_dtype_for_vocab(65536), ShardDtype::UInt16);
  EXPECT_EQ(shard_dtype_for_vocab(65537), ShardDtype::UInt32);
}

TEST(TokenShard, WriteReplacesAnExistingFileAndLeavesNoTemporaries) {
  TempDir dir;
  write_token_shard(dir.file("s.tok"), std::vector<int32_t>{1, 2, 3}, "byte", 256);
  write_token_shard(dir.file("s.tok"), std::vector<int32_t>{4}, "byte", 256);
  EXPECT_EQ(read_token_shard(dir.file("s.tok")).tokens, std::vector<int32_t>{4});
  int files = 0;
  for (const auto& entry : std::filesystem::directory_iterator(dir.path())) {
    EXPECT_EQ(entry.path().filename(), "s.tok");
    ++files;
  }
  EXPECT_EQ(files, 1);
}

TEST(TokenShard, WriteIntoAMissingDirectoryIsAUserError) {
  TempDir dir;
  expect_user_error(
      [&] { write_token_shard(dir.file("no/such/s.tok"), std::vector<int32_t>{1}, "byte", 256); },
      {"no/such/s.tok"});
}

// One kind of damage done to the bytes of a valid 4-token shard (no document starts), and the words
// the refusal must contain besides the file's path.
struct Corruption {
  const char* name;
  std::function<void(std::string&)> corrupt;
  const char* defect;
};

TEST(TokenShard, EveryKindOfCorruptionIsRefusedNamingTheFileAndTheDefect) {
  const std::vector<Corruption> corruptions = {
      {"short header", [](std::string& b) { b.resize(10); }, "is truncated: 10 bytes"},
      {"bad magic", [](std::string& b) { b[0] = 'X'; }, "bad magic"},
      {"unknown version", [](std::string& b) { b[8] = 3; }, "format version 3"},
      {"unknown flags", [](std::string& b) { b[56] = 6; }, "unknown header flags 6"},
      {"unknown dtype", [](std::string& b) { b[12] = 7; }, "unknown dtype code 7"},
      {"unterminated name", [](std::string& b) { std::fill(b.begin() + 24, b.begin() + 56, 'z'); },
       "tokenizer name"},
      {"empty name", [](std::string& b) { std::fill(b.begin() + 24, b.begin() + 56, '\0'); },
       "tokenizer name"},
      {"truncated ids", [](std::string& b) { b.resize(kShardHeaderBytes + 7); },
       "is truncated: the header says 4 tokens"},
      {"missing index", [](std::string& b) { b.resize(b.size() - 1); },
       "its document index is missing"},
      {"huge index", [](std::string& b) { b[kShardHeaderBytes + 8] = 3; },
       "lists 3 document starts"},
      {"start outside",
       [](std::string& b) {
         b += std::string("\x09\0\0\0\0\0\0\0", 8);
         b[kShardHeaderBytes + 8] = 1;
       },
       "document start 9"},
      {"mask flag without mask", [](std::string& b) { b[56] = 1; }, "is truncated: 16 bytes"},
      {"mask entry 2",
       [](std::string& b) {
         b[56] = 1;
         b += std::string("\0\2\0\0", 4);
       },
       "loss mask entry 2 at position 1"},
      {"huge token count", [](std::string& b) { b[23] = '\x7f'; }, "is truncated"},
      {"trailing bytes", [](std::string& b) { b += "xyz"; }, "3 unexpected bytes"},
  };
  for (const auto& corruption : corruptions) {
    SCOPED_TRACE(corruption.name);
    TempDir dir;
    std::string path = dir.file("bad.tok");
    write_token_shard(path, std::vector<int32_t>{10, 20, 30, 40}, "byte", 256);
    std::string bytes = read_bytes(path);
    corruption.corrupt(bytes);
    write_text(path, bytes);
    expect_user_error([&] { read_token_shard(path); }, {"token shard " + path, corruption.defect});
  }
  TempDir dir;
  expect_user_error([&] { read_token_shard(dir.file("absent.tok")); },
                    {"token shard " + dir.file("absent.tok"), "No such file"});
  expect_user_error([&] { read_token_shard(dir.path()); }, {dir.path(), "is a directory"});
}

}  // namespace
}  // namespace strata
