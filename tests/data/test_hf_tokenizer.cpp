// The tokenizer.json loader on tiny files: merge order, ignore_merges, the split behaviours,
// add_prefix_space, added tokens with lstrip/rstrip, the end-of-text token from
// tokenizer_config.json, which file a directory's tokenizer comes from, and a UserError naming
// the file and key for everything strata does not read.
#include <gtest/gtest.h>

#include <filesystem>

#include "expect_error.h"
#include "strata/data/hf_tokenizer.h"
#include "strata/data/tokenizer.h"
#include "tiny_tokenizer.h"

namespace strata {
namespace {

using Ids = std::vector<int32_t>;
using nlohmann::json;
using namespace testing;

class TinyTokenizer : public ::testing::Test {
 protected:
  // Writes `file` (tokenizer.json) into the directory and loads the directory.
  std::unique_ptr<Tokenizer> load(const json& file) {
    write_json(dir_.file("tokenizer.json"), file);
    return load_tokenizer(dir_.path());
  }
  std::string load_error(const json& file) {
    write_json(dir_.file("tokenizer.json"), file);
    return user_error([&] { load_tokenizer(dir_.path()); });
  }
  TempDir dir_;
};

TEST_F(TinyTokenizer, MergesInRankOrder) {
  auto tokenizer = load(tiny_tokenizer_json());
  EXPECT_EQ(tokenizer->encode("hello"), (Ids{kHello}));
  EXPECT_EQ(tokenizer->encode("hell"), (Ids{kHell}));
  EXPECT_EQ(tokenizer->encode("ell"), (Ids{'e', kLl}));  // "l l" outranks "e l"
  EXPECT_EQ(tokenizer->encode("el"), (Ids{kEl}));
  EXPECT_EQ(tokenizer->encode("hello hello"), (Ids{kHello, ' ', kHello}));
  EXPECT_EQ(tokenizer->decode(Ids{kHello, ' ', kEl}), "hello el");
  EXPECT_EQ(tokenizer->vocab_size(), 262);
  EXPECT_EQ(tokenizer->name(), dir_.path());
  EXPECT_EQ(tokenizer->end_of_text_id(), std::nullopt);
}

TEST_F(TinyTokenizer, IgnoreMergesTakesAWholePieceThatIsAToken) {
  EXPECT_EQ(load(tiny_tokenizer_json())->encode("xyz"), (Ids{'x', 'y', 'z'}));
  json file = tiny_tokenizer_json();
  file["model"]["ignore_merges"] = true;
  EXPECT_EQ(load(file)->encode("xyz"), (Ids{kXyz}));
}

TEST_F(TinyTokenizer, SplitRemovedDropsTheDelimiters) {
  json file = tiny_tokenizer_json();
  json byte_level = {{"type", "ByteLevel"}, {"add_prefix_space", false}, {"use_regex", false}};
  file["pre_tokenizer"] = {
      {"type", "Sequence"},
      {"pretokenizers",
       {{{"type", "Split"}, {"pattern", {{"String", "-"}}}, {"behavior", "Removed"}}, byte_level}}};
  EXPECT_EQ(load(file)->encode("he-llo"), (Ids{kHe, kLl, 'o'}));
  // Inverted, the pattern's matches are the pieces and everything else is dropped.
  file["pre_tokenizer"]["pretokenizers"][0] = {{"type", "Split"},
                                               {"pattern", {{"Regex", "\\p{L}+"}}},
                                               {"behavior", "Removed"},
                                               {"invert", true}};
  EXPECT_EQ(load(file)->encode("hell, 42 o!"), (Ids{kHell, 'o'}));
  // Isolated keeps both, each a piece of its own: "hell" and "o" do not merge across.
  file["pre_tokenizer"]["pretokenizers"][0]["behavior"] = "Isolated";
  EXPECT_EQ(load(file)->encode("hell-o"), (Ids{kHell, '-', 'o'}));
}

TEST_F(TinyTokenizer, AddPrefixSpaceStartsThePieceWithASpace) {
  json file = tiny_tokenizer_json();
  file["pre_tokenizer"]["add_prefix_space"] = true;
  auto tokenizer = load(file);
  EXPECT_EQ(tokenizer->encode("hello"), (Ids{' ', kHello}));
  EXPECT_EQ(tokenizer->encode(" hello"), (Ids{' ', kHello}));
}

TEST_F(TinyTokenizer, AddedTokensMatchFirstAndStripWhitespaceWhenAsked) {
  json file = tiny_tokenizer_json();
  file["added_tokens"] = {
      {{"id", 300}, {"content", "<m>"}, {"special", true}, {"lstrip", true}, {"rstrip", true}},
      {{"id", 301}, {"content", "<|end|>"}, {"special", true}},
      {{"id", 302}, {"content", "<|end|>x"}, {"special", false}}};
  auto tokenizer = load(file);
  EXPECT_EQ(tokenizer->encode("he  <m>  ll"), (Ids{kHe, 300, kLl}));
  // The longest added token at the leftmost position wins; none is split by BPE.
  EXPECT_EQ(tokenizer->encode("<|end|>xhe<|end|>"), (Ids{302, kHe, 301}));
  EXPECT_EQ(tokenizer->vocab_size(), 303);
  EXPECT_EQ(tokenizer->decode(Ids{301, 299, kHe}), "<|end|>\xEF\xBF\xBDhe");
  // <|end|> is not one of the end-of-text names, and no tokenizer_config.json names it.
  EXPECT_EQ(tokenizer->end_of_text_id(), std::nullopt);
  write_json(dir_.file("tokenizer_config.json"),
             {{"eos_token", {{"content", "<|end|>"}}}, {"bos_token", "he"}});
  tokenizer = load_tokenizer(dir_.path());
  EXPECT_EQ(tokenizer->end_of_text_id(), 301);
  EXPECT_EQ(tokenizer->begin_of_text_id(), kHe);
  write_json(dir_.file("tokenizer_config.json"), {{"eos_token", "</s>"}});
  expect_user_error([&] { load_tokenizer(dir_.path()); },
                    {"tokenizer_config.json: eos_token = \"</s>\" is not a token"});
}

TEST_F(TinyTokenizer, RefusesWhatItDoesNotReadNamingTheKey) {
  auto with = [](const std::string& pointer, const json& value) {
    json file = tiny_tokenizer_json();
    file[json::json_pointer(pointer)] = value;
    return file;
  };
  EXPECT_TRUE(contains(load_error(with("/model/type", "WordPiece")),
                       "tokenizer.json: model.type = \"WordPiece\" is not supported"));
  EXPECT_TRUE(contains(load_error(with("/pre_tokenizer", {{"type", "Metaspace"}})),
                       "pre_tokenizer.type = \"Metaspace\" is not supported"));
  EXPECT_TRUE(contains(load_error(with("/normalizer", {{"type", "NFKC"}})),
                       "normalizer.type = \"NFKC\" is not supported"));
  EXPECT_TRUE(contains(load_error(with("/decoder", {{"type", "WordPiece"}})),
                       "decoder.type = \"WordPiece\" is not supported"));
  json split = {{"type", "Split"}, {"pattern", {{"Regex", "a"}}}, {"behavior", "Contiguous"}};
  EXPECT_TRUE(contains(load_error(with("/pre_tokenizer", split)),
                       "pre_tokenizer.behavior = \"Contiguous\" is not supported"));
  split["behavior"] = "Isolated";
  split["pattern"]["Regex"] = "(unclosed";
  EXPECT_TRUE(contains(load_error(with("/pre_tokenizer", split)),
                       "pre_tokenizer.pattern.Regex = \"(unclosed\" is not a regular expression"));
  EXPECT_TRUE(contains(load_error(with("/model/merges/0", "l q")),
                       "merge 1 (\"l q\") names a token that is not in the vocabulary"));
  EXPECT_TRUE(
      contains(load_error(with("/model/vocab/\xE2\x96\x81the", 262)), "is not a byte-level token"));
  EXPECT_TRUE(
      contains(load_error(with("/model/byte_fallback", true)), "model.byte_fallback = true"));
  EXPECT_TRUE(contains(
      load_error(with("/added_tokens", {{{"id", 300}, {"content", "x"}, {"single_word", true}}})),
      "added_tokens[0].single_word = true (\"x\") is not supported"));
  json missing_byte = tiny_tokenizer_json();
  missing_byte["model"]["vocab"].erase("a");
  EXPECT_TRUE(contains(load_error(missing_byte), "has no token for byte 0x61"));
}

TEST_F(TinyTokenizer, NamesTheFileThatCannotBeRead) {
  write_bytes(dir_.file("tokenizer.json"), "{\"model\": ");
  expect_user_error([&] { load_tokenizer(dir_.path()); },
                    {dir_.file("tokenizer.json"), "is not valid JSON"});
  expect_user_error([&] { read_tokenizer_file(dir_.file("absent.json")); },
                    {"cannot read tokenizer file " + dir_.file("absent.json")});
  TempDir empty;
  expect_user_error([&] { load_tokenizer(empty.path()); },
                    {"the tokenizer directory " + empty.path(), "holds none of tokenizer.json"});
}

TEST_F(TinyTokenizer, MakeTokenizerLoadsADirectory) {
  write_json(dir_.file("tokenizer.json"), tiny_tokenizer_json());
  auto tokenizer = make_tokenizer(dir_.path());
  EXPECT_EQ(tokenizer->name(), dir_.path());
  EXPECT_EQ(tokenizer->encode("hello"), (Ids{kHello}));
}

TEST_F(TinyTokenizer, ReadsVocabJsonAndMergesTxt) {
  json file = tiny_tokenizer_json();
  write_json(dir_.file("vocab.json"), file["model"]["vocab"]);
  std::string merges = "#version: 0.2\n";
  for (const auto& merge : file["model"]["merges"]) merges += merge.get<std::string>() + "\n";
  write_bytes(dir_.file("merges.txt"), merges);
  auto tokenizer = load_tokenizer(dir_.path());
  EXPECT_EQ(tokenizer->encode("hello ell"), (Ids{kHello, ' ', 'e', kLl}));
  write_bytes(dir_.file("merges.txt"), merges + "x\n");
  expect_user_error([&] { load_tokenizer(dir_.path()); },
                    {dir_.file("merges.txt"), "is not two tokens separated by a space"});
}

}  // namespace
}  // namespace strata
