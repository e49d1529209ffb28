// Activation recomputation (train.recompute) on the real MPI transport: full and selective
// recomputation (the latter with the eager kernel, the only one whose core it repeats without
// cp), of all layers or the first one, train bit-identically to no recomputation —
// on one rank (dense and MoE), with tp + sequence parallelism, with pipelines under 1F1B and
// ZB-H1 (deferred weight gradients), with ring context parallelism and with ZeRO-3 — and full
// recomputation keeps a fraction of the activations.
#include <gtest/gtest.h>

#include <map>

#include "strata/core/precision.h"
#include "strata/kernels/matmul.h"
#include "strata/parallel/linear.h"
#include "test_configs.h"
#include "test_support.h"
#include "train_support.h"

namespace strata {
namespace {

using testing::TestLayout;
using testing::with;

// 8 layers of width 64: the blocks' activations outweigh the head's logits.
Config tiny_run(const TestLayout& layout, Recompute recompute, int64_t recompute_layers,
                AttentionKernel attention = AttentionKernel::blockwise) {
  Config config = testing::tiny_training_run(6, 4, 2);
  config.model.attention = attention;
  config.model.d_model = 64;
  config.model.n_layers = 8;
  config.model.tie_embeddings = true;
  if (layout.moe) {
    config.model.moe.num_experts = 4;
    config.model.moe.top_k = 2;
    config.model.moe.every = 2;
    config.model.moe.capacity_factor = 1.0;
    config.model.moe.aux_loss_coef = 0.01;
  }
  layout.apply_to(config);
  config.train.recompute = recompute;
  config.train.recompute_layers = recompute_layers;
  return config;
}

std::vector<TestLayout> layouts_for(int world) {
  const TestLayout moe = with([](TestLayout& l) { l.moe = true; });
  if (world == 1) return {TestLayout{}, moe};
  return {with([](TestLayout& l) { l.tp = 2, l.sequence_parallel = true; }),
          with([](TestLayout& l) { l.pp = 2; }),
          with([](TestLayout& l) { l.pp = 2, l.schedule = PipelineSchedule::zb_h1; }),
          with([](TestLayout& l) { l.cp = 2; }),
          // ZeRO-3: the recomputed forward runs on the parameters gathered again for backward
          with([](TestLayout& l) { l.dp = 2, l.zero = 3; })};
}

TEST(Recompute, EveryModeTrainsBitIdenticallyToNone) {
  Comm world = Comm::world(120);
  for (const TestLayout& layout : layouts_for(world.size())) {
    // Selective with the eager kernel: under the blockwise one without cp it runs as none
    // (selective_recomputes_attention); cp computes with the blockwise kernel only.
    struct Mode {
      Recompute recompute;
      int64_t layers;
      AttentionKernel attention;
    };
    const AttentionKernel recomputed_core =
        layout.cp > 1 ? AttentionKernel::blockwise : AttentionKernel::eager;
    const Mode modes[] = {{Recompute::full, 0, AttentionKernel::blockwise},
                          {Recompute::full, 1, AttentionKernel::blockwise},
                          {Recompute::selective, 0, recomputed_core}};
    std::map<AttentionKernel, TrainResult> nones;
    for (const auto& [mode, layers, attention] : modes) {
      if (!nones.count(attention))
        nones[attention] =
            testing::train_on(world, tiny_run(layout, Recompute::none, 0, attention));
      const TrainResult& none = nones[attention];
      const std::string what = layout.name() + " " + name_of(mode) + " layers " +
                               std::to_string(layers) + " " + name_of(attention);
      const TrainResult run = testing::train_on(world, tiny_run(layout, mode, layers, attention));
      ASSERT_EQ(run.losses.size(), none.losses.size()) << what;
      for (size_t i = 0; i < none.losses.size(); ++i) {
        EXPECT_EQ(run.losses[i], none.losses[i]) << what << " step " << i + 1;
        EXPECT_EQ(run.metrics[i].grad_norm, none.metrics[i].grad_norm) << what << " step " << i + 1;
        if (layout.moe) {
          EXPECT_EQ(run.metrics[i].moe.dump(), none.metrics[i].moe.dump()) << what;
        }
      }
    }
  }
}

// Full recomputation keeps each block's input only: on this model at most 40% of the
// activations without recomputation (the head's logits stay), per rank of each layout.
TEST(Recompute, FullKeepsAFractionOfTheActivations) {
  Comm world = Comm::world(120);
  const TestLayout layout = layouts_for(world.size()).front();
  auto peak = [&](Recompute mode, int64_t layers) {
    return static_cast<double>(testing::train_on(world, tiny_run(layout, mode, layers))
                                   .metrics.back()
                                   .mem.activations_peak);
  };
  const double none = peak(Recompute::none, 0), full = peak(Recompute::full, 0);
  const double first_layer = peak(Recompute::full, 1);
  EXPECT_LE(full, 0.4 * none) << "full " << full << " none " << none;
  EXPECT_LT(full, first_layer);
  EXPECT_LT(first_layer, none);
}

// The activation memory of shared/reference/formulas.md (Korthikanti et al. 2022), item by
// item for strata's layer (docs/parallelism.md, "Activation recomputation"): e bytes per
// element (4 in fp32, 2 in bf16), n = s*b tokens of one microbatch, F = 4h, a heads.
//   both norm inputs, e bytes (float32 for float16, whose
//   norms run on float32 copies; bf16's fused kernel keeps its
//   bf16 input, kernels/norm_rows.h):                      2 * e_norm * n*h
//   the q/kv and out-projection inputs, Q, K, V:          5 * e * n*h (K = V = h wide here)
//   the MLP input, up-projection output, GELU output:     e * (n*h + 2 * n*F)
//   attention core (dropped by selective recompute, which repeats only the eager core here):
//     blockwise: its log-sum-exp 4*a*n (its output is the out-projection's input, counted
//     above); eager: the float32 softmax a*s*s*b (and its e-byte copy in bf16)
// Korthikanti's 34*s*b*h + 5*a*s*s*b bytes are these items at e = 2 with two dropout masks
// (1 byte each per element) and the dropout's own copy of the softmax, which strata lacks.
// Full recomputation keeps each layer's input e*n*h, plus one layer's items while that layer
// is recomputed. The head keeps the final norm's e_norm-byte input, its e-byte output, the
// float32 log-probabilities 4*n*V and, at the peak, their gradient.
double activation_formula_bytes(const Config& config, Recompute mode) {
  const ModelConfig& model = config.model;
  const double e = config.train.precision == Precision::fp32 ? 4.0 : 2.0;
  const double n = static_cast<double>(config.parallel.micro_batch * model.seq_len);
  const double s = static_cast<double>(model.seq_len), h = static_cast<double>(model.d_model);
  const double a = static_cast<double>(model.n_heads), F = 4 * h;
  const double L = static_cast<double>(model.n_layers), V = static_cast<double>(model.vocab_size);
  const double e_norm = config.train.precision == Precision::fp16 ? 4.0 : e;
  const double kept = 2 * e_norm * n * h + 5 * e * n * h + e * (n * h + 2 * n * F);
  const double core =
      model.attention == AttentionKernel::blockwise ? 4 * a * n : (4 + (e < 4 ? e : 0)) * a * s * n;
  const double head = e_norm * n * h + e * n * h + 2 * 4 * n * V;
  // 16-bit products that run in float32 on CPU (the routes the run's probe chose for each
  // class, kernels/matmul.h: fp16 always, bf16 where it is faster) hold a float32 result of
  // 4*n*F until it is rounded, on top of whatever the peak holds: the forward's up-projection
  // x W^T at the forward's peak; under full recomputation the peak is in a recomputed layer's
  // backward, which also runs the down-projection's input gradient dy W (n x F).
  const at::ScalarType dtype = compute_dtype(config.train.precision);
  const bool widened_forward = class_route({dtype, false, true}).in_float32;
  const bool widened_input_grad = class_route({dtype, false, false}).in_float32;
  const double transient = widened_forward ? 4 * n * F : 0.0;
  const double backward_transient = widened_forward || widened_input_grad ? 4 * n * F : 0.0;
  // Selective recomputation that repeats no core (the blockwise kernel's) keeps what none keeps.
  switch (effective_recompute(mode, model.attention, /*context_parallel=*/false)) {
    case Recompute::none:
      return L * (kept + core) + head + transient;
    case Recompute::selective:
      return L * kept + head + transient;
    case Recompute::full:
      return L * e * n * h + kept + core + head + backward_transient;
  }
  return 0;
}

// mem.activations_peak within 10% of the formula in every mode, for both attention kernels,
// in fp32 and bf16 (one rank: each rank of the test checks alone).
TEST(Recompute, ActivationPeakMatchesTheFormula) {
  Comm world = Comm::world(120);
  Comm self = world.split(world.rank(), 0, "self");
  // Wide enough that the layers, not the head's logits, hold most of the activations.
  Config config = testing::tiny_training_run(2, 4, 4);
  config.model.d_model = 128;
  config.model.n_layers = 8;
  config.model.seq_len = 128;
  config.model.tie_embeddings = true;
  for (AttentionKernel kernel : {AttentionKernel::blockwise, AttentionKernel::eager}) {
    for (Precision precision : {Precision::fp32, Precision::bf16}) {
      for (Recompute mode : {Recompute::none, Recompute::selective, Recompute::full}) {
        config.model.attention = kernel;
        config.train.precision = precision;
        config.train.recompute = mode;
        const double measured = static_cast<double>(
            testing::train_on(self, config).metrics.back().mem.activations_peak);
        const double formula = activation_formula_bytes(config, mode);  // the run's routes
        EXPECT_NEAR(measured, formula, 0.1 * formula)
            << name_of(kernel) << " " << name_of(precision) << " " << name_of(mode);
      }
    }
  }
}

}  // namespace
}  // namespace strata
