// Loading a model (a strata checkpoint or a Hugging Face directory), and sampling with a KV
// cache: the prompt is run once, then each new token costs one position.
#include "strata/infer/generate.h"

#include <ATen/CPUGeneratorImpl.h>
#include <ATen/core/grad_mode.h>

#include "strata/ckpt/checkpoint.h"
#include "strata/core/error.h"
#include "strata/core/precision.h"
#include "strata/hf/hf_load.h"

namespace strata {

Config checkpoint_run_config(const std::string& dir) {
  if (is_hf_directory(dir)) {
    Config config;
    config.model_init = dir;
    config.model.seq_len = read_hf_config(dir).model.seq_len;
    return with_hf_model(config);
  }
  nlohmann::json state = read_checkpoint_state(dir);
  return parse_config(state.at("config").get<std::string>(), dir + "/state.json");
}

std::unique_ptr<GPT> load_model_from_checkpoint(const std::string& dir, Config* config_out,
                                                Comm* tp, std::optional<Precision> precision) {
  Config config = checkpoint_run_config(dir);
  if (precision) config.train.precision = *precision;
  auto model = load_stage_from_checkpoint(dir, config, tp, StageSpec{});
  if (config_out) *config_out = config;
  return model;
}

std::unique_ptr<GPT> load_stage_from_checkpoint(const std::string& dir, const Config& config,
                                                Comm* tp, const StageSpec& stage) {
  // Every value is loaded next: nothing is drawn.
  auto model =
      std::make_unique<GPT>(config.model, run_block_spec(config), config.train.seed,
                            compute_dtype(config.train.precision), TensorParallel{tp, false}, stage,
                            nullptr, ContextParallel{}, ParameterInit::loaded);
  if (is_hf_directory(dir)) {
    load_hf_weights(dir, *model);
    return model;
  }
  std::vector<ShardedTensor> tensors;
  for (auto& parameter : model->parameters()) {
    for (auto& slice :
         sharded_slices(parameter.name, parameter.value.detach(), parameter.spec, false)) {
      tensors.push_back(std::move(slice));
    }
  }
  {
    at::NoGradGuard no_grad;
    load_checkpoint(dir, tensors);
  }
  return model;
}

int64_t sample_token(const at::Tensor& logits, const SamplingOptions& options,
                     at::Generator& generator) {
  if (options.temperature <= 0) return logits.argmax().item<int64_t>();
  at::Tensor scaled = logits / options.temperature;
  const float hidden = -std::numeric_limits<float>::infinity();
  if (options.top_k > 0 && options.top_k < scaled.size(0)) {
    auto threshold = std::get<0>(scaled.topk(options.top_k)).min();
    scaled = scaled.masked_fill(scaled < threshold, hidden);
  }
  if (options.top_p < 1) {
    // Keep the likeliest tokens up to and including the one whose cumulative probability
    // reaches top_p; the rest are hidden.
    auto [sorted, order] = at::softmax(scaled, 0).sort(0, /*descending=*/true);
    at::Tensor before = sorted.cumsum(0) - sorted;  // probability of the likelier tokens
    at::Tensor drop = at::zeros_like(before, at::kBool).scatter(0, order, before >= options.top_p);
    scaled = scaled.masked_fill(drop, hidden);
  }
  auto probabilities = at::softmax(scaled, 0);
  return at::multinomial(probabilities, 1, false, generator).item<int64_t>();
}

at::Tensor penalized_logits(const at::Tensor& logits, const SamplingOptions& options,
                            const int64_t* generated, int64_t count) {
  if ((options.presence_penalty == 0 && options.frequency_penalty == 0) || count == 0) {
    return logits;
  }
  const at::Tensor ids = at::from_blob(const_cast<int64_t*>(generated), {count}, at::kLong);
  const at::Tensor counts =
      at::zeros({logits.size(0)}, at::kFloat).index_add_(0, ids, at::ones({count}, at::kFloat));
  return logits.to(at::kFloat) - options.frequency_penalty * counts -
         options.presence_penalty * counts.gt(0).to(at::kFloat);
}

TokenLogprob token_logprob(const at::Tensor& logits, int64_t token, int64_t top) {
  const at::Tensor logprobs = at::log_softmax(logits.to(at::kFloat), 0);
  TokenLogprob out;
  out.logprob = logprobs[token].item<double>();
  if (top > 0) {
    auto [values, ids] = logprobs.topk(std::min(top, logprobs.size(0)));
    for (int64_t i = 0; i < values.size(0); ++i) {
      out.top.emplace_back(ids[i].item<int64_t>(), values[i].item<double>());
    }
  }
  return out;
}

Generated generate(GPT& model, const std::vector<int64_t>& prompt, const SamplingOptions& options) {
  STRATA_REQUIRE(!prompt.empty(), "the prompt must hold at least one token");
  const int64_t seq_len = model.config().seq_len;
  STRATA_REQUIRE(static_cast<int64_t>(prompt.size()) < seq_len, "the prompt (", prompt.size(),
                 " tokens) must be shorter than model.seq_len (", seq_len, ")");
  const int64_t vocab = model.config().vocab_size;
  for (const int64_t id : prompt) {
    STRATA_REQUIRE(id >= 0 && id < vocab, "prompt token id ", id,
                   " is outside the model's vocabulary [0, ", vocab, ")");
  }
  at::NoGradGuard no_grad;
  auto generator = at::make_generator<at::CPUGeneratorImpl>(options.seed);
  KVCache cache;
  at::Tensor input = at::tensor(prompt, at::kLong).view({1, -1});
  Generated output;
  while (static_cast<int64_t>(output.tokens.size()) < options.max_new_tokens &&
         cache.length + input.size(1) <= seq_len) {
    at::Tensor logits =
        model.logits(input, &cache).select(1, -1).select(0, 0).to(at::kFloat);  // (V)
    const int64_t next = sample_token(penalized_logits(logits, options, output.tokens.data(),
                                                       static_cast<int64_t>(output.tokens.size())),
                                      options, generator);
    output.tokens.push_back(next);
    output.logprobs.push_back(token_logprob(logits, next).logprob);
    if (options.ends_generation(next)) break;
    input = at::full({1, 1}, next, at::kLong);
  }
  return output;
}

}  // namespace strata
