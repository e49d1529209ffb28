// The HTTP side's pure parts: reading completion requests, what streaming holds back, and the
// Prometheus histogram.
#include <ATen/CPUGeneratorImpl.h>
#include <gtest/gtest.h>

#include "expect_error.h"
#include "strata/serve/completion_request.h"
#include "strata/serve/engine.h"
#include "strata/serve/metrics.h"
#include "strata/serve/serve.h"

namespace strata {
namespace {

const ByteTokenizer kBytes;

CompletionRequest parse(const std::string& body, int64_t seq_len = 32,
                        const Tokenizer* tokenizer = &kBytes) {
  return parse_completion_request(body, ServedModel{"m", seq_len, 300, tokenizer, {}, nullptr});
}

ApiError error_of(const std::string& body, const Tokenizer* tokenizer = &kBytes) {
  try {
    parse(body, 32, tokenizer);
  } catch (const ApiError& error) {
    return error;
  }
  ADD_FAILURE() << body << " was accepted";
  return ApiError(0, "", "");
}

TEST(CompletionRequest, ReadsEveryField) {
  CompletionRequest request = parse(
      R"({"model": "m", "prompt": ["ab", "cde"], "max_tokens": 5, "temperature": 0.5,
          "top_p": 0.25, "top_k": 3, "seed": 9, "stop": "x", "stream": true})");
  EXPECT_EQ(request.prompts, (std::vector<std::string>{"ab", "cde"}));
  EXPECT_EQ(request.prompt_ids[1], (std::vector<int64_t>{'c', 'd', 'e'}));
  EXPECT_EQ(request.sampling.max_new_tokens, 5);
  EXPECT_EQ(request.sampling.temperature, 0.5);
  EXPECT_EQ(request.sampling.top_p, 0.25);
  EXPECT_EQ(request.sampling.top_k, 3);
  EXPECT_EQ(request.sampling.seed, 9u);
  EXPECT_TRUE(request.seeded);
  EXPECT_EQ(request.stop, (std::vector<std::string>{"x"}));
  EXPECT_TRUE(request.stream);
}

TEST(CompletionRequest, DefaultsAreOpenAIsCutToTheContext) {
  CompletionRequest request = parse(R"({"prompt": "abc"})");
  EXPECT_EQ(request.sampling.max_new_tokens, kDefaultMaxTokens);
  EXPECT_EQ(request.sampling.temperature, 1.0);
  EXPECT_EQ(request.sampling.top_p, 1.0);
  EXPECT_EQ(request.sampling.top_k, 0);
  EXPECT_FALSE(request.seeded);
  EXPECT_FALSE(request.stream);
  EXPECT_EQ(parse(R"({"prompt": "abc"})", 10).sampling.max_new_tokens, 7);
  EXPECT_EQ(parse(R"({"prompt": "abc", "max_tokens": 29})").sampling.max_new_tokens, 29);
}

TEST(CompletionRequest, TheModelsEndOfTextEndsItUnlessIgnoreEos) {
  const ServedModel model{"m", 32, 300, &kBytes, {7, 299}, nullptr};
  EXPECT_EQ(parse_completion_request(R"({"prompt": "abc"})", model).sampling.stop_token_ids,
            (std::vector<int64_t>{7, 299}));
  EXPECT_EQ(parse_completion_request(R"({"prompt": "abc", "ignore_eos": false})", model)
                .sampling.stop_token_ids,
            (std::vector<int64_t>{7, 299}));
  EXPECT_TRUE(parse_completion_request(R"({"prompt": "abc", "ignore_eos": true})", model)
                  .sampling.stop_token_ids.empty());
  EXPECT_TRUE(model.stop_token_ids.size() == 2 && SamplingOptions{}.stop_token_ids.empty());
  EXPECT_EQ(error_of(R"({"prompt": "abc", "ignore_eos": 1})").param, "ignore_eos");
}

TEST(CompletionRequest, ChoicesPenaltiesAndStreamOptions) {
  CompletionRequest request = parse(
      R"({"prompt": "a", "n": 3, "presence_penalty": -0.5, "frequency_penalty": 2,
          "stream": true, "stream_options": {"include_usage": true}})");
  EXPECT_EQ(request.n, 3);
  EXPECT_EQ(request.sampling.presence_penalty, -0.5);
  EXPECT_EQ(request.sampling.frequency_penalty, 2.0);
  EXPECT_TRUE(request.include_usage);
  EXPECT_EQ(parse(R"({"prompt": "a"})").n, 1);
  EXPECT_FALSE(parse(R"({"prompt": "a", "stream": true, "stream_options": null})").include_usage);
  for (const auto& [body, param] : std::vector<std::pair<std::string, std::string>>{
           {R"({"prompt": "a", "n": 0})", "n"},
           {R"({"prompt": "a", "n": 129})", "n"},
           {R"({"prompt": "a", "n": 1.5})", "n"},
           {R"({"prompt": "a", "presence_penalty": 2.5})", "presence_penalty"},
           {R"({"prompt": "a", "frequency_penalty": "1"})", "frequency_penalty"},
           {R"({"prompt": "a", "stream_options": {"include_usage": true}})", "stream_options"},
           {R"({"prompt": "a", "stream": true, "stream_options": {"x": true}})", "stream_options"},
           {R"({"prompt": "a", "stream": true, "stream_options": {"include_usage": 1}})",
            "stream_options"},
       }) {
    const ApiError error = error_of(body);
    EXPECT_EQ(error.status, 400) << body;
    EXPECT_EQ(error.param, param) << body;
  }
}

