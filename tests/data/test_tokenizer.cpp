// The byte tokenizer round-trips any bytes, decodes any ids without failing, and unknown
// tokenizer names are refused with the list of allowed ones.
#include <gtest/gtest.h>

#include "expect_error.h"
#include "strata/data/tokenizer.h"

namespace strata {
namespace {

using testing::expect_user_error;

TEST(ByteTokenizer, RoundTripsAscii) {
  ByteTokenizer tokenizer;
  std::string text = "Hello, world!\n\tThe end.";
  std::vector<int32_t> ids = tokenizer.encode(text);
  ASSERT_EQ(ids.size(), text.size());
  EXPECT_EQ(ids[0], 'H');
  EXPECT_EQ(tokenizer.decode(ids), text);
  EXPECT_TRUE(tokenizer.encode("").empty());
  EXPECT_EQ(tokenizer.decode(std::vector<int64_t>{}), "");
}

TEST(ByteTokenizer, RoundTripsNonAsciiAsUtf8Bytes) {
  ByteTokenizer tokenizer;
  std::string text = "h\xC3\xA9llo w\xC3\xB6rld \xE6\x97\xA5\xE6\x9C\xAC \xF0\x9F\x99\x82";
  std::vector<int32_t> ids = tokenizer.encode(text);
  ASSERT_EQ(ids.size(), text.size());
  EXPECT_EQ(ids[1], 0xC3);
  EXPECT_EQ(ids[2], 0xA9);
  std::vector<int64_t> wide(ids.begin(), ids.end());
  EXPECT_EQ(tokenizer.decode(wide), text);
}

TEST(ByteTokenizer, RoundTripsEveryByteValue) {
  ByteTokenizer tokenizer;
  std::string all;
  for (int b = 0; b < 256; ++b) all.push_back(static_cast<char>(b));
  std::vector<int32_t> ids = tokenizer.encode(all);
  for (int b = 0; b < 256; ++b) ASSERT_EQ(ids[b], b) << "byte " << b;
  EXPECT_EQ(tokenizer.decode(ids), all);
}

TEST(ByteTokenizer, DecodeNeverFails) {
  ByteTokenizer tokenizer;
  // The first two bytes of a 3-byte character come back as those raw bytes.
  EXPECT_EQ(tokenizer.decode(std::vector<int64_t>{'a', 0xE6, 0x97}), "a\xE6\x97");
  // Ids outside the vocabulary become U+FFFD.
  EXPECT_EQ(tokenizer.decode(std::vector<int64_t>{'x', 256, -1, 'y', 1 << 20}),
            "x\xEF\xBF\xBD\xEF\xBF\xBDy\xEF\xBF\xBD");
}

TEST(MakeTokenizer, BuildsTheByteTokenizer) {
  auto tokenizer = make_tokenizer("byte");
  EXPECT_EQ(tokenizer->name(), "byte");
  EXPECT_EQ(tokenizer->vocab_size(), 256);
  EXPECT_EQ(available_tokenizers(), std::vector<std::string>{"byte"});
}

TEST(MakeTokenizer, RefusesUnknownNamesListingTheAllowedOnes) {
  EXPECT_EQ(testing::user_error([] { make_tokenizer("bpe"); }),
            "data.tokenizer = \"bpe\" is not available; allowed: byte, or a directory holding "
            "tokenizer.json, vocab.json + merges.txt or tokenizer.model");
  expect_user_error([] { make_tokenizer(""); }, {"data.tokenizer = \"\"", "allowed: byte"});
}

}  // namespace
}  // namespace strata
