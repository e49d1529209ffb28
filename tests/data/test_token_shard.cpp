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
  ASSERT_EQ(bytes.size(), kShardHeaderBytes + 3 * 2);
  EXPECT_EQ(bytes.substr(0, 8), std::string("STRATOK\0", 8));
  EXPECT_EQ(little_endian(bytes, 8, 4), 1u);   // version
  EXPECT_EQ(little_endian(bytes, 12, 4), 1u);  // dtype: uint16
  EXPECT_EQ(little_endian(bytes, 16, 8), 3u);  // token count
  EXPECT_EQ(bytes.substr(24, 5), std::string("byte\0", 5));
  EXPECT_EQ(bytes.substr(29, 35), std::string(35, '\0'));  // name padding + reserved
  EXPECT_EQ(little_endian(bytes, 64, 2), 1u);
  EXPECT_EQ(little_endian(bytes, 66, 2), 258u);
  EXPECT_EQ(little_endian(bytes, 68, 2), 65535u);
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
  EXPECT_EQ(read_bytes(dir.file("s.tok")).size(), kShardHeaderBytes + 5 * 4);
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

// One kind of damage done to the bytes of a valid 4-token shard, and the words the refusal
// must contain besides the file's path.
struct Corruption {
  const char* name;
  std::function<void(std::string&)> corrupt;
  const char* defect;
};

TEST(TokenShard, EveryKindOfCorruptionIsRefusedNamingTheFileAndTheDefect) {
  const std::vector<Corruption> corruptions = {
      {"short header", [](std::string& b) { b.resize(10); }, "is truncated: 10 bytes"},
      {"bad magic", [](std::string& b) { b[0] = 'X'; }, "bad magic"},
      {"unknown version", [](std::string& b) { b[8] = 2; }, "format version 2"},
      {"unknown dtype", [](std::string& b) { b[12] = 7; }, "unknown dtype code 7"},
      {"unterminated name", [](std::string& b) { std::fill(b.begin() + 24, b.begin() + 56, 'z'); },
       "tokenizer name"},
      {"empty name", [](std::string& b) { std::fill(b.begin() + 24, b.begin() + 56, '\0'); },
       "tokenizer name"},
      {"truncated payload", [](std::string& b) { b.resize(b.size() - 1); },
       "is truncated: the header says 4 tokens"},
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
