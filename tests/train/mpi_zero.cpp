// Data parallelism with ZeRO 0-3 on the real MPI transport: every stage, alone and composed
// with tensor and pipeline parallelism, trains equal to one rank taking the whole batch at
// once; per-rank memory and communication match the ZeRO formulas; checkpoints move between
// stages and dp sizes.
#include <gtest/gtest.h>

#include <algorithm>

#include "test_configs.h"
#include "test_support.h"
#include "train_support.h"

namespace strata {
namespace {

using testing::TestLayout;
using testing::with;

// dp ranks and nothing else.
TestLayout data_parallel(int64_t dp) {
  return with([dp](TestLayout& l) { l.dp = dp; });
}

// Tiny model; microbatches_per_rank microbatches of one sequence on each dp rank.
Config tiny_run(int64_t steps, int64_t dp, int64_t microbatches_per_rank, int64_t zero) {
  Config config = testing::tiny_training_run(steps, dp * microbatches_per_rank, 1);
  config.model.seq_len = 16;
  config.model.tie_embeddings = true;  // shared by the first and last stage under pp
  config.parallel.zero = zero;
  config.parallel.bucket_mb = 0.01;  // several buckets per layer
  return config;
}

struct Outcome {
  TrainResult result;
  int64_t local_parameters = 0;  // elements of this rank's parameter pieces
};

// The layout's sizes and schedule; ZeRO is tiny_run's.
Outcome train_with(Comm& comm, Config config, const TestLayout& layout) {
  config.parallel.dp = layout.dp;
  config.parallel.tp = layout.tp;
  config.parallel.pp = layout.pp;
  config.parallel.vpp = layout.vpp;
  config.parallel.sequence_parallel = layout.sequence_parallel;
  config.parallel.schedule = layout.schedule;
  Outcome run;
  run.result = testing::train_on(comm, config, [&](const Trainer& trainer) {
    for (const Parameter* parameter : trainer.parameters()) {
      run.local_parameters += parameter->value.numel();
    }
  });
  return run;
}

// The layouts each world size checks (every one with each ZeRO stage). Under zb-h1 and zb-v
// the gradients are complete only after the deferred weight-gradient (W) actions; under zb-v
// rank 0 holds both copies of the tied embedding, in its two chunks.
std::vector<TestLayout> layouts_for(int world) {
  switch (world) {
    case 4:
      return {data_parallel(4), with([](TestLayout& l) { l.dp = 2, l.tp = 2; }),
              with([](TestLayout& l) { l.dp = 2, l.pp = 2, l.schedule = PipelineSchedule::zb_h1; }),
              with([](TestLayout& l) {
                l.dp = 2, l.pp = 2, l.vpp = 2, l.schedule = PipelineSchedule::zb_v;
              })};
    case 8:
      return {with([](TestLayout& l) { l.dp = 2, l.tp = 2, l.pp = 2, l.sequence_parallel = true; }),
              with([](TestLayout& l) {
                l.dp = 2, l.tp = 2, l.pp = 2, l.vpp = 2, l.schedule = PipelineSchedule::zb_v;
              })};
    default:
      return {data_parallel(world)};
  }
}

void expect_close(double got, double want, const std::string& what) {
  EXPECT_NEAR(got, want, 1e-4 * std::abs(want)) << what << ": got " << got << ", want " << want;
}

TEST(Zero, EveryStageAndLayoutEqualsSingleRank) {
  Comm world = Comm::world(120);
  Comm self = world.split(world.rank(), 0, "self");
  for (const TestLayout& layout : layouts_for(world.size())) {
    auto with_eval = [&](int64_t zero) {  // evaluation runs the forward-only schedule
      Config config = tiny_run(20, layout.dp, 2, zero);
      // A layer for every virtual stage (zb-v: 2 per pipeline rank); the reference alike.
      config.model.n_layers = std::max(config.model.n_layers, layout.pp * layout.vpp);
      config.train.eval_every = 10;
      config.train.eval_batches = 1;
      return config;
    };
    // The reference takes the global batch as one microbatch on one rank, without ZeRO: no
    // run below is the reference itself, not even ZeRO 0 on a world of one rank, where the
    // run still accumulates two microbatches.
    Config whole_batch = with_eval(0);
    whole_batch.parallel.micro_batch = whole_batch.train.global_batch;
    const Outcome reference = train_with(self, whole_batch, TestLayout{});
    for (int64_t zero = 0; zero <= 3; ++zero) {
      const std::string what = layout.name() + " zero " + std::to_string(zero);
      const Outcome run = train_with(world, with_eval(zero), layout);
      ASSERT_EQ(run.result.eval_losses.size(), 2u) << what;
      for (size_t i = 0; i < 2; ++i) {
        expect_close(run.result.eval_losses[i], reference.result.eval_losses[i],
                     what + " eval " + std::to_string(i));
      }
      ASSERT_EQ(run.result.losses.size(), 20u) << what;
      for (size_t i = 0; i < 20; ++i) {
        const std::string step = what + ", step " + std::to_string(i + 1);
        expect_close(run.result.losses[i], reference.result.losses[i], step + " loss");
        // The global norm counts every parameter exactly once.
        expect_close(run.result.metrics[i].grad_norm, reference.result.metrics[i].grad_norm,
                     step + " grad norm");
      }
    }
  }
}

int64_t comm_bytes(const StepMetrics& metrics, const std::string& kind) {
  return metrics.comm.contains(kind) ? metrics.comm.at(kind).get<int64_t>() : 0;
}

// Per rank, fp32 AdamW (4 bytes weights + 4 grads + 8 moments per parameter, Psi of them,
// N = dp): ZeRO's published memory and, from the ring byte counters, communication per step:
// 2 Psi elements for stages 0-2 (all-reduce = reduce-scatter + all-gather) and 3 Psi for
// stage 3 (gather for forward, gather for backward, reduce-scatter), each times (N-1)/N, the
// share a ring moves (the paper's 2 Psi and 3 Psi are the limit of large N). One microbatch
// per rank, so stage 3 gathers each layer once for forward and once for backward.
TEST(Zero, MemoryAndCommunicationMatchTheFormulas) {
  Comm world = Comm::world(120);
  const double n = world.size();
  for (int64_t zero = 0; zero <= 3; ++zero) {
    const std::string what = "zero " + std::to_string(zero) + " dp " + std::to_string(world.size());
    const Outcome run =
        train_with(world, tiny_run(2, world.size(), 1, zero), data_parallel(world.size()));
    const double psi = static_cast<double>(run.local_parameters);
    const double e = 4;  // bytes per float32 element
    const double weights = zero == 3 ? e * psi / n : e * psi;
    const double grads = zero >= 2 ? e * psi / n : e * psi;
    const double optimizer = zero >= 1 ? 2 * e * psi / n : 2 * e * psi;
    const StepMetrics& m = run.result.metrics.back();
    // Gradient buckets of the blocks start reducing while backward still runs; the outer
    // layers' (the embedding's gradient is complete last) when the backward ends.
    EXPECT_GT(m.dp_buckets_overlapped, 0) << what;
    EXPECT_LT(m.dp_buckets_overlapped, m.dp_buckets) << what;
    // Padding each bucket to a multiple of N adds fewer than N elements per bucket.
    EXPECT_NEAR(m.mem.params, weights, 0.05 * weights) << what;
    EXPECT_NEAR(m.mem.grads, grads, 0.05 * grads) << what;
    EXPECT_NEAR(m.mem.optimizer, optimizer, 0.05 * optimizer) << what;
    const double total = zero == 0   ? 16 * psi
                         : zero == 1 ? 8 * psi + 8 * psi / n
                         : zero == 2 ? 4 * psi + 12 * psi / n
                                     : 16 * psi / n;
    EXPECT_NEAR(m.mem.params + m.mem.grads + m.mem.optimizer, total, 0.05 * total) << what;

    const double ring = e * psi * (n - 1) / n;  // bytes one rank sends to move Psi elements
    const double expected = (zero == 3 ? 3 : 2) * ring;
    int64_t sent = 0;
    for (const auto& item : m.comm.items()) sent += item.value().get<int64_t>();
    EXPECT_NEAR(static_cast<double>(sent), expected, 0.05 * expected) << what;
    const double all_reduce = comm_bytes(m, "all_reduce");
    const double reduce_scatter = comm_bytes(m, "reduce_scatter");
    const double all_gather = comm_bytes(m, "all_gather");
    if (zero == 0) {
      EXPECT_NEAR(all_reduce, 2 * ring, 0.05 * 2 * ring) << what;
    } else {
      EXPECT_NEAR(reduce_scatter, ring, 0.05 * ring) << what;
      EXPECT_NEAR(all_gather, (zero == 3 ? 2 : 1) * ring, 0.05 * ring) << what;
    }
  }
}

// Checkpoints carry global tensors: written under ZeRO-3 on dp = world, resumed on one rank
// without ZeRO; written on one rank, resumed under ZeRO-2 and ZeRO-3 on dp = world. All
// continue the uninterrupted run.
TEST(Zero, CheckpointMovesBetweenStagesAndDpSizes) {
  Comm world = Comm::world(120);
  Comm self = world.split(world.rank(), 0, "self");
  const int64_t dp = world.size();
  testing::TempDir local("strata-zero-ckpt");
  const std::string dir = testing::rank0_path(world, local.path());

  Config sharded = tiny_run(6, dp, 1, 3);
  sharded.checkpoint.dir = dir + "/zero3";
  sharded.checkpoint.every = 3;
  const Outcome uninterrupted = train_with(world, sharded, data_parallel(dp));
  world.barrier();

  Config resumed = tiny_run(6, dp, 1, 0);
  resumed.checkpoint.resume = sharded.checkpoint.dir + "/step_00000003";
  const Outcome on_one_rank = train_with(self, resumed, TestLayout{});
  ASSERT_EQ(on_one_rank.result.first_step, 3);
  ASSERT_EQ(on_one_rank.result.losses.size(), 3u);
  for (size_t i = 0; i < 3; ++i) {
    expect_close(
        on_one_rank.result.losses[i], uninterrupted.result.losses[3 + i],
        "zero 3 dp " + std::to_string(dp) + " -> zero 0 dp 1, step " + std::to_string(4 + i));
  }

  // Written on one rank (rank 0's copy; the others write into directories of their own).
  testing::TempDir own("strata-zero-ckpt-own");
  Config single = tiny_run(3, dp, 1, 0);
  single.checkpoint.dir = (world.rank() == 0 ? dir : own.path()) + "/single";
  train_with(self, single, TestLayout{});
  world.barrier();
  for (int64_t zero : {2, 3}) {
    Config to_sharded = tiny_run(6, dp, 1, zero);
    to_sharded.checkpoint.resume = dir + "/single/step_00000003";
    const Outcome on_world = train_with(world, to_sharded, data_parallel(dp));
    ASSERT_EQ(on_world.result.first_step, 3);
    ASSERT_EQ(on_world.result.losses.size(), 3u);
    for (size_t i = 0; i < 3; ++i) {
      expect_close(on_world.result.losses[i], uninterrupted.result.losses[3 + i],
                   "zero 0 dp 1 -> zero " + std::to_string(zero) + " dp " + std::to_string(dp) +
                       ", step " + std::to_string(4 + i));
    }
  }
}

}  // namespace
}  // namespace strata
