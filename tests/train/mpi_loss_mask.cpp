// Training on prompt/completion data with data.loss_mask = "completion", on the real MPI
// transport: the first loss is the mean cross-entropy over the completion tokens of the
// global batch (checked against the model's own logits), metrics count those tokens, a mask
// of ones changes nothing, and data, pipeline, tensor and context parallel layouts equal one
// rank taking the whole batch (fp32: losses 1e-5 relative, gradient norms 1e-4) although
// their microbatches hold different shares of completion tokens.
#include <gtest/gtest.h>

#include <string>

#include "strata/data/dataset.h"
#include "strata/data/prepare.h"
#include "strata/model/gpt.h"
#include "test_configs.h"
#include "test_support.h"
#include "train_support.h"

namespace strata {
namespace {

// Prompt/completion records of uneven lengths, prepared by rank 0 into `dir`; with
// empty_prompts every token is a completion token.
void prepare_records(Comm& world, const std::string& dir, bool empty_prompts) {
  if (world.rank() == 0) {
    std::string records;
    for (int i = 0; i < 400; ++i) {
      const std::string prompt = empty_prompts ? ""
                                               : "Q" + std::to_string(i) + ": what is " +
                                                     std::to_string(i % 13) + " squared" +
                                                     std::string(static_cast<size_t>(i % 7), '?');
      const std::string completion = " " + std::to_string((i % 13) * (i % 13)) + ".";
      records += "{\"prompt\": \"" + prompt + "\", \"completion\": \"" + completion + "\"}\n";
    }
    testing::write_bytes(dir + ".jsonl", records);
    PrepareOptions options;
    options.prompt_completion = true;
    ByteTokenizer tokenizer;
    prepare_corpus({dir + ".jsonl"}, dir, tokenizer, options);
  }
  world.barrier();
}

// Keeps rank 0's temporary directory until every rank is done with it (declared after it,
// so destroyed before it, also when an assertion leaves the test early).
struct BarrierAtExit {
  Comm& world;
  ~BarrierAtExit() { world.barrier(); }
};

Config masked_run(const std::string& dir, int64_t steps, int64_t dp) {
  Config config = testing::tiny_training_run(steps, 4 * dp, 1);
  config.model.n_layers = 4;
  config.data.source = DataSource::shards;
  config.data.path = dir;
  config.data.loss_mask = LossMask::completion;
  config.data.eval_fraction = 0.2;
  config.parallel.bucket_mb = 0.01;
  return config;
}

TrainResult train_with(Comm& comm, Config config, const testing::TestLayout& layout) {
  layout.apply_to(config);
  return testing::train_on(comm, config);
}

void expect_close(double got, double want, const std::string& what, double tolerance = 1e-5) {
  EXPECT_NEAR(got, want, tolerance * std::abs(want))
      << what << ": got " << got << ", want " << want;
}

TEST(LossMask, TheLossIsTheMeanOverCompletionTokens) {
  Comm world = Comm::world(120);
  Comm self = world.split(world.rank(), 0, "self");
  testing::TempDir local("strata-mask");
  BarrierAtExit barrier{world};
  const std::string dir = testing::rank0_path(world, local.path()) + "/sft";
  prepare_records(world, dir, false);
  Config config = masked_run(dir, 1, 1);
  const TrainResult run = testing::train_on(self, config);

  // The oracle: the initial model's logits for the step's rows, cross-entropy per target,
  // averaged over the targets the mask marks.
  const std::shared_ptr<TokenDataset> data =
      TokenDataset::open(config.data, config.model, config.train.seed);
  const int64_t B = config.train.global_batch, T = config.model.seq_len;
  const at::Tensor rows = data->rows(Split::Train, 0, 0, B, T);
  const at::Tensor mask = data->loss_mask_rows(Split::Train, 0, 0, B, T).to(at::kDouble);
  GPT model(config.model, config.train.seed, at::kFloat);
  at::NoGradGuard no_grad;
  const at::Tensor logits = model.logits(rows.narrow(1, 0, T)).to(at::kDouble);
  const at::Tensor per_token =
      at::cross_entropy_loss(logits.reshape({B * T, -1}), rows.narrow(1, 1, T).reshape(-1), {},
                             at::Reduction::None)
          .reshape({B, T});
  const double carried = mask.sum().item<double>();
  ASSERT_GT(carried, 0);
  ASSERT_LT(carried, B * T) << "the batch should hold prompt tokens too";
  const double want = (per_token * mask).sum().item<double>() / carried;
  ASSERT_EQ(run.losses.size(), 1u);
  expect_close(run.losses[0], want, "masked loss");
  EXPECT_EQ(run.metrics[0].loss_tokens, static_cast<int64_t>(carried));
  EXPECT_EQ(data->loss_tokens(Split::Train, 0, B, T), static_cast<int64_t>(carried));
}

TEST(LossMask, AMaskOfOnesChangesNothing) {
  Comm world = Comm::world(120);
  Comm self = world.split(world.rank(), 0, "self");
  testing::TempDir local("strata-mask");
  BarrierAtExit barrier{world};
  const std::string dir = testing::rank0_path(world, local.path()) + "/ones";
  prepare_records(world, dir, true);
  Config masked = masked_run(dir, 4, 1);
  Config unmasked = masked;
  unmasked.data.loss_mask = LossMask::none;
  const TrainResult with_mask = testing::train_on(self, masked);
  const TrainResult without = testing::train_on(self, unmasked);
  for (size_t i = 0; i < 4; ++i) {
    EXPECT_EQ(with_mask.losses[i], without.losses[i]) << "step " << i + 1;
    EXPECT_EQ(with_mask.metrics[i].loss_tokens, masked.train.global_batch * masked.model.seq_len);
  }
}

std::vector<testing::TestLayout> layouts_for(int world) {
  using testing::with;
  std::vector<testing::TestLayout> out = {with([&](testing::TestLayout& l) { l.dp = world; })};
  if (world == 2) {
    out.push_back(with([](testing::TestLayout& l) { l.pp = 2; }));
    out.push_back(with([](testing::TestLayout& l) { l.tp = 2; }));
    out.push_back(with([](testing::TestLayout& l) { l.cp = 2; }));
  }
  if (world == 4) {
    out.push_back(with([](testing::TestLayout& l) { l.tp = 2, l.pp = 2; }));
    out.push_back(
        with([](testing::TestLayout& l) { l.dp = 2, l.tp = 2, l.sequence_parallel = true; }));
  }
  return out;
}

TEST(LossMask, EveryLayoutEqualsSingleRank) {
  Comm world = Comm::world(120);
  Comm self = world.split(world.rank(), 0, "self");
  testing::TempDir local("strata-mask");
  BarrierAtExit barrier{world};
  const std::string dir = testing::rank0_path(world, local.path()) + "/sft";
  prepare_records(world, dir, false);
  for (const testing::TestLayout& layout : layouts_for(world.size())) {
    const std::string what = layout.name();
    Config config = masked_run(dir, 6, layout.dp);
    config.train.eval_every = 6;
    config.train.eval_batches = 2;
    Config whole_batch = config;  // one rank, the global batch as one microbatch
    whole_batch.parallel.micro_batch = whole_batch.train.global_batch;
    const TrainResult reference = train_with(self, whole_batch, testing::TestLayout{});
    const TrainResult run = train_with(world, config, layout);
    ASSERT_EQ(run.losses.size(), 6u) << what;
    ASSERT_EQ(run.eval_losses.size(), 1u) << what;
    expect_close(run.eval_losses[0], reference.eval_losses[0], what + " eval");
    for (size_t i = 0; i < 6; ++i) {
      const std::string step = what + ", step " + std::to_string(i + 1);
      expect_close(run.losses[i], reference.losses[i], step + " loss");
      expect_close(run.metrics[i].grad_norm, reference.metrics[i].grad_norm, step + " grad norm",
                   1e-4);
      EXPECT_EQ(run.metrics[i].loss_tokens, reference.metrics[i].loss_tokens) << step;
    }
  }
}

}  // namespace
}  // namespace strata
