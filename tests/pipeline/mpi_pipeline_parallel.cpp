// Pipeline parallelism on the real MPI transport: for every schedule and several microbatch
// counts, 20 training steps equal the unsharded run; stage 0 holds at most p microbatches of
// activations under 1F1B, ZB-H1 and ZB-V and m under GPipe; pipeline composes with tensor
// parallelism; explicit and "auto" stage splits train alike; sent messages are freed once
// delivered; bad requests fail before training with a message saying what would work.
#include <gtest/gtest.h>

#include "expect_error.h"
#include "strata/core/error.h"
#include "strata/core/stages.h"
#include "strata/plan/calibrate.h"
#include "strata/plan/layer_profile.h"
#include "strata/plan/stage_split.h"
#include "test_configs.h"
#include "test_support.h"
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
    // ZB-V: the first and last virtual stage (and the tied embedding's two copies) on rank 0,
    // the turn of the V on rank p-1 handed over without MPI. Counted in half-stage chunks,
    // rank 0 holds at most 2 min(p, m), exactly 2p once the warmup fills (m >= 2p-1).
    const std::string what = str("zb-v p=", p, " m=", m);
    TrainResult result = train_with(world, tiny_run(m), p, 1, PipelineSchedule::zb_v, 2);
    expect_same_losses(result, reference, what);
    if (world.rank() == 0) {
      for (int64_t peak : result.peak_inflight) {
        EXPECT_LE(peak, 2 * std::min(p, m)) << what;
        if (m >= 2 * p - 1) {
          EXPECT_EQ(peak, 2 * p) << what;
        }
      }
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
  if (pp > 1) {
    expect_same_losses(train_with(world, config, pp, 2, PipelineSchedule::zb_v, 2), reference,
                       "zb-v pp x tp2 with sp");
  }
}

// Checkpoints hold global tensors whatever the placement: written under ZB-V (rank 0 holds
// the embedding in chunk 0 and the head's tied copy in chunk 1, and writes the first only),
// resumed on one rank; written on one rank, resumed under ZB-V. Both continue the
// uninterrupted run. The first 3 steps are warm-up whatever train.steps, so the runs of 3 and
// 6 steps share their learning rates there.
TEST(PipelineTraining, ZbVCheckpointsMoveToAndFromOneRank) {
  Comm world = Comm::world(120);
  if (world.size() < 2) GTEST_SKIP();
  Comm self = world.split(world.rank(), 0, "self");
  const int64_t p = world.size();
  testing::TempDir local("strata-zbv-ckpt");
  const std::string dir = testing::rank0_path(world, local.path());
  auto run_of = [&](int64_t steps) {
    Config config = tiny_run(2 * p);
    config.train.steps = steps;
    return config;
  };
  auto expect_continues = [&](const TrainResult& resumed, const TrainResult& uninterrupted,
                              const std::string& what) {
    ASSERT_EQ(resumed.first_step, 3) << what;
    ASSERT_EQ(resumed.losses.size(), 3u) << what;
    for (size_t i = 0; i < 3; ++i) {
      EXPECT_NEAR(resumed.losses[i], uninterrupted.losses[3 + i],
                  1e-4 * uninterrupted.losses[3 + i])
          << what << ", step " << 4 + i;
    }
  };

  Config written = run_of(6);
  written.checkpoint.dir = dir + "/zb-v";
  written.checkpoint.every = 3;
  const TrainResult uninterrupted = train_with(world, written, p, 1, PipelineSchedule::zb_v, 2);
  world.barrier();
  Config on_one_rank = run_of(6);
  on_one_rank.checkpoint.resume = written.checkpoint.dir + "/step_00000003";
  expect_continues(train_with(self, on_one_rank, 1, 1, PipelineSchedule::one_f_one_b, 1),
                   uninterrupted, "zb-v -> one rank");

  // Written on one rank (rank 0's copy; the others write into directories of their own).
  testing::TempDir own("strata-zbv-ckpt-own");
  Config single = run_of(3);
  single.checkpoint.dir = (world.rank() == 0 ? dir : own.path()) + "/single";
  single.checkpoint.every = 3;
  train_with(self, single, 1, 1, PipelineSchedule::one_f_one_b, 1);
  world.barrier();
  Config to_v = run_of(6);
  to_v.checkpoint.resume = dir + "/single/step_00000003";
  expect_continues(train_with(world, to_v, p, 1, PipelineSchedule::zb_v, 2), uninterrupted,
                   "one rank -> zb-v");
}

