// Mixed precision (train.precision = "bf16" | "fp16") on the real MPI transport: every
// parallel dimension and schedule trains as the single rank does in the same precision (within
// the tolerances below), memory by kind matches the formulas of docs/parallelism.md, master
// weights keep updates bf16 cannot hold, checkpoints hold float32 and move between precisions,
// resume is bit-identical, fp16's loss scaling skips an overflowed step on every rank, and
// bf16 gradient reduction halves the bytes.
#include <gtest/gtest.h>

#include <cmath>
#include <fstream>
#include <limits>

#include "strata/ckpt/checkpoint.h"
#include "test_configs.h"
#include "test_support.h"
#include "train_support.h"

namespace strata {
namespace {

using testing::TestLayout;
using testing::with;

// A tiny run in `precision`: 4 layers (pp 2 with vpp 2 needs 4), 4 sequences of 32 tokens a
// step in microbatches of one, so every layout runs the same global batch.
Config tiny_run(Precision precision, const TestLayout& layout, int64_t steps = 6) {
  Config config = testing::tiny_training_run(steps, 4, 1);
  config.model.n_layers = 4;
  config.model.tie_embeddings = true;
  if (layout.moe) {
    config.model.moe.num_experts = 4;
    config.model.moe.top_k = 2;
    config.model.moe.every = 2;
    config.model.moe.aux_loss_coef = 0.01;
  }
  config.train.precision = precision;
  layout.apply_to(config);
  return config;
}

std::vector<TestLayout> layouts_for(int world) {
  if (world == 2) {
    return {
        with([](TestLayout& l) { l.tp = 2, l.sequence_parallel = true; }),
        with([](TestLayout& l) { l.pp = 2; }),
        with([](TestLayout& l) { l.pp = 2, l.schedule = PipelineSchedule::zb_h1; }),
        with([](TestLayout& l) { l.dp = 2, l.zero = 1; }),
        with([](TestLayout& l) { l.dp = 2, l.zero = 3, l.gradients = GradientCompression::bf16; }),
        with([](TestLayout& l) { l.cp = 2; }),
        with([](TestLayout& l) { l.dp = 2, l.ep = 2, l.moe = true; })};
  }
  if (world == 4) {
    return {with([](TestLayout& l) { l.tp = 2, l.pp = 2, l.sequence_parallel = true; }),
            with([](TestLayout& l) {
              l.pp = 2, l.vpp = 2, l.dp = 2, l.zero = 2;
              l.schedule = PipelineSchedule::interleaved_one_f_one_b;
            }),
            with([](TestLayout& l) { l.tp = 2, l.dp = 2, l.zero = 3; })};
  }
  return {};
}

// Losses of a layout against the single rank in the same precision, relative. Low precision
// rounds differently when the work is split (bf16 products of tp pieces, reduction orders):
// bf16 keeps 8 significant bits, fp16 11. Measured over these 6 steps (2026-12-01): at most
// 1.1e-4 in bf16 (ep 2 MoE) and 1.3e-5 in fp16; the loss itself falls by 4%. Gradient norms
// get 20 times as much (measured 2.1e-3 and 1.3e-3).
double tolerance(Precision precision) { return precision == Precision::bf16 ? 5e-4 : 1e-4; }

TEST(Precision, EveryLayoutTrainsAsTheSingleRankDoes) {
  Comm world = Comm::world(120);
  Comm self = world.split(world.rank(), 0, "self");
  for (Precision precision : {Precision::bf16, Precision::fp16}) {
    const double rtol = tolerance(precision);
    for (const bool moe : {false, true}) {
      TestLayout single;
      single.moe = moe;
      const TrainResult reference = testing::train_on(self, tiny_run(precision, single));
      // The low-precision run follows the fp32 one (measured 1.0e-4 in both).
      const TrainResult fp32 = testing::train_on(self, tiny_run(Precision::fp32, single));
      for (size_t i = 0; i < fp32.losses.size(); ++i) {
        EXPECT_NEAR(reference.losses[i], fp32.losses[i], 5e-4 * fp32.losses[i])
            << name_of(precision) << " vs fp32, step " << i + 1;
      }
      for (const TestLayout& layout : layouts_for(world.size())) {
        if (layout.moe != moe) continue;
        const TrainResult run = testing::train_on(world, tiny_run(precision, layout));
        ASSERT_EQ(run.losses.size(), reference.losses.size());
        for (size_t i = 0; i < run.losses.size(); ++i) {
          EXPECT_NEAR(run.losses[i], reference.losses[i], rtol * reference.losses[i])
              << name_of(precision) << " " << layout.name() << ", step " << i + 1;
          EXPECT_NEAR(run.grad_norms[i], reference.grad_norms[i],
                      20 * rtol * reference.grad_norms[i])
              << name_of(precision) << " " << layout.name() << ", step " << i + 1;
        }
      }
    }
  }
}

// Per rank, bytes per parameter (Psi local elements, N = dp): bf16 parameters 2, float32
// gradients 4, optimizer 12 (float32 master, both moments), each sharded by ZeRO as in fp32.
TEST(Precision, MemoryByKindMatchesTheFormulas) {
  Comm world = Comm::world(120);
  const double n = world.size();
  for (int64_t zero = 0; zero <= 3; ++zero) {
    TestLayout layout;
    layout.dp = world.size();
    layout.zero = zero;
    const std::string what = "zero " + std::to_string(zero) + " dp " + std::to_string(world.size());
    double psi = 0;
    auto count = [&psi](const Trainer& trainer) {
      psi = 0;
      for (const Parameter* parameter : trainer.parameters()) psi += parameter->value.numel();
    };
    const StepMetrics bf16 =
        testing::train_on(world, tiny_run(Precision::bf16, layout, 2), count).metrics.back();
    const StepMetrics fp32 =
        testing::train_on(world, tiny_run(Precision::fp32, layout, 2)).metrics.back();
    const double params = 2 * psi / (zero == 3 ? n : 1.0);
    const double grads = 4 * psi / (zero >= 2 ? n : 1.0);
    const double optimizer = 12 * psi / (zero >= 1 ? n : 1.0);
    EXPECT_NEAR(bf16.mem.params, params, 0.05 * params) << what;
    EXPECT_NEAR(bf16.mem.grads, grads, 0.05 * grads) << what;
    EXPECT_NEAR(bf16.mem.optimizer, optimizer, 0.05 * optimizer) << what;
    EXPECT_LE(bf16.mem.params, 0.55 * fp32.mem.params) << what;
    EXPECT_GT(bf16.mem.optimizer, 1.45 * fp32.mem.optimizer) << what;  // the masters
  }
}

// One tensor of a checkpoint, whole, in float64; and the dtype index.json records for it.
at::Tensor read_tensor(const std::string& dir, const std::string& name,
                       std::vector<int64_t> shape) {
  ShardedTensor tensor{name, at::zeros(shape, at::kDouble), shape,
                       std::vector<int64_t>(shape.size(), 0), true};
  std::vector<ShardedTensor> tensors{tensor};
  load_checkpoint(dir, tensors);
  return tensors[0].local;
}
std::string saved_dtype(const std::string& dir, const std::string& name) {
  std::ifstream file(dir + "/index.json");
  return nlohmann::json::parse(file).at("tensors").at(name).at("dtype").get<std::string>();
}

// Norm weights start at 1.0, where bf16's spacing is 2^-7 below and 2^-8 above: Adam moves
// each by about lr = 1e-3 a step, which bf16 cannot hold, but the float32 master can. After
// one step the bf16 weights are still exactly 1 and the checkpoint (the masters) is not; after
// ten the rounded masters have moved the bf16 weights too.
TEST(Precision, MasterWeightsKeepUpdatesBelowBf16Resolution) {
  Comm world = Comm::world(120);
  testing::TempDir local("strata-masters");
  const std::string path = testing::rank0_path(world, local.path());
  TestLayout layout;  // the masters sharded by ZeRO-1 over the ranks
  layout.dp = world.size();
  layout.zero = 1;
  Config config = tiny_run(Precision::bf16, layout, 10);
  config.train.lr = config.train.min_lr = 1e-3;
  config.train.warmup_steps = 0;
  config.checkpoint.dir = path;
  config.checkpoint.every = 1;
  config.checkpoint.keep = 0;
  const std::string norm = "blocks.0.norm1.weight";
  const int64_t C = config.model.d_model;
  std::vector<at::Tensor> after;  // the bf16 weight after steps 1..10
  testing::train_on(world, config, nullptr, [&](Trainer& trainer) {
    trainer.set_gradient_hook([&trainer, &after, &norm](int64_t) {
      for (const Parameter* parameter : trainer.parameters()) {
        if (parameter->name == norm) after.push_back(parameter->value.detach().clone());
      }
    });
  });
  ASSERT_EQ(after.size(), 10u);  // after[s]: before step s + 1's update
  EXPECT_EQ(after[0].scalar_type(), at::kBFloat16);
  EXPECT_TRUE(after[1].eq(1.0).all().item<bool>()) << after[1];
  world.barrier();
  const std::string first = path + "/step_00000001";
  EXPECT_EQ(saved_dtype(first, norm), "F32");
  const at::Tensor master = read_tensor(first, norm, {C});
  EXPECT_TRUE(master.ne(1.0).any().item<bool>()) << master;
  EXPECT_LT((master - 1.0).abs().max().item<double>(), 2e-3);
  EXPECT_TRUE(after[9].ne(1.0).any().item<bool>()) << after[9];
  // The bf16 weights are the masters rounded.
  const at::Tensor last = read_tensor(path + "/step_00000009", norm, {C});
  EXPECT_TRUE(last.to(at::kFloat).to(at::kBFloat16).eq(after[9]).all().item<bool>());
  world.barrier();  // rank 0 removes the directory when the test ends
}

// Resuming restores the masters, moments and (fp16) the loss scaler: bit-identical losses.
// A checkpoint loads into every other precision, which continues the run within its tolerance.
TEST(Precision, ResumeIsBitIdenticalAndCheckpointsMoveBetweenPrecisions) {
  Comm world = Comm::world(120);
  testing::TempDir local("strata-precision-ckpt");
  const std::string dir = testing::rank0_path(world, local.path());
  TestLayout layout;
  layout.dp = world.size();
  layout.zero = world.size() > 1 ? 1 : 0;
  for (Precision precision : {Precision::bf16, Precision::fp16}) {
    Config config = tiny_run(precision, layout);
    config.checkpoint.dir = dir + "/" + name_of(precision);
    config.checkpoint.every = 3;
    const TrainResult uninterrupted = testing::train_on(world, config);
    world.barrier();
    Config resumed = tiny_run(precision, layout);
    resumed.checkpoint.resume = config.checkpoint.dir + "/step_00000003";
    const TrainResult second = testing::train_on(world, resumed);
    ASSERT_EQ(second.first_step, 3);
    for (size_t i = 0; i < second.losses.size(); ++i) {
      EXPECT_EQ(second.losses[i], uninterrupted.losses[3 + i])
          << name_of(precision) << " resumed, step " << 4 + i;
      EXPECT_EQ(second.metrics[i].loss_scale, uninterrupted.metrics[3 + i].loss_scale);
    }
    for (Precision other : {Precision::fp32, Precision::bf16, Precision::fp16}) {
      if (other == precision) continue;
      Config moved = tiny_run(other, layout);
      moved.checkpoint.resume = resumed.checkpoint.resume;
      const TrainResult continued = testing::train_on(world, moved);
      ASSERT_EQ(continued.first_step, 3);
      const double rtol = tolerance(Precision::bf16);
      for (size_t i = 0; i < continued.losses.size(); ++i) {
        EXPECT_NEAR(continued.losses[i], uninterrupted.losses[3 + i],
                    rtol * uninterrupted.losses[3 + i])
            << name_of(precision) << " checkpoint in " << name_of(other) << ", step " << 4 + i;
      }
    }
  }
}

// An inf in one rank's gradients (injected on the last rank only, twice) skips both steps on
// every rank: no update, no optimizer step counted, the scale kept after the first overflow
// (hysteresis 2) and halved after the second.
TEST(Precision, Fp16OverflowOnOneRankSkipsTheStepEverywhere) {
  Comm world = Comm::world(120);
  TestLayout layout;
  layout.tp = world.size() >= 2 ? 2 : 1;
  layout.dp = world.size() / layout.tp;
  Config config = tiny_run(Precision::fp16, layout);
  const bool injects = world.rank() == world.size() - 1;
  std::vector<std::vector<at::Tensor>> values;  // per step: this rank's parameters, before
  const TrainResult run = testing::train_on(world, config, nullptr, [&](Trainer& trainer) {
    trainer.set_gradient_hook([&](int64_t step) {
      values.emplace_back();
      for (const Parameter* parameter : trainer.parameters()) {
        values.back().push_back(parameter->value.detach().clone());
      }
      if (injects && (step == 2 || step == 3)) {
        // A replicated parameter (norm weight) on the last tp rank: only its own copy.
        at::Tensor grad = trainer.parameters().back()->value.grad();
        grad.view(-1)[0] = std::numeric_limits<float>::infinity();
      }
    });
  });
  ASSERT_EQ(run.metrics.size(), 6u);
  for (size_t i = 0; i < run.metrics.size(); ++i) {
    const bool skipped = i == 2 || i == 3;
    EXPECT_EQ(run.metrics[i].skipped, skipped) << "step " << i + 1;
    EXPECT_EQ(std::isnan(run.grad_norms[i]), skipped) << "step " << i + 1;
    EXPECT_EQ(run.metrics[i].loss_scale, i <= 3 ? 65536.0 : 32768.0) << "step " << i + 1;
    EXPECT_TRUE(run.metrics[i].loss_scaling);
  }
  EXPECT_EQ(run.metrics.back().skipped_steps, 2);
  // Steps 3 and 4 changed nothing: the parameters before steps 3, 4 and 5 are the same;
  // steps 2 and 5 were taken.
  ASSERT_EQ(values.size(), 6u);
  bool step_2_moved = false, step_5_moved = false;
  for (size_t p = 0; p < values[2].size(); ++p) {
    EXPECT_TRUE(values[2][p].equal(values[4][p])) << "parameter " << p;
    step_2_moved = step_2_moved || !values[1][p].equal(values[2][p]);
    step_5_moved = step_5_moved || !values[4][p].equal(values[5][p]);
  }
  EXPECT_TRUE(step_2_moved);
  EXPECT_TRUE(step_5_moved);
}

// Gradients travelling in bf16 (compression.gradients = "bf16") halve the data-parallel
// reduction's bytes; training follows the fp32 reduction within bf16's tolerance. On one rank
// nothing would travel: the config is refused.
TEST(Precision, Bf16GradientReductionHalvesTheBytes) {
  Comm world = Comm::world(120);
  for (Precision precision : {Precision::fp32, Precision::bf16}) {
    TestLayout layout;
    layout.dp = world.size();
    if (world.size() == 1) {
      layout.gradients = GradientCompression::bf16;
      EXPECT_THROW(testing::train_on(world, tiny_run(precision, layout)), UserError);
      continue;
    }
    const TrainResult fp32_wire = testing::train_on(world, tiny_run(precision, layout));
    layout.gradients = GradientCompression::bf16;
    const TrainResult bf16_wire = testing::train_on(world, tiny_run(precision, layout));
    for (size_t i = 0; i < fp32_wire.losses.size(); ++i) {
      const auto bytes = [](const StepMetrics& m) { return m.comm.at("all_reduce").get<double>(); };
      // The loss's own all-reduce (a few float64 scalars) is the rest.
      EXPECT_NEAR(bytes(bf16_wire.metrics[i]), 0.5 * bytes(fp32_wire.metrics[i]),
                  0.01 * bytes(fp32_wire.metrics[i]))
          << name_of(precision) << " step " << i + 1;
      EXPECT_NEAR(bf16_wire.losses[i], fp32_wire.losses[i],
                  tolerance(Precision::bf16) * fp32_wire.losses[i])
          << name_of(precision) << " step " << i + 1;
    }
  }
}

}  // namespace
}  // namespace strata
