// Resuming an interrupted preparation: a run killed (SIGKILL, in a child process) after some
// shards leaves only complete, recorded shards and progress.json; running again continues
// after the last recorded shard and ends byte for byte equal to an uninterrupted run. A
// directory of other inputs or options is refused, and an unfinished one does not load.
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <csignal>
#include <filesystem>
#include <map>

#include "data_test_helpers.h"
#include "expect_error.h"
#include "strata/data/prepare.h"
#include "test_support.h"

namespace fs = std::filesystem;

namespace strata {
namespace {

using testing::expect_user_error;
using testing::read_bytes;
using testing::TempDir;
using testing::write_text;

std::map<std::string, std::string> directory_bytes(const std::string& dir) {
  std::map<std::string, std::string> files;
  for (const auto& entry : fs::directory_iterator(dir)) {
    files[entry.path().filename().string()] = read_bytes(entry.path().string());
  }
  return files;
}

// Documents of uneven length (so that shards end inside documents), prompt/completion
// records so that the mask is resumed too.
struct Inputs {
  TempDir dir{"strata-resume"};
  std::vector<std::string> paths = {dir.file("a.jsonl"), dir.file("b.jsonl"), dir.file("c.jsonl")};
  PrepareOptions options;
  Inputs() {
    std::string a, c;
    for (int i = 0; i < 300; ++i) {
      const std::string word(static_cast<size_t>(1 + (i * 13) % 37),
                             static_cast<char>('a' + i % 26));
      a += "{\"prompt\": \"P" + std::to_string(i) + " \", \"completion\": \"" + word + "\"}\n";
      c += "{\"completion\": \"" + word + word + "\", \"prompt\": \"\"}\n";
    }
    write_text(paths[0], a);
    write_text(paths[1], "");
    write_text(paths[2], c);
    options.prompt_completion = true;
    options.max_shard_bytes = 1000;  // 500 tokens a shard: about 40 shards
    options.threads = 3;
  }
};

// Runs the preparation in a child process that kills itself after `shards` shards; expects
// the SIGKILL.
void prepare_killed_after(const Inputs& inputs, const std::string& out, int64_t shards) {
  const pid_t child = fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    PrepareOptions options = inputs.options;
    options.kill_after_shards = shards;
    ByteTokenizer tokenizer;
    try {
      prepare_corpus(inputs.paths, out, tokenizer, options);
    } catch (...) {
      _exit(3);
    }
    _exit(0);
  }
  int status = 0;
  ASSERT_EQ(waitpid(child, &status, 0), child);
  ASSERT_TRUE(WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL)
      << "the child should have killed itself after " << shards << " shards; status " << status;
}

TEST(PrepareResume, AnInterruptedRunContinuesToTheSameBytes) {
  Inputs inputs;
  ByteTokenizer tokenizer;
  const CorpusManifest whole =
      prepare_corpus(inputs.paths, inputs.dir.file("whole"), tokenizer, inputs.options);
  ASSERT_GT(whole.shards.size(), 20u);
  const auto expected = directory_bytes(inputs.dir.file("whole"));
  EXPECT_EQ(expected.count(kProgressName), 0u);

  const auto last = static_cast<int64_t>(whole.shards.size());
  for (int64_t killed_after : {int64_t{1}, int64_t{7}, last - 1, last}) {
    SCOPED_TRACE(killed_after);
    const std::string out = inputs.dir.file("resumed" + std::to_string(killed_after));
    prepare_killed_after(inputs, out, killed_after);
    EXPECT_TRUE(fs::exists(out + "/" + kProgressName));
    EXPECT_FALSE(fs::exists(out + "/" + kManifestName));
    expect_user_error([&] { load_token_shards(out); }, {"unfinished preparation"});
    // A stray temporary file and a shard past the last record (as a crash can leave them)
    // are dropped when the run continues.
    write_text(out + "/.shard-99999.tok.tmp", "half");
    write_text(out + "/shard-99999.tok", "unrecorded");

    const CorpusManifest resumed = prepare_corpus(inputs.paths, out, tokenizer, inputs.options);
    EXPECT_EQ(resumed.total_tokens, whole.total_tokens);
    EXPECT_TRUE(directory_bytes(out) == expected) << "the resumed directory differs";
  }
}

TEST(PrepareResume, OtherInputsOrOptionsAreRefused) {
  Inputs inputs;
  ByteTokenizer tokenizer;
  const std::string out = inputs.dir.file("out");
  prepare_killed_after(inputs, out, 3);

  PrepareOptions other = inputs.options;
  other.max_shard_bytes = 400;
  expect_user_error([&] { prepare_corpus(inputs.paths, out, tokenizer, other); },
                    {out, "interrupted preparation", "\"max_shard_bytes\"", "same inputs"});
  expect_user_error([&] { prepare_corpus({inputs.paths[0]}, out, tokenizer, inputs.options); },
                    {out, "\"inputs\""});
  write_text(inputs.paths[2], "{\"prompt\": \"\", \"completion\": \"edited\"}\n");
  expect_user_error([&] { prepare_corpus(inputs.paths, out, tokenizer, inputs.options); },
                    {out, "\"inputs\""});
  // The thread count is no part of what was asked: any count continues the run.
  PrepareOptions one_thread = inputs.options;
  one_thread.threads = 1;
  write_text(out + "/progress.json", "{ truncated");
  expect_user_error([&] { prepare_corpus(inputs.paths, out, tokenizer, one_thread); },
                    {"progress.json", "malformed"});
}

TEST(PrepareResume, TheThreadCountMayChangeBetweenRuns) {
  Inputs inputs;
  ByteTokenizer tokenizer;
  prepare_corpus(inputs.paths, inputs.dir.file("whole"), tokenizer, inputs.options);
  const std::string out = inputs.dir.file("out");
  prepare_killed_after(inputs, out, 5);
  PrepareOptions one_thread = inputs.options;
  one_thread.threads = 1;
  prepare_corpus(inputs.paths, out, tokenizer, one_thread);
  EXPECT_TRUE(directory_bytes(out) == directory_bytes(inputs.dir.file("whole")));
}

}  // namespace
}  // namespace strata