TEST(PipelineTraining, ExplicitUnevenSplitEqualsUnsharded) {
  Comm world = Comm::world(120);
  if (world.size() < 2) GTEST_SKIP();
  Comm self = world.split(world.rank(), 0, "self");
  const int64_t p = world.size();
  TrainResult reference = train_with(self, tiny_run(p), 1, 1, PipelineSchedule::one_f_one_b, 1);
  Config config = tiny_run(p);
  // The last stage gets most layers: the opposite of what balanced_split would choose.
  std::vector<int64_t>& layers = config.parallel.pp_layers.layers;
  layers.assign(p, 1);
  layers.back() = config.model.n_layers - (p - 1);
  expect_same_losses(train_with(world, config, p, 1, PipelineSchedule::zb_h1, 1), reference,
                     "last-heavy parallel.pp_layers");
  layers.back() += 1;  // one layer too many
  EXPECT_CONTAINS(testing::user_error(
                      [&] { train_with(world, config, p, 1, PipelineSchedule::one_f_one_b, 1); }),
                  "parallel.pp_layers sums to");
}

// parallel.pp_layers = "auto" resolved at the start as `strata train` does, on a cache
// directory holding a cluster profile and a layer profile measured for this model whose head
// and loss cost ten layers: the last virtual stage keeps one layer, every rank builds the same
// stages, and training equals the unsharded model, under 1F1B and under zb-v (whose rank 0
// holds the embedding and the head).
TEST(PipelineTraining, AutoSplitEqualsUnsharded) {
  Comm world = Comm::world(120);
  if (world.size() < 2) GTEST_SKIP();
  Comm self = world.split(world.rank(), 0, "self");
  const int64_t p = world.size();
  testing::TempDir cache("strata-auto-split");
  testing::ScopedEnv cache_dir("STRATA_CACHE_DIR", cache.path().c_str());
  save_local_profile(local_profile_path(), load_cluster("h100-80gb"));
  const Config run = tiny_run(2 * p);
  LayerProfile measured;
  measured.model = layer_profile_model(transformer_of(run.model));
  measured.precision = run.train.precision;
  measured.micro_batch = run.parallel.micro_batch;
  measured.seconds = {1.0, 0.5, 10.0};
  save_layer_profile(layer_profile_path(), measured);

  const TrainResult reference = train_with(self, run, 1, 1, PipelineSchedule::one_f_one_b, 1);
  for (const auto& [schedule, vpp] : {std::pair{PipelineSchedule::one_f_one_b, int64_t{1}},
                                      std::pair{PipelineSchedule::zb_v, int64_t{2}}}) {
    Config config = run;
    config.parallel.pp = p;
    config.parallel.dp = 1;
    config.parallel.vpp = vpp;
    config.parallel.schedule = schedule;
    config.parallel.pp_layers = PipelineLayers{true, {}};
    std::string note;
    const Config resolved = resolve_pp_layers_on_ranks(world, config, &note);
    const std::vector<int64_t>& layers = resolved.parallel.pp_layers.layers;
    const std::string what = str(name_of(schedule), " p=", p, ": ", note);
    EXPECT_FALSE(resolved.parallel.pp_layers.automatic) << what;
    EXPECT_CONTAINS(note, "costed by the measured layer profile");
    EXPECT_EQ(layers, balanced_split(run.model.n_layers, stage_placement(config.parallel),
                                     measured.seconds))
        << what;
    EXPECT_EQ(layers.back(), 1) << what;
    expect_same_losses(train_with(world, resolved, p, 1, schedule, vpp), reference, what);
  }
}

// A message that has been delivered holds no memory: each rank's activation peak is nearly the
// same for 2p and 4p microbatches (both hold every stage's steady-state count), under 1F1B and
// ZB-V, whose rank 0 sends a gradient for every microbatch besides its activations. A message
// or two may still be on its way at the peak; kept to the step's end (or, for an activation,
// to its backward), the sent messages would add 2p or more to the larger run's peak.
TEST(PipelineTraining, DeliveredMessagesHoldNoMemory) {
  Comm world = Comm::world(120);
  if (world.size() < 2) GTEST_SKIP();
  const int64_t p = world.size();
  for (const auto& [schedule, vpp] : {std::pair{PipelineSchedule::one_f_one_b, int64_t{1}},
                                      std::pair{PipelineSchedule::zb_v, int64_t{2}}}) {
    auto activations_peak = [&](int64_t microbatches) {
      Config config = tiny_run(microbatches);
      config.model.d_model = 64;  // messages of 2 KB against 128 bytes of tokens per microbatch
      config.train.steps = 3;     // its warm-up steps
      return train_with(world, config, p, 1, schedule, vpp).metrics.back().mem.activations_peak;
    };
    const int64_t message_bytes = 8 * 64 * 4;  // one microbatch's activations: seq x d_model
    const int64_t fewer = activations_peak(2 * p), more = activations_peak(4 * p);
    EXPECT_LE(more - fewer, (p + 1) * message_bytes)
        << name_of(schedule) << " rank " << world.rank() << ": peak " << fewer << " bytes at "
        << 2 * p << " microbatches, " << more << " at " << 4 * p;
  }
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
