// Pipeline parallelism on the real MPI transport: for every schedule and several microbatch
// counts, 20 training steps equal the unsharded run; stage 0 holds at most p microbatches of
// activations under 1F1B and ZB-H1 and m under GPipe; pipeline composes with tensor
// parallelism; bad requests fail before training with a message saying what would work.
#include <gtest/gtest.h>

#include "expect_error.h"
#include "strata/core/error.h"
#include "test_configs.h"
#include "train_support.h"

namespace strata {
namespace {

Config tiny_run(int64_t microbatches) {
  Config config = testing::tiny_training_run(20, microbatches, 1);
  // 8 layers: 2 chunks on each of 4 stages; uneven for 3.
  config.model = testing::gpt_config(32, 16, 8, 4, 8);
  config.model.tie_embeddings = true;  // the embedding is shared by the first and last stage
  config.model.pos = PositionEncoding::rope;
  config.model.activation = Activation::swiglu;
  config.model.norm = Norm::rmsnorm;
  return config;
}

TrainResult train_with(Comm& world, Config config, int64_t pp, int64_t tp,
                       PipelineSchedule schedule, int64_t vpp) {
  config.parallel.pp = pp;
  config.parallel.tp = tp;
  config.parallel.dp = world.size() / (pp * tp);
  config.parallel.vpp = vpp;
  config.parallel.schedule = schedule;
  return testing::train_on(world, config);
}

void expect_same_losses(const TrainResult& got, const TrainResult& want, const std::string& what) {
  ASSERT_EQ(got.losses.size(), want.losses.size()) << what;
  for (size_t i = 0; i < want.losses.size(); ++i) {
    EXPECT_NEAR(got.losses[i], want.losses[i], 1e-4 * want.losses[i]) << what << ", step " << i + 1;
  }
}

TEST(PipelineTraining, EveryScheduleEqualsUnsharded) {
  Comm world = Comm::world(120);
  Comm self = world.split(world.rank(), 0, "self");
  const int64_t p = world.size();
  for (int64_t m : {p, 2 * p, p + 1}) {
    TrainResult reference = train_with(self, tiny_run(m), 1, 1, PipelineSchedule::one_f_one_b, 1);
    for (const PipelineSchedule schedule :
         {PipelineSchedule::gpipe, PipelineSchedule::one_f_one_b, PipelineSchedule::zb_h1}) {
      const std::string what =
          str(name_of(schedule), " p=", std::to_string(p), " m=", std::to_string(m));
      TrainResult result = train_with(world, tiny_run(m), p, 1, schedule, 1);
      expect_same_losses(result, reference, what);
      if (world.rank() == 0) {  // stage 0's activations in flight
        const int64_t limit = schedule == PipelineSchedule::gpipe ? m : std::min(p, m);
        for (int64_t peak : result.peak_inflight) EXPECT_EQ(peak, limit) << what;
      }
    }
    if (m % p == 0) {  // Megatron's interleaving needs m divisible by p
      TrainResult result =
          train_with(world, tiny_run(m), p, 1, PipelineSchedule::interleaved_one_f_one_b, 2);
      expect_same_losses(result, reference, "interleaved-1f1b v=2 m=" + std::to_string(m));
    }
  }
}

TEST(PipelineTraining, ComposesWithTensorParallelism) {
  Comm world = Comm::world(120);
  if (world.size() % 2 != 0) GTEST_SKIP() << "needs an even world for tp = 2";
  Comm self = world.split(world.rank(), 0, "self");
  const int64_t pp = world.size() / 2;
  TrainResult reference = train_with(self, tiny_run(4), 1, 1, PipelineSchedule::one_f_one_b, 1);
  Config config = tiny_run(4);
  config.parallel.sequence_parallel = true;
  expect_same_losses(train_with(world, config, pp, 2, PipelineSchedule::one_f_one_b, 1), reference,
                     "pp x tp2 with sp");
}

TEST(PipelineTraining, ExplicitUnevenSplitEqualsUnsharded) {
  Comm world = Comm::world(120);
  if (world.size() < 2) GTEST_SKIP();
  Comm self = world.split(world.rank(), 0, "self");
  const int64_t p = world.size();
  TrainResult reference = train_with(self, tiny_run(p), 1, 1, PipelineSchedule::one_f_one_b, 1);
  Config config = tiny_run(p);
  // The last stage gets most layers: the opposite of what balanced_partition would choose.
  config.parallel.pp_layers.assign(p, 1);
  config.parallel.pp_layers.back() = config.model.n_layers - (p - 1);
  expect_same_losses(train_with(world, config, p, 1, PipelineSchedule::zb_h1, 1), reference,
                     "last-heavy parallel.pp_layers");
  config.parallel.pp_layers.back() += 1;  // one layer too many
  EXPECT_CONTAINS(testing::user_error(
                      [&] { train_with(world, config, p, 1, PipelineSchedule::one_f_one_b, 1); }),
                  "parallel.pp_layers sums to");
}

TEST(PipelineTraining, BadRequestsSayWhatWorks) {
  Comm world = Comm::world(120);
  if (world.size() < 2) GTEST_SKIP();
  const int64_t p = world.size();
  Config config = tiny_run(p + 1);  // p + 1 microbatches cannot be interleaved over p stages
  config.parallel.pp = p;
  config.parallel.dp = 1;
  config.parallel.schedule = PipelineSchedule::interleaved_one_f_one_b;
  config.parallel.vpp = 2;
  EXPECT_CONTAINS(testing::user_error([&] { validate_config(config, world.size()); }),
                  "parallel.microbatches");
  config = tiny_run(p);
  config.model.n_layers = p - 1;
  config.parallel.pp = p;
  config.parallel.dp = 1;
  EXPECT_THROW(validate_config(config, world.size()), UserError);  // more stages than layers
}

}  // namespace
}  // namespace strata