TEST(Sampling, PenaltiesLowerTheLogitsOfGeneratedTokens) {
  const at::Tensor logits = at::zeros({5});
  SamplingOptions options;
  const std::vector<int64_t> generated = {1, 3, 3, 3};
  EXPECT_TRUE(penalized_logits(logits, options, generated.data(), 4).equal(logits));
  options.frequency_penalty = 0.5;
  options.presence_penalty = 1.0;
  const at::Tensor out = penalized_logits(logits, options, generated.data(), 4);
  EXPECT_TRUE(out.equal(at::tensor({0.0f, -1.5f, 0.0f, -2.5f, 0.0f}))) << out;
  // Greedy follows the penalties: token 3 would win, it is pushed below the untouched ones.
  at::Tensor favours_3 = at::tensor({0.0f, 0.0f, 0.0f, 2.0f, 0.0f});
  options.temperature = 0;
  at::Generator generator = at::make_generator<at::CPUGeneratorImpl>(1);
  EXPECT_EQ(
      sample_token(penalized_logits(favours_3, options, generated.data(), 4), options, generator),
      0);
}

TEST(ChatRequest, RendersTheMessagesThenReadsTheCompletionFields) {
  const ChatTemplate tags(
      "{% for m in messages %}<{{ m.role }}>{{ m.content }}{% endfor %}"
      "{% if add_generation_prompt %}<assistant>{% endif %}",
      "tags", jinja::Json::object());
  const ServedModel model{"m", 64, 300, &kBytes, {}, &tags};
  const CompletionRequest request = parse_chat_request(
      R"({"messages": [{"role": "user", "content": "hi"},
                       {"role": "assistant", "content": [{"type": "text", "text": "a"},
                                                         {"type": "text", "text": "b"}]}],
          "max_completion_tokens": 5, "logprobs": true, "top_logprobs": 3, "n": 2})",
      model);
  EXPECT_TRUE(request.chat);
  EXPECT_EQ(request.prompts, (std::vector<std::string>{"<user>hi<assistant>a\nb<assistant>"}));
  EXPECT_EQ(request.prompt_ids[0].size(), request.prompts[0].size());  // bytes
  EXPECT_EQ(request.sampling.max_new_tokens, 5);
  EXPECT_EQ(request.logprobs, 3);
  EXPECT_EQ(request.n, 2);
  // Without a limit the completion may fill the context; logprobs alone scores the tokens.
  const CompletionRequest plain =
      parse_chat_request(R"({"messages": [{"role": "user", "content": "hi"}],
                             "logprobs": true, "max_tokens": 7})",
                         model);
  EXPECT_EQ(plain.sampling.max_new_tokens, 7);
  EXPECT_EQ(plain.logprobs, 0);
  EXPECT_EQ(parse_chat_request(R"({"messages": [{"role": "user", "content": "hi"}]})", model)
                .sampling.max_new_tokens,
            64 - static_cast<int64_t>(std::string("<user>hi<assistant>").size()));
}

