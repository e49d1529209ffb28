// Chat fine-tuning data (`strata data prepare --chat`): JSON records of "messages" rendered by
// a chat template, with a loss mask on the assistant turns only. The expected renderings and
// spans are built here by string concatenation, independently of the template engine.
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <csignal>
#include <filesystem>
#include <map>

#include "data_test_helpers.h"
#include "expect_error.h"
#include "strata/data/chat_template.h"
#include "strata/data/prepare.h"
#include "test_support.h"

namespace fs = std::filesystem;

namespace strata {
namespace {

using testing::expect_user_error;
using testing::read_bytes;
using testing::TempDir;
using testing::write_text;

// ChatML, as Qwen's templates render it without tools.
constexpr const char* kChatMl =
    "{%- for message in messages %}"
    "{{- '<|im_start|>' + message['role'] + '\\n' + message['content'] + '<|im_end|>\\n' }}"
    "{%- endfor %}"
    "{%- if add_generation_prompt %}{{- '<|im_start|>assistant\\n' }}{%- endif %}";

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

struct Message {
  std::string role, content;
};
using Conversation = std::vector<Message>;

const std::vector<Conversation>& conversations() {
  static const std::vector<Conversation> all = {
      {{"system", "You are terse."},
       {"user", "2+2?"},
       {"assistant", "4"},
       {"user", "And 3+3?"},
       {"assistant", "6, of course."}},
      {{"user", "Grüß dich! Что это? 日本語"},
       {"assistant", "Ein Gruß ✓ — «привет» 🙂"}},
      // Ends with a user turn: the text after the last assistant turn carries no loss.
      {{"user", "Say \"hi\"\nthen stop."}, {"assistant", "hi"}, {"user", "thanks"}},
  };
  return all;
}

std::string json_record(const Conversation& conversation) {
  nlohmann::ordered_json messages = nlohmann::ordered_json::array();
  for (const auto& m : conversation) messages.push_back({{"role", m.role}, {"content", m.content}});
  return nlohmann::ordered_json{{"id", 7}, {"messages", messages}}.dump() + "\n";
}

// The ChatML rendering of a conversation and, for each of its bytes, whether it carries loss:
// an assistant's content and its "<|im_end|>\n".
std::pair<std::string, std::vector<uint8_t>> expected_rendering(const Conversation& conversation) {
  std::string text;
  std::vector<uint8_t> mask;
  for (const auto& m : conversation) {
    const std::string header = "<|im_start|>" + m.role + "\n";
    const std::string body = m.content + "<|im_end|>\n";
    text += header + body;
    mask.insert(mask.end(), header.size(), 0);
    mask.insert(mask.end(), body.size(), m.role == "assistant" ? 1 : 0);
  }
  return {text, mask};
}

struct ChatInputs {
  TempDir dir{"strata-chat"};
  std::string data = dir.file("chat.jsonl");
  ChatTemplate chat{kChatMl, "chatml", jinja::Json::object()};
  PrepareOptions options;
  ChatInputs() {
    std::string records;
    for (const auto& conversation : conversations()) records += json_record(conversation);
    write_text(data, records);
    options.chat_template = &chat;
    options.max_shard_bytes = 40;  // 20 tokens a shard: turns cross shards
    options.threads = 3;
  }
};

TEST(PrepareChat, OnlyTheAssistantTurnsCarryLoss) {
  ChatInputs inputs;
  ByteTokenizerWithEndOfText tokenizer;
  const CorpusManifest manifest =
      prepare_corpus({inputs.data}, inputs.dir.file("out"), tokenizer, inputs.options);
  EXPECT_TRUE(manifest.loss_mask);
  EXPECT_EQ(manifest.documents, 3);
  const TokenStream stream = load_token_shards(inputs.dir.file("out"));
  std::vector<int32_t> tokens;
  std::vector<uint8_t> mask;
  std::vector<int64_t> starts;
  for (const auto& conversation : conversations()) {
    const auto [text, text_mask] = expected_rendering(conversation);
    starts.push_back(static_cast<int64_t>(tokens.size()));
    for (unsigned char c : text) tokens.push_back(c);
    mask.insert(mask.end(), text_mask.begin(), text_mask.end());
    tokens.push_back(256);  // the separator, with loss: the model learns to stop
    mask.push_back(1);
  }
  EXPECT_EQ(stream.tokens, tokens);
  EXPECT_EQ(stream.loss_mask, mask);
  EXPECT_EQ(stream.document_starts, starts);
}

TEST(PrepareChat, WithoutEndOfTextTheLastSegmentIsTrimmedAsForAnyDocument) {
  ChatInputs inputs;
  ByteTokenizer tokenizer;
  prepare_corpus({inputs.data}, inputs.dir.file("out"), tokenizer, inputs.options);
  const TokenStream stream = load_token_shards(inputs.dir.file("out"));
  std::string text;
  std::vector<uint8_t> mask;
  for (const auto& conversation : conversations()) {
    auto [rendering, rendering_mask] = expected_rendering(conversation);
    rendering.pop_back();  // its final "\n": a blank line separates documents
    rendering_mask.pop_back();
    text += rendering + "\n\n";
    mask.insert(mask.end(), rendering_mask.begin(), rendering_mask.end());
    mask.insert(mask.end(), 2, 1);
  }
  EXPECT_EQ(tokenizer.decode(stream.tokens), text);
  EXPECT_EQ(stream.loss_mask, mask);
}

TEST(PrepareChat, ATemplateThatDoesNotRenderIncrementallyIsRefused) {
  TempDir dir;
  // Line 1 blank, so the record is on line 2.
  write_text(dir.file("chat.jsonl"), "\n" + json_record(conversations()[1]));
  // Renders only the last message: a longer conversation does not extend a shorter one's text.
  ChatTemplate last_only(
      "{%- for message in messages %}{%- if loop.last %}{{- message['content'] }}{%- endif %}"
      "{%- endfor %}{%- if add_generation_prompt %}{{- '>' }}{%- endif %}",
      "last-only.jinja", jinja::Json::object());
  PrepareOptions options;
  options.chat_template = &last_only;
  ByteTokenizer tokenizer;
  expect_user_error(
      [&] { prepare_corpus({dir.file("chat.jsonl")}, dir.file("out"), tokenizer, options); },
      {dir.file("chat.jsonl") + ":2", "last-only.jinja",
       "does not render conversations incrementally"});
}

TEST(PrepareChat, BadRecordsAreNamedByLine) {
  TempDir dir;
  ChatTemplate chat(kChatMl, "chatml", jinja::Json::object());
  PrepareOptions options;
  options.chat_template = &chat;
  ByteTokenizer tokenizer;
  int run = 0;
  auto expect_refused = [&](const std::string& records, const std::vector<std::string>& parts) {
    const std::string path = dir.file("bad" + std::to_string(run) + ".jsonl");
    write_text(path, json_record(conversations()[0]) + records);
    std::vector<std::string> wanted = {path + ":2"};
    wanted.insert(wanted.end(), parts.begin(), parts.end());
    expect_user_error(
        [&] { prepare_corpus({path}, dir.file("out" + std::to_string(run)), tokenizer, options); },
        wanted);
    ++run;
  };
  expect_refused("{\"text\": \"no messages\"}\n", {"no field \"messages\""});
  expect_refused("{\"messages\": \"hi\"}\n", {"\"messages\" is not a JSON array"});
  expect_refused("{\"messages\": []}\n", {"no assistant message"});
  expect_refused("{\"messages\": [{\"role\": \"user\", \"content\": \"hi\"}]}\n",
                 {"no assistant message"});
  expect_refused("{\"messages\": [{\"role\": \"assistant\"", {"not a JSON record"});

  ChatTemplate strict(
      "{%- for message in messages %}{%- if message['content'] == 'thanks' %}"
      "{{- raise_exception('No thanks needed') }}{%- endif %}{%- endfor %}" +
          std::string(kChatMl),
      "strict", jinja::Json::object());
  options.chat_template = &strict;
  expect_refused(json_record(conversations()[2]), {"refused the conversation", "No thanks needed"});

  options.prompt_completion = true;
  expect_user_error(
      [&] { prepare_corpus({dir.file("bad0.jsonl")}, dir.file("both"), tokenizer, options); },
      {"--prompt-completion and --chat"});
}

TEST(PrepareChat, TheTemplateComesFromTheTokenizerDirectoryOrAFile) {
  TempDir dir;
  expect_user_error([&] { data_chat_template("byte", ""); },
                    {"--chat needs a chat template", "--chat-template FILE"});
  write_text(dir.file("chatml.jinja"), kChatMl);
  const jinja::Json messages = jinja::Json::array({{{"role", "user"}, {"content", "hi"}}});
  EXPECT_EQ(data_chat_template("byte", dir.file("chatml.jinja")).render(messages, true),
            "<|im_start|>user\nhi<|im_end|>\n<|im_start|>assistant\n");
  fs::create_directories(dir.file("tok"));
  expect_user_error([&] { data_chat_template(dir.file("tok"), ""); },
                    {"no tokenizer_config.json", "--chat-template FILE"});
  write_text(dir.file("tok/tokenizer_config.json"),
             nlohmann::json{{"chat_template", "{{ bos_token }}" + std::string(kChatMl)},
                            {"bos_token", "<s>"}}
                 .dump());
  EXPECT_EQ(data_chat_template(dir.file("tok"), "").render(messages, false),
            "<s><|im_start|>user\nhi<|im_end|>\n");
}

std::map<std::string, std::string> directory_bytes(const std::string& dir) {
  std::map<std::string, std::string> files;
  for (const auto& entry : fs::directory_iterator(dir)) {
    files[entry.path().filename().string()] = read_bytes(entry.path().string());
  }
  return files;
}

TEST(PrepareChat, AnInterruptedRunResumesOnlyWithTheSameTemplate) {
  ChatInputs inputs;
  ByteTokenizer tokenizer;
  prepare_corpus({inputs.data}, inputs.dir.file("whole"), tokenizer, inputs.options);
  const std::string out = inputs.dir.file("resumed");
  const pid_t child = fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    PrepareOptions options = inputs.options;
    options.kill_after_shards = 4;
    try {
      prepare_corpus({inputs.data}, out, tokenizer, options);
    } catch (...) {
      _exit(3);
    }
    _exit(0);
  }
  int status = 0;
  ASSERT_EQ(waitpid(child, &status, 0), child);
  ASSERT_TRUE(WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL) << status;

  ChatTemplate other("{{- bos_token }}" + std::string(kChatMl), "other", jinja::Json::object());
  PrepareOptions options = inputs.options;
  options.chat_template = &other;
  expect_user_error([&] { prepare_corpus({inputs.data}, out, tokenizer, options); },
                    {"\"chat_template\" differs"});
  prepare_corpus({inputs.data}, out, tokenizer, inputs.options);
  EXPECT_EQ(directory_bytes(out), directory_bytes(inputs.dir.file("whole")));
}

}  // namespace
}  // namespace strata
