// `strata plan --serve`: the KV cache one token takes against its closed form (2 x layers x kv
// heads x head_dim x bytes, split over tp, replicated when tp does not divide the kv heads,
// split by layers over pp), the sequences that fit in what the weights and the step's
// workspace leave, the decode step's memory-bound time, and the search over a node.
#include <gtest/gtest.h>

#include <cmath>
#include <fstream>
#include <nlohmann/json.hpp>

#include "command_runner.h"
#include "strata/cli/plan.h"
#include "strata/core/error.h"
#include "strata/plan/serve_plan.h"
#include "test_support.h"

namespace strata {
namespace {

// Llama-2-7B's shape: 32 layers, d_model 4096, 32 heads of 128, seq 4096.
TransformerSpec llama7b(int64_t kv_heads) {
  TransformerSpec spec;
  spec.n_layers = 32;
  spec.d_model = 4096;
  spec.n_heads = 32;
  spec.n_kv_heads = kv_heads;
  spec.d_ff = 11008;
  spec.gated_mlp = true;
  spec.vocab_size = 32000;
  spec.seq_len = 4096;
  spec.norm_bias = false;
  spec.learned_positions = false;
  spec.tied_embeddings = false;
  return spec;
}

PlanLayout layout(int64_t tp, int64_t pp) {
  PlanLayout out;
  out.tp = tp;
  out.pp = pp;
  return out;
}

TEST(ServePlan, KvCachePerTokenIsTheClosedForm) {
  const PlanInputs inputs = plan_inputs(llama7b(32), load_cluster("a100-80gb"), 1);
  // 2 (K and V) x 32 layers x 32 heads x 128 x 2 bytes = 0.5 MiB per token on one device.
  EXPECT_DOUBLE_EQ(predict_serving(inputs, layout(1, 1), 256).kv_bytes_per_token, 524288.0);
  EXPECT_DOUBLE_EQ(predict_serving(inputs, layout(2, 1), 256).kv_bytes_per_token, 262144.0);
  EXPECT_DOUBLE_EQ(predict_serving(inputs, layout(1, 2), 256).kv_bytes_per_token, 262144.0);
  // GQA with 8 kv heads over tp 4: 2 heads each; over a tp that does not divide them, all 8.
  const PlanInputs gqa = plan_inputs(llama7b(8), load_cluster("a100-80gb"), 1);
  EXPECT_DOUBLE_EQ(predict_serving(gqa, layout(4, 1), 256).kv_bytes_per_token,
                   2.0 * 32 * 2 * 128 * 2);
  TransformerSpec three = llama7b(3);
  three.n_heads = 48;
  three.d_model = 6144;
  const PlanInputs replicated = plan_inputs(three, load_cluster("a100-80gb"), 1);
  EXPECT_DOUBLE_EQ(predict_serving(replicated, layout(2, 1), 256).kv_bytes_per_token,
                   2.0 * 32 * 3 * 128 * 2);
}

TEST(ServePlan, TheSequencesThatFitAreWhatTheWeightsLeave) {
  const PlanInputs inputs = plan_inputs(llama7b(32), load_cluster("a100-80gb"), 1);
  const ServePrediction one = predict_serving(inputs, layout(1, 1), 256);
  ASSERT_TRUE(one.fits);
  const double psi = parameter_counts(llama7b(32)).total;
  EXPECT_DOUBLE_EQ(one.weight_bytes, 2 * psi);
  EXPECT_NEAR(one.kv_cache_bytes, 80e9 - 2 * psi - one.workspace_bytes, 1.0);
  // 16-token blocks, whole sequences of 4096 tokens.
  EXPECT_EQ(std::fmod(one.kv_tokens, 16.0), 0.0);
  EXPECT_EQ(one.sequences, static_cast<int64_t>(one.kv_tokens / 4096));
  EXPECT_GT(one.sequences, 20);  // ~66 GB of 2 GiB sequences
  EXPECT_LT(one.sequences, 33);
  // tp 2 halves the weights and the KV per token: more than twice the sequences per replica.
  const ServePrediction two = predict_serving(inputs, layout(2, 1), 256);
  EXPECT_GT(two.sequences, 2 * one.sequences);
  // Decoding is memory-bound: the step reads the weights and the batch's KV cache.
  const double read = (2 * psi + one.decode_batch * 2048.0 * 524288.0) / 2039e9;
  EXPECT_GT(one.decode_step_s, read);
  EXPECT_LT(one.decode_step_s, 1.2 * read);
  EXPECT_NEAR(one.tokens_per_s, one.decode_batch / one.decode_step_s * 8, 1e-6 * one.tokens_per_s);
}

TEST(ServePlan, TooLongASequenceDoesNotFitAndTheSearchSaysSo) {
  TransformerSpec spec = llama7b(32);
  spec.seq_len = 1 << 18;  // 128 GiB of KV cache for one sequence on one device
  const PlanInputs inputs = plan_inputs(spec, load_cluster("a100-80gb"), 1);
  EXPECT_FALSE(predict_serving(inputs, layout(1, 1), 256).fits);
  // tp 8 splits it to 16 GiB per device: that fits.
  const std::vector<ServePrediction> found = search_serving(inputs, 256);
  ASSERT_FALSE(found.empty());
  for (const ServePrediction& prediction : found) {
    EXPECT_TRUE(prediction.fits);
    EXPECT_GE(prediction.layout.tp * prediction.layout.pp, 2);
  }
  spec.seq_len = 1 << 22;
  EXPECT_THROW(search_serving(plan_inputs(spec, load_cluster("a100-80gb"), 1), 256), UserError);
}

TEST(ServePlan, TheCommandReadsTheServeSectionAndRefusesTrainingChoices) {
  testing::TempDir dir;
  const std::string config = dir.file("serve.toml");
  std::ofstream(config) << "[model]\nvocab_size = 32000\nd_model = 4096\nn_layers = 32\n"
                           "n_heads = 32\nseq_len = 4096\n[serve]\nmax_batch_tokens = 64\n";
  auto run = [](const std::vector<std::string>& args) {
    return testing::run_subcommand("plan", add_plan_command, args);
  };
  const testing::CommandResult one =
      run({"--model", config, "--cluster", "a100-80gb", "--serve", "--layout", "tp=2", "--json"});
  ASSERT_EQ(one.exit_code, 0) << one.err;
  const nlohmann::json json = nlohmann::json::parse(one.out);
  EXPECT_EQ(json["tp"], 2);
  EXPECT_EQ(json["replicas"], 4);
  EXPECT_LE(json["decode_batch"].get<int64_t>(), 64);
  EXPECT_GT(json["kv_cache_mb"].get<double>(), 0);
  const testing::CommandResult search =
      run({"--model", config, "--cluster", "h100-80gb", "--serve"});
  ASSERT_EQ(search.exit_code, 0) << search.err;
  for (const char* fragment : {"serve.max_batch_tokens: 64", "#1 serving layout: tp=",
                               "KiB per token per device", "serve.kv_cache_mb = ", "tokens/s"}) {
    EXPECT_NE(search.out.find(fragment), std::string::npos) << fragment << " in:\n" << search.out;
  }
  testing::expect_usage_error(
      run({"--model", config, "--cluster", "a100-80gb", "--serve", "--layout", "tp=2,zero=1"}),
      {"a serving layout is tp and pp"});
  testing::expect_usage_error(
      run({"--model", config, "--cluster", "a100-80gb", "--serve", "--explain"}),
      {"--serve plans serving; --explain belongs to a training plan"});
}

}  // namespace
}  // namespace strata