TEST(ChatRequest, ErrorsNameTheField) {
  const ChatTemplate strict(
      "{% if messages[0].role != 'user' %}{{ raise_exception(\"the first message must be the "
      "user's\") }}{% endif %}{{ messages[0].content }}",
      "strict", jinja::Json::object());
  const ServedModel model{"m", 64, 300, &kBytes, {}, &strict};
  auto error = [&](const std::string& body, const ServedModel& served) {
    try {
      parse_chat_request(body, served);
    } catch (const ApiError& caught) {
      return caught;
    }
    ADD_FAILURE() << body << " was accepted";
    return ApiError(0, "", "");
  };
  const ApiError refused = error(R"({"messages": [{"role": "system", "content": "x"}]})", model);
  EXPECT_EQ(refused.status, 400);
  EXPECT_EQ(refused.param, "messages");
  EXPECT_CONTAINS(std::string(refused.what()), "the first message must be the user's");
  for (const auto& [body, param] : std::vector<std::pair<std::string, std::string>>{
           {R"({"messages": []})", "messages"},
           {R"({})", "messages"},
           {R"({"messages": [{"content": "no role"}]})", "messages"},
           {R"({"messages": [{"role": "user", "content": [{"type": "image_url"}]}]})", "messages"},
           {R"({"messages": [{"role": "user", "content": "a"}], "top_logprobs": 2})",
            "top_logprobs"},
           {R"({"messages": [{"role": "user", "content": "a"}], "echo": true})", "echo"},
           {R"({"messages": [{"role": "user", "content": "a"}], "max_completion_tokens": 0})",
            "max_completion_tokens"},
       }) {
    const ApiError caught = error(body, model);
    EXPECT_EQ(caught.status, 400) << body;
    EXPECT_EQ(caught.param, param) << body;
  }
  const ServedModel without_template{"m", 64, 300, &kBytes, {}, nullptr};
  EXPECT_CONTAINS(
      std::string(
          error(R"({"messages": [{"role": "user", "content": "a"}]})", without_template).what()),
      "--chat-template");
}

TEST(CompletionRequest, ErrorsNameTheFieldAndStatus) {
  ApiError error = error_of(R"({"prompt": "abc", "max_tokens": 30})");
  EXPECT_EQ(error.status, 400);
  EXPECT_EQ(error.param, "max_tokens");
  EXPECT_EQ(error.type, "invalid_request_error");
  EXPECT_CONTAINS(std::string(error.what()), "at most 29 more fit");
  EXPECT_EQ(error_of(R"({"prompt": "a", "unknown": 1})").param, "unknown");
  EXPECT_EQ(error_of(R"({"prompt": "a", "model": "other"})").status, 404);
  nlohmann::json body = error_body(error);
  EXPECT_EQ(body["error"]["param"], "max_tokens");
  EXPECT_TRUE(body["error"]["code"].is_null());
  EXPECT_TRUE(error_body(ApiError(429, "rate_limit_error", "full"))["error"]["param"].is_null());
}

TEST(CompletionRequest, PromptsMayBeTokenIds) {
  CompletionRequest one = parse(R"({"prompt": [104, 105, 299], "logprobs": 2, "echo": true,
                                    "max_tokens": 0, "return_token_ids": true})");
  EXPECT_EQ(one.prompt_ids, (std::vector<std::vector<int64_t>>{{104, 105, 299}}));
  EXPECT_EQ(one.prompts[0].substr(0, 2), "hi") << "ids the tokenizer knows are decoded for echo";
  EXPECT_EQ(one.logprobs, 2);
  EXPECT_TRUE(one.echo);
  EXPECT_TRUE(one.return_token_ids);
  EXPECT_EQ(one.sampling.max_new_tokens, 0) << "with echo, 0 only scores the prompt";
  CompletionRequest two = parse(R"({"prompt": [[1, 2], [3]]})");
  EXPECT_EQ(two.prompt_ids, (std::vector<std::vector<int64_t>>{{1, 2}, {3}}));
  EXPECT_EQ(two.logprobs, -1);
  EXPECT_EQ(parse(R"({"prompt": "a", "logprobs": null})").logprobs, -1);

  // A model without tokenizer files takes ids and refuses text, saying what to send.
  EXPECT_EQ(parse(R"({"prompt": [7, 8]})", 32, nullptr).prompts[0], "");
  ApiError text = error_of(R"({"prompt": "hello"})", nullptr);
  EXPECT_EQ(text.status, 400);
  EXPECT_EQ(text.param, "prompt");
  EXPECT_CONTAINS(std::string(text.what()), "send the prompt as token ids");
  EXPECT_CONTAINS(std::string(error_of(R"({"prompt": [1, 300]})").what()),
                  "'prompt[1]' (300) is not a token id of this model: ids are in [0, 300)");
  EXPECT_CONTAINS(std::string(error_of(R"({"prompt": [1, -2]})").what()), "(-2)");
  EXPECT_CONTAINS(std::string(error_of(R"({"prompt": [1, "a"]})").what()),
                  "'prompt[1]' must be a token id (an integer), got string");
  EXPECT_CONTAINS(std::string(error_of(R"({"prompt": ["a", [1]]})").what()),
                  "'prompt[1]' is array where 'prompt[0]' is string");
  EXPECT_CONTAINS(std::string(error_of(R"({"prompt": [[]]})").what()), "'prompt' is empty");
  EXPECT_EQ(error_of(R"({"prompt": [1], "max_tokens": 0})").param, "max_tokens")
      << "0 tokens without echo asks for nothing";
  EXPECT_EQ(error_of(R"({"prompt": [1], "logprobs": 21})").param, "logprobs");
  EXPECT_EQ(error_of(R"({"prompt": [1], "logprobs": true})").param, "logprobs");
  EXPECT_EQ(error_of(R"({"prompt": [1], "echo": 1})").param, "echo");
}

