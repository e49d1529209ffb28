// SentencePiece models trained at test time with Debian's spm_train (BPE with byte fallback and
// no normalization, as Llama 2's; and the default unigram) and loaded from a directory's
// tokenizer.model: the ids equal spm_encode's line by line, text round-trips, ids outside the
// vocabulary decode to U+FFFD, and a file that is not a model is refused naming it.
#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>
#include <sstream>
#include <thread>

#include "expect_error.h"
#include "strata/data/tokenizer.h"
#include "test_support.h"
#include "tokenizer_corpus.h"

namespace strata {
namespace {

using Ids = std::vector<int32_t>;

// The corpus split into lines without carriage returns (spm_encode reads one line at a time).
std::vector<std::string> corpus_lines() {
  std::vector<std::string> lines;
  for (const auto& document : testing::tokenizer_corpus()) {
    std::istringstream in(document);
    std::string line;
    while (std::getline(in, line)) {
      line.erase(std::remove(line.begin(), line.end(), '\r'), line.end());
      if (!line.empty()) lines.push_back(line);
    }
  }
  return lines;
}

std::string joined(const std::vector<std::string>& lines, size_t count) {
  std::string text;
  for (size_t i = 0; i < std::min(count, lines.size()); ++i) text += lines[i] + "\n";
  return text;
}

// Two models trained once per process on the first part of the corpus, in directories of
// their own (as tokenizer.model), and the ids spm_encode gives for every line.
struct Models {
  testing::TempDir dir{"strata-sentencepiece"};
  std::vector<std::string> lines = corpus_lines();
  std::string bpe_dir = dir.file("bpe"), unigram_dir = dir.file("unigram");
  std::vector<Ids> bpe_ids, unigram_ids;

  Models() {
    testing::write_bytes(dir.file("train.txt"), joined(lines, 6000));
    testing::write_bytes(dir.file("lines.txt"), joined(lines, lines.size()));
    train(bpe_dir,
          "--model_type=bpe --byte_fallback=true --normalization_rule_name=identity "
          "--remove_extra_whitespaces=false --vocab_size=800");
    train(unigram_dir, "--vocab_size=800");
    bpe_ids = spm_encode(bpe_dir);
    unigram_ids = spm_encode(unigram_dir);
  }

  void train(const std::string& out, const std::string& options) {
    std::filesystem::create_directories(out);
    std::string output;
    int status = testing::run_command("spm_train --input=" + dir.file("train.txt") +
                                          " --model_prefix=" + out + "/tokenizer " + options +
                                          " --character_coverage=1.0 --num_threads=2 "
                                          "--minloglevel=2 2>&1",
                                      &output);
    EXPECT_EQ(status, 0) << "spm_train (Debian package sentencepiece) failed:\n" << output;
  }

