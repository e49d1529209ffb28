// Document-masked training (data.document_mask) on the real MPI transport: rows packed from
// documents of random lengths train to the same losses and gradient norms on tp 2 (with and
// without sequence parallelism), pp 2 and cp 2 (ring, all-gather, all-to-all) as on one rank
// taking the whole batch (fp32: losses 1e-5 relative, gradient norms 1e-4), and the mask does
// change training (the run without it ends over 1e-4 relative away).
#include <gtest/gtest.h>

#include <random>

#include "strata/data/dataset.h"
#include "test_configs.h"
#include "test_support.h"
#include "train_support.h"

namespace strata {
namespace {

// A tiny GPT (4 layers, 4 heads over 2 kv heads, 32 tokens), 4 sequences per step in micro
// batches of 1, trained on in-memory documents (data.source is not read).
Config tiny_run(const testing::TestLayout& layout, bool rope, int64_t steps) {
  Config config = testing::tiny_training_run(steps, 4, 1);
  config.model.n_layers = 4;
  config.model.n_kv_heads = 2;
  if (rope) config.model.pos = PositionEncoding::rope;
  config.data.source = DataSource::corpus;
  config.data.document_mask = true;
  config.parallel.bucket_mb = 0.01;
  layout.apply_to(config);
  return config;
}

// 6,000 tokens in documents of 1 to 40 tokens (rows of 33 tokens hold several), the same on
// every rank.
std::shared_ptr<TokenDataset> packed_documents(const Config& config) {
  std::mt19937 random(17);
  std::vector<int32_t> tokens(6000);
  for (int32_t& token : tokens) token = static_cast<int32_t>(random() % 256);
  std::vector<int64_t> starts;
  for (int64_t start = 0; start < static_cast<int64_t>(tokens.size());
       start += 1 + static_cast<int64_t>(random() % 40)) {
    starts.push_back(start);
  }
  return TokenDataset::from_tokens(std::move(tokens), config.data, config.model, config.train.seed,
                                   "packed test documents", std::move(starts));
}

TrainResult train(Comm& comm, const Config& config) {
  return testing::train_on(comm, config, nullptr, nullptr, packed_documents(config));
}

void expect_close(double got, double want, const std::string& what, double tolerance) {
  EXPECT_NEAR(got, want, tolerance * std::abs(want))
      << what << ": got " << got << ", want " << want;
}

struct MaskedRun {
  testing::TestLayout layout;
  bool rope;
};

TEST(DocumentMaskTraining, EveryLayoutEqualsSingleRank) {
  Comm world = Comm::world(120);
  ASSERT_EQ(world.size(), 2);
  Comm self = world.split(world.rank(), 0, "self");
  using C = ContextParallelComm;
  const std::vector<MaskedRun> runs = {
      {testing::with([](testing::TestLayout& l) { l.tp = 2; }), true},
      {testing::with([](testing::TestLayout& l) { l.tp = 2, l.sequence_parallel = true; }), false},
      {testing::with([](testing::TestLayout& l) { l.pp = 2; }), false},
      {testing::with([](testing::TestLayout& l) { l.cp = 2, l.cp_comm = C::ring; }), true},
      {testing::with([](testing::TestLayout& l) { l.cp = 2, l.cp_comm = C::ring; }), false},
      {testing::with([](testing::TestLayout& l) { l.cp = 2, l.cp_comm = C::all_gather; }), true},
      {testing::with([](testing::TestLayout& l) { l.cp = 2, l.cp_comm = C::all_to_all; }), false},
  };
  constexpr int64_t kSteps = 6;
  for (const MaskedRun& run : runs) {
    const std::string what = run.layout.name() + (run.rope ? " rope" : "");
    const Config config = tiny_run(run.layout, run.rope, kSteps);
    Config whole_batch = tiny_run(testing::TestLayout{}, run.rope, kSteps);
    whole_batch.parallel.micro_batch = whole_batch.train.global_batch;
    const TrainResult reference = train(self, whole_batch);
    const TrainResult result = train(world, config);
    ASSERT_EQ(result.losses.size(), static_cast<size_t>(kSteps)) << what;
    for (int64_t i = 0; i < kSteps; ++i) {
      const std::string step = what + ", step " + std::to_string(i + 1);
      expect_close(result.losses[i], reference.losses[i], step + " loss", 1e-5);
      expect_close(result.grad_norms[i], reference.grad_norms[i], step + " grad norm", 1e-4);
    }
    // The mask matters: the same rows trained without it end ten times the loss tolerance
    // away (on random tokens the documents' contexts carry little, so not much more).
    Config unmasked = whole_batch;
    unmasked.data.document_mask = false;
    const TrainResult without = train(self, unmasked);
    EXPECT_GT(std::abs(without.losses.back() - reference.losses.back()),
              1e-4 * std::abs(reference.losses.back()))
        << what;
  }
}

}  // namespace
}  // namespace strata