TEST(Streaming, HoldsBackIncompleteCharactersAndPossibleStops) {
  EXPECT_EQ(streamable_length("hello", {}), 5u);
  EXPECT_EQ(streamable_length("caf\xc3", {}), 3u) << "half of a two-byte character";
  EXPECT_EQ(streamable_length("caf\xc3\xa9", {}), 5u);
  EXPECT_EQ(streamable_length("a\xe2\x82", {}), 1u) << "two of three bytes";
  EXPECT_EQ(streamable_length("hello wo", {"world"}), 6u) << "'wo' may become 'world'";
  EXPECT_EQ(streamable_length("hello w", {"xyz", "wa"}), 6u);
  EXPECT_EQ(streamable_length("hello", {"abc"}), 5u);
}

TEST(Metrics, HistogramBucketsAreCumulative) {
  Histogram histogram(0.5, 2.0, 3);  // 0.5, 1, 2
  for (double value : {0.25, 0.5, 0.75, 1.5, 9.0}) histogram.observe(value);
  const std::string text = histogram.prometheus("t", "help");
  EXPECT_CONTAINS(text, "# TYPE t histogram\n");
  EXPECT_CONTAINS(text, "t_bucket{le=\"0.5\"} 2\n");
  EXPECT_CONTAINS(text, "t_bucket{le=\"1.0\"} 3\n");
  EXPECT_CONTAINS(text, "t_bucket{le=\"2.0\"} 4\n");
  EXPECT_CONTAINS(text, "t_bucket{le=\"+Inf\"} 5\n");
  EXPECT_CONTAINS(text, "t_sum 12.0\n");
  EXPECT_CONTAINS(text, "t_count 5\n");
}

TEST(ServingConfig, RunsTpTimesPpRanksWhateverTheTrainingLayout) {
  Config checkpoint;  // trained on 8 ranks: dp 2 x pp 2 x tp 2, 4 microbatches
  checkpoint.model.n_layers = 4;
  checkpoint.parallel.tp = 2;
  checkpoint.parallel.pp = 2;
  checkpoint.parallel.dp = 2;
  checkpoint.parallel.microbatches = 4;
  Config config = serving_config(checkpoint, {}, 2);
  EXPECT_EQ(config.parallel.tp, 2) << "tp = ranks / pp when not set";
  EXPECT_EQ(config.parallel.pp, 1);
  EXPECT_EQ(config.parallel.dp, 1);
  config = serving_config(checkpoint, {"parallel.pp=2", "serve.max_queue=5"}, 4);
  EXPECT_EQ(config.parallel.tp, 2);
  EXPECT_EQ(config.parallel.pp, 2);
  EXPECT_EQ(config.serve.max_queue, 5);
  EXPECT_CONTAINS(testing::user_error([&] { serving_config(checkpoint, {"parallel.tp=1"}, 2); }),
                  "parallel.tp * parallel.pp ranks (1 * 1 = 1, for 2 ranks)");
  EXPECT_CONTAINS(testing::user_error([&] { serving_config(checkpoint, {"parallel.tp=3"}, 3); }),
                  "parallel.tp (3) must divide model.n_heads (4)");
  EXPECT_CONTAINS(
      testing::user_error([&] {
        serving_config(checkpoint, {"parallel.cp=2", "parallel.tp=1"}, 2);
      }),
      "parallel.dp, parallel.cp, parallel.ep and parallel.vpp must be 1 (got -1, 2, 1, 1)");
  EXPECT_CONTAINS(
      testing::user_error([&] { serving_config(checkpoint, {"serve.max_batch_tokens=0"}, 1); }),
      "serve.max_batch_tokens (0) must be >= 1");
  checkpoint.model.moe.num_experts = 2;
  checkpoint.model.moe.capacity_factor = 1.25;
  EXPECT_CONTAINS(testing::user_error([&] { serving_config(checkpoint, {}, 1); }),
                  "model.moe.capacity_factor (1.25) must be 0 (dropless)");
}

}  // namespace
}  // namespace strata
