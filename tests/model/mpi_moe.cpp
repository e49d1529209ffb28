// Expert parallelism on the real MPI transport: the MoE layer over an ep group against the
// same layer with every expert on one rank (outputs, every gradient, all-to-all bytes from
// the counters against a count made independently from the routing), skewed routing edge
// cases, and parity of 20 training steps of every layout with the single-rank run.
#include <gtest/gtest.h>

#include <ATen/CPUGeneratorImpl.h>

#include <cmath>
#include <cstring>

#include "strata/infer/generate.h"
#include "strata/model/moe.h"
#include "test_configs.h"
#include "test_support.h"
#include "train_support.h"

namespace strata {
namespace {

at::Tensor shared_normal(std::vector<int64_t> shape, uint64_t seed, double std = 1.0) {
  auto generator = at::make_generator<at::CPUGeneratorImpl>(seed);
  return at::normal(0.0, std, shape, generator, at::TensorOptions(at::kDouble));
}

ModelConfig layer_config(int64_t experts, int64_t top_k, double capacity_factor,
                         Activation activation = Activation::gelu) {
  ModelConfig config;
  config.d_model = 16;
  config.d_ff = 24;
  config.seq_len = 12;
  config.moe.num_experts = experts;
  config.moe.top_k = top_k;
  config.moe.capacity_factor = capacity_factor;
  config.moe.activation = activation;
  return config;
}

struct LayerCase {
  int64_t experts, top_k;
  double capacity_factor;
  Activation activation;
  bool skewed;  // every token prefers expert 0: other experts, and whole ranks, get none
};

// Kept assignments of each expert, counted with plain loops (an independent implementation
// of top-k with lowest-index ties and per-sequence capacity in token order).
std::vector<int64_t> kept_per_expert(const at::Tensor& x, const at::Tensor& router,
                                     const ModelConfig& config) {
  const int64_t B = x.size(0), T = x.size(1), E = config.moe.num_experts;
  at::Tensor probs = at::softmax(at::matmul(x, router.t()), -1).contiguous();
  auto p = probs.accessor<double, 3>();
  const int64_t capacity = moe_capacity(config);
  std::vector<int64_t> kept(E, 0);
  for (int64_t b = 0; b < B; ++b) {
    std::vector<int64_t> taken(E, 0);
    for (int64_t t = 0; t < T; ++t) {
      std::vector<bool> used(E, false);
      for (int64_t choice = 0; choice < config.moe.top_k; ++choice) {
        int64_t best = -1;
        for (int64_t e = 0; e < E; ++e) {
          if (!used[e] && (best < 0 || p[b][t][e] > p[b][t][best])) best = e;
        }
        used[best] = true;
        if (capacity == 0 || taken[best] < capacity) ++kept[best];
        ++taken[best];
      }
    }
  }
  return kept;
}

void check_layer(Comm& ep, const LayerCase& c) {
  const ModelConfig config = layer_config(c.experts, c.top_k, c.capacity_factor, c.activation);
  const int64_t E = c.experts, C = config.d_model, F = config.ff_dim(), T = config.seq_len;
  const int64_t n = ep.size(), r = ep.rank(), E_l = E / n;
  const int64_t expert_in = c.activation == Activation::swiglu ? 2 * F : F;
  // Global weights, the same on every rank; each rank has its own tokens (as dp ranks do).
  at::Tensor router = shared_normal({E, C}, 1, 0.5), fc = shared_normal({E, expert_in, C}, 2, 0.3),
             out = shared_normal({E, C, F}, 3, 0.3);
  at::Tensor x = shared_normal({3, T, C}, 100 + r);
  if (c.skewed) {
    x = x.abs();
    router.zero_();
    router[0].fill_(1.0);  // logit 0 > 0 = every other logit, for every token
  }
  at::Tensor upstream = shared_normal({3, T, C}, 200 + r);

  // Reference: every expert here, this rank's tokens only.
  at::Tensor x_ref = x.clone().requires_grad_(true),
             router_ref = router.clone().requires_grad_(true),
             fc_ref = fc.clone().requires_grad_(true), out_ref = out.clone().requires_grad_(true);
  MoeOutput expected = moe_forward(x_ref, {router_ref, fc_ref, out_ref}, config, nullptr);
  (expected.y * upstream).sum().backward();

  at::Tensor x_ep = x.clone().requires_grad_(true), router_ep = router.clone().requires_grad_(true);
  at::Tensor fc_ep = fc.narrow(0, r * E_l, E_l).clone().requires_grad_(true);
  at::Tensor out_ep = out.narrow(0, r * E_l, E_l).clone().requires_grad_(true);
  ep.counters().reset();
  MoeOutput got = moe_forward(x_ep, {router_ep, fc_ep, out_ep}, config, &ep);
  (got.y * upstream).sum().backward();
  const int64_t all_to_all_bytes = ep.counters().bytes[static_cast<size_t>(CommKind::AllToAll)];

  EXPECT_EQ(testing::compare_tensors(got.y, expected.y, 1e-12, 1e-13), "");
  EXPECT_EQ(testing::compare_tensors(x_ep.grad(), x_ref.grad(), 1e-12, 1e-13), "");
  EXPECT_EQ(testing::compare_tensors(router_ep.grad(), router_ref.grad(), 1e-12, 1e-13), "");
  EXPECT_EQ(got.stats.load, expected.stats.load);
  EXPECT_EQ(got.stats.dropped, expected.stats.dropped);
  // An expert's gradient sums the tokens of every rank: the reference's, summed over ranks.
  at::Tensor fc_sum = fc_ref.grad().clone(), out_sum = out_ref.grad().clone();
  ep.all_reduce(fc_sum, ReduceOp::Sum);
  ep.all_reduce(out_sum, ReduceOp::Sum);
  EXPECT_EQ(testing::compare_tensors(fc_ep.grad(), fc_sum.narrow(0, r * E_l, E_l), 1e-11, 1e-13),
            "");
  EXPECT_EQ(testing::compare_tensors(out_ep.grad(), out_sum.narrow(0, r * E_l, E_l), 1e-11, 1e-13),
            "");

  // Bytes: the counts (E_l int64 to each peer), then the rows to peers and back, forward and
  // backward: 2 * (rows sent to peers + rows received from peers) * C * 8 bytes.
  const std::vector<int64_t> kept = kept_per_expert(x, router, config);
  at::Tensor kept_all = at::empty({n, E}, at::kLong);
  ep.all_gather(kept_all, at::tensor(kept, at::kLong).view({1, E}));
  int64_t sent = 0, received = 0;
  for (int64_t e = 0; e < E; ++e) {
    if (e / E_l != r) sent += kept[e];
  }
  for (int64_t source = 0; source < n; ++source) {
    if (source == r) continue;
    received += kept_all[source].narrow(0, r * E_l, E_l).sum().item<int64_t>();
  }
  EXPECT_EQ(got.stats.rows_sent_to_peers, sent);
  EXPECT_EQ(got.stats.rows_received_from_peers, received);
  EXPECT_EQ(all_to_all_bytes, (n - 1) * E_l * 8 + 2 * (sent + received) * C * 8)
      << "sent " << sent << " received " << received;
  if (c.skewed) {
    // Experts past top_k get nothing; with ep > 1 the last rank's experts get nothing.
    EXPECT_EQ(got.stats.load[E - 1], 0);
    EXPECT_EQ(got.stats.load[0], 3 * T);  // counted before dropping
  }
}

class ExpertParallelLayer : public ::testing::TestWithParam<LayerCase> {};

TEST_P(ExpertParallelLayer, EqualsAllExpertsOnOneRank) {
  Comm world = Comm::world(60);
  // The whole world as the ep group, and (world of 4) two ep groups of 2.
  check_layer(world, GetParam());
  if (world.size() == 4) {
    Comm pairs = world.split(world.rank() / 2, world.rank(), "ep2");
    check_layer(pairs, GetParam());
  }
}

INSTANTIATE_TEST_SUITE_P(Cases, ExpertParallelLayer,
                         ::testing::Values(LayerCase{4, 1, 0.0, Activation::gelu, false},
                                           LayerCase{8, 2, 1.0, Activation::gelu, false},
                                           LayerCase{4, 2, 1.25, Activation::swiglu, false},
                                           LayerCase{8, 1, 0.0, Activation::swiglu, false},
                                           LayerCase{4, 1, 0.0, Activation::gelu, true},
                                           LayerCase{4, 2, 1.0, Activation::gelu, true},
                                           LayerCase{8, 1, 1.0, Activation::swiglu, true}));

// ---------------------------------------------------------------------------------------
// Training parity: 20 steps of each layout against the single-rank run.

struct Model {
  int64_t experts, top_k;
  double capacity_factor;
  Activation activation;
};

using testing::TestLayout;

// ep, tp and pp, sequence parallelism and the ZeRO stage (expert state sharded over expert_dp,
// the rest over dp); dp takes the ranks left over.
TestLayout moe_layout(int64_t ep, int64_t tp, int64_t pp, bool sequence_parallel,
                      int64_t zero = 0) {
  return testing::with([&](TestLayout& l) {
    l.ep = ep, l.tp = tp, l.pp = pp, l.sequence_parallel = sequence_parallel, l.zero = zero;
  });
}

Config training_run(const Model& m) {
  Config config = testing::tiny_training_run(20, 8, 2);
  config.model.vocab_size = 64;
  config.model.d_ff = 64;
  config.model.moe.num_experts = m.experts;
  config.model.moe.top_k = m.top_k;
  config.model.moe.capacity_factor = m.capacity_factor;
  config.model.moe.activation = m.activation;
  config.model.moe.aux_loss_coef = 0.01;
  config.model.moe.z_loss_coef = 0.001;
  config.model.init_std = 0.1;  // routing decided by the inputs, not by ties
  return config;
}

TrainResult train_with(Comm& world, Config config, TestLayout layout) {
  layout.dp = world.size() / (layout.tp * layout.pp);
  layout.apply_to(config);
  config.parallel.micro_batch =
      std::min<int64_t>(2, config.train.global_batch / config.parallel.dp);
  config.parallel.microbatches = 0;
  return testing::train_on(world, config);
}

void expect_parity(Comm& world, const Model& model, const TestLayout& layout) {
  Comm self = world.split(world.rank(), 0, "self");
  const TrainResult reference = train_with(self, training_run(model), moe_layout(1, 1, 1, false));
  const TrainResult parallel = train_with(world, training_run(model), layout);
  const std::string where =
      "ep " + std::to_string(layout.ep) + " tp " + std::to_string(layout.tp) + " pp " +
      std::to_string(layout.pp) + (layout.sequence_parallel ? " sp" : "") + " zero " +
      std::to_string(layout.zero) + ", " + std::to_string(model.experts) + " experts top-" +
      std::to_string(model.top_k) + " capacity " + std::to_string(model.capacity_factor);
  ASSERT_EQ(parallel.losses.size(), 20u) << where;
  ASSERT_EQ(parallel.moe.size(), 20u) << where;
  for (size_t i = 0; i < reference.losses.size(); ++i) {
    EXPECT_NEAR(parallel.losses[i], reference.losses[i], 1e-4 * reference.losses[i])
        << "step " << i + 1 << ", " << where;
    // The norm covers every gradient, expert weights included (their reduction over
    // expert_dp and ep, which AdamW's scale invariance could hide from the losses).
    EXPECT_NEAR(parallel.grad_norms[i], reference.grad_norms[i], 1e-4 * reference.grad_norms[i])
        << "step " << i + 1 << ", " << where;
    EXPECT_NEAR(parallel.moe[i].aux_loss, reference.moe[i].aux_loss,
                1e-4 * reference.moe[i].aux_loss)
        << "step " << i + 1 << ", " << where;
    EXPECT_EQ(parallel.moe[i].load, reference.moe[i].load) << "step " << i + 1 << ", " << where;
    EXPECT_DOUBLE_EQ(parallel.moe[i].dropped_fraction, reference.moe[i].dropped_fraction)
        << "step " << i + 1 << ", " << where;
  }
  if (model.capacity_factor > 0) {
    EXPECT_GT(reference.moe[0].dropped_fraction, 0.0) << "capacity never bound: " << where;
  } else {
    EXPECT_EQ(reference.moe[0].dropped_fraction, 0.0) << where;
  }
}

TEST(ExpertParallelTraining, TwentyStepsEqualSingleRank) {
  Comm world = Comm::world(300);
  const int64_t n = world.size();
  // Each layout with two models, so that every value of experts, top_k and capacity meets
  // ep > 1, tp = 2 and pp = 2.
  std::vector<std::pair<Model, TestLayout>> runs = {
      {{4, 1, 0.0, Activation::gelu}, moe_layout(n, 1, 1, false)},
      {{8, 2, 1.0, Activation::gelu}, moe_layout(n, 1, 1, false)},
      {{4, 2, 1.0, Activation::swiglu},
       moe_layout(1, 1, 1, false)},  // ep = 1: experts replicated over dp
      {{8, 2, 0.0, Activation::gelu},
       moe_layout(n, 1, 1, false, 2)},  // ZeRO-2: expert state sharded too
  };
  if (n == 4) {
    runs.push_back(
        {{8, 1, 1.25, Activation::gelu}, moe_layout(2, 1, 1, false)});  // ep 2 x expert_dp 2
    runs.push_back(
        {{4, 2, 1.0, Activation::gelu}, moe_layout(2, 1, 1, false, 3)});  // ... with ZeRO-3
    runs.push_back(
        {{4, 2, 1.0, Activation::gelu}, moe_layout(2, 2, 1, true)});  // tp 2 (sequence parallel)
    runs.push_back({{8, 1, 0.0, Activation::swiglu}, moe_layout(2, 2, 1, false)});
    runs.push_back({{8, 2, 0.0, Activation::gelu}, moe_layout(2, 1, 2, false)});  // pp 2
    runs.push_back({{4, 1, 1.0, Activation::swiglu}, moe_layout(2, 1, 2, false)});
  }
  for (const auto& [model, layout] : runs) expect_parity(world, model, layout);
}

// A checkpoint written with the experts split over ep (and, on 4 ranks, the rest over tp)
// holds every expert once: a single rank loads the whole model and finds each rank's pieces.
TEST(ExpertParallelCheckpoint, WrittenAtEpLoadsWithEveryExpertOnOneRank) {
  Comm world = Comm::world(120);
  std::unique_ptr<testing::TempDir> owned;
  if (world.rank() == 0) owned = std::make_unique<testing::TempDir>("strata-moe-ckpt");
  const std::string root = testing::rank0_path(world, owned ? owned->path() : "");

  const int64_t tp = world.size() == 4 ? 2 : 1;
  Config config = training_run({8, 2, 1.0, Activation::swiglu});
  config.train.steps = 3;
  config.checkpoint.dir = root + "/ckpt";
  config.parallel.tp = tp;
  config.parallel.dp = world.size() / tp;
  config.parallel.ep = 2;
  config.parallel.micro_batch = config.train.global_batch / config.parallel.dp;
  std::vector<Parameter> pieces;  // this rank's, kept past the trainer
  const TrainResult result = testing::train_on(world, config, [&](const Trainer& trainer) {
    for (const Parameter* parameter : trainer.parameters()) {
      pieces.push_back(*parameter);
      pieces.back().value = parameter->value.clone();
    }
  });
  world.barrier();
  ASSERT_FALSE(result.last_checkpoint.empty());

  std::unique_ptr<GPT> whole = load_model_from_checkpoint(result.last_checkpoint, nullptr, nullptr);
  int experts_checked = 0;
  for (const Parameter& piece : pieces) {
    const at::Tensor& global = whole->parameter(piece.name).value;
    for (const auto& slice : piece.spec.local_slices()) {
      at::Tensor want = global, got = piece.value;
      for (size_t d = 0; d < slice.shape.size(); ++d) {
        want = want.narrow(d, slice.global_offsets[d], slice.shape[d]);
      }
      const int64_t dim = std::max<int64_t>(0, piece.spec.split_dim);
      got = got.narrow(dim, slice.local_start, slice.shape[dim]);
      EXPECT_TRUE(at::equal(got, want)) << piece.name;
    }
    if (piece.spec.split_axis == ShardAxis::Ep) ++experts_checked;
  }
  EXPECT_EQ(experts_checked, 4);  // fc and out of both layers
  world.barrier();                // rank 0 removes the directory after everyone read it
}

}  // namespace
}  // namespace strata