  std::vector<Ids> spm_encode(const std::string& model_dir) {
    std::string output;
    int status = testing::run_command("spm_encode --model=" + model_dir +
                                          "/tokenizer.model --output_format=id < " +
                                          dir.file("lines.txt") + " > " + dir.file("ids.txt"),
                                      &output);
    EXPECT_EQ(status, 0) << "spm_encode failed:\n" << output;
    std::vector<Ids> ids;
    std::istringstream in(testing::read_bytes(dir.file("ids.txt")));
    std::string line;
    while (std::getline(in, line)) {
      std::istringstream numbers(line);
      Ids line_ids;
      for (int32_t id; numbers >> id;) line_ids.push_back(id);
      ids.push_back(line_ids);
    }
    return ids;
  }
};

const Models& models() {
  static const Models made;
  return made;
}

void expect_spm_encode_ids(const Tokenizer& tokenizer, const std::vector<std::string>& lines,
                           const std::vector<Ids>& expected) {
  ASSERT_EQ(expected.size(), lines.size());
  int differing = 0;
  for (size_t i = 0; i < lines.size(); ++i) {
    if (tokenizer.encode(lines[i]) == expected[i]) continue;
    if (++differing <= 3) ADD_FAILURE() << "line " << i << " differs: " << lines[i];
  }
  EXPECT_EQ(differing, 0) << "of " << lines.size() << " lines";
}

TEST(SentencePieceTokenizer, GivesSpmEncodesIds) {
  const Models& m = models();
  ASSERT_GE(m.lines.size(), 10000u);
  auto bpe = load_tokenizer(m.bpe_dir);
  EXPECT_EQ(bpe->vocab_size(), 800);
  expect_spm_encode_ids(*bpe, m.lines, m.bpe_ids);
  expect_spm_encode_ids(*load_tokenizer(m.unigram_dir), m.lines, m.unigram_ids);
}

TEST(SentencePieceTokenizer, RoundTripsTextWithByteFallbackAndNoNormalization) {
  auto bpe = load_tokenizer(models().bpe_dir);
  for (const auto& line : models().lines) ASSERT_EQ(bpe->decode(bpe->encode(line)), line);
  for (const auto& text : testing::random_utf8_strings(500, 11)) {
    if (text.empty() || text.front() == ' ') continue;  // the dummy prefix eats a leading space
    ASSERT_EQ(bpe->decode(bpe->encode(text)), text);
  }
}

TEST(SentencePieceTokenizer, NamesItsSpecialTokensAndDecodesAnyId) {
  auto bpe = load_tokenizer(models().bpe_dir);
  EXPECT_EQ(bpe->begin_of_text_id(), 1);  // spm_train's defaults: <unk> 0, <s> 1, </s> 2
  EXPECT_EQ(bpe->end_of_text_id(), 2);
  Ids hello = bpe->encode("hello");
  Ids with_bad = hello;
  with_bad.insert(with_bad.begin(), -5);
  with_bad.push_back(800);
  EXPECT_EQ(bpe->decode(with_bad), "\xEF\xBF\xBDhello\xEF\xBF\xBD");
  // A byte-fallback piece of half a character decodes to U+FFFD.
  Ids snowman = bpe->encode("\xE2\x98\x83");
  ASSERT_GE(snowman.size(), 2u);
  EXPECT_EQ(bpe->decode(Ids(snowman.begin(), snowman.end() - 1)).find("\xE2\x98"),
            std::string::npos);
}

TEST(SentencePieceTokenizer, EncodesFromSeveralThreadsAtOnceAsFromOne) {
  auto unigram = load_tokenizer(models().unigram_dir);
  const auto& lines = models().lines;
  std::vector<std::vector<Ids>> got(4, std::vector<Ids>(lines.size()));
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&, t] {
      for (size_t i = 0; i < lines.size(); ++i) got[t][i] = unigram->encode(lines[i]);
    });
  }
  for (auto& thread : threads) thread.join();
  for (int t = 0; t < 4; ++t) EXPECT_TRUE(got[t] == models().unigram_ids) << "thread " << t;
}

TEST(SentencePieceTokenizer, IsChosenOverAConvertedTokenizerJson) {
  testing::TempDir dir;
  std::filesystem::copy_file(models().bpe_dir + "/tokenizer.model", dir.file("tokenizer.model"));
  // transformers' conversion of a SentencePiece model: a Metaspace pre-tokenizer, no ByteLevel.
  testing::write_bytes(dir.file("tokenizer.json"),
                       R"({"pre_tokenizer": {"type": "Metaspace"}, "model": {"type": "BPE"}})");
  auto tokenizer = load_tokenizer(dir.path());
  EXPECT_EQ(tokenizer->encode("hello"), load_tokenizer(models().bpe_dir)->encode("hello"));
}

TEST(SentencePieceTokenizer, RefusesAFileThatIsNotAModelNamingIt) {
  testing::TempDir dir;
  testing::write_bytes(dir.file("tokenizer.model"), "not a model");
  testing::expect_user_error([&] { load_tokenizer(dir.path()); },
                             {dir.file("tokenizer.model"), "is not a SentencePiece model"});
}

}  // namespace
}  // namespace strata
