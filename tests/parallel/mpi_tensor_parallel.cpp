// Tensor and sequence parallelism on the real MPI transport, with the whole world as the tp
// group: the regions, vocab-parallel cross-entropy, and parity of the GPT (losses and every
// gradient slice) and of 20 training steps with the unsharded model.
#include <gtest/gtest.h>

#include <ATen/CPUGeneratorImpl.h>

#include "model_families.h"
#include "strata/model/gpt.h"
#include "strata/parallel/regions.h"
#include "test_configs.h"
#include "test_support.h"
#include "train_support.h"

namespace strata {
namespace {

// Same values on every rank.
at::Tensor shared_randn(std::vector<int64_t> shape, uint64_t seed,
                        at::ScalarType dtype = at::kDouble) {
  auto generator = at::make_generator<at::CPUGeneratorImpl>(seed);
  return at::normal(0.0, 1.0, shape, generator, at::TensorOptions(at::kFloat)).to(dtype);
}

TEST(Regions, ForwardAndBackwardMoveWhatTheyPromise) {
  Comm tp = Comm::world(60);
  const int64_t n = tp.size(), r = tp.rank();
  // Every rank holds a different x; the upstream gradient g differs per rank too.
  at::Tensor x = shared_randn({2, 2 * n, 3}, 100 + r).set_requires_grad(true);
  at::Tensor g = shared_randn({2, 2 * n, 3}, 200 + r);
  at::Tensor sum_x = at::zeros_like(x), sum_g = at::zeros_like(g);
  for (int64_t k = 0; k < n; ++k) {
    sum_x += shared_randn({2, 2 * n, 3}, 100 + k);
    sum_g += shared_randn({2, 2 * n, 3}, 200 + k);
  }

  at::Tensor y = copy_to_tp_region(x, tp);
  EXPECT_TRUE(at::equal(y, x));
  y.backward(g);
  EXPECT_EQ(testing::compare_tensors(x.grad(), sum_g, 1e-12, 1e-12), "");
  x.mutable_grad().zero_();

  y = reduce_from_tp_region(x, tp);
  EXPECT_EQ(testing::compare_tensors(y, sum_x, 1e-12, 1e-12), "");
  y.backward(g);
  EXPECT_TRUE(at::equal(x.grad(), g));
  x.mutable_grad().zero_();

  // reduce-scatter along tokens: my chunk of the sum; backward all-gathers.
  y = reduce_scatter_to_sequence(x, tp);
  EXPECT_EQ(testing::compare_tensors(y, sum_x.narrow(1, 2 * r, 2), 1e-12, 1e-12), "");
  at::Tensor g_chunk = g.narrow(1, 0, 2);
  y.backward(g_chunk);
  for (int64_t k = 0; k < n; ++k) {
    EXPECT_EQ(testing::compare_tensors(x.grad().narrow(1, 2 * k, 2),
                                       shared_randn({2, 2 * n, 3}, 200 + k).narrow(1, 0, 2), 1e-12),
              "");
  }
  x.mutable_grad().zero_();

  // all-gather along tokens; backward reduce-scatters.
  at::Tensor part = x.narrow(1, 0, 2);
  y = gather_from_sequence(part, tp);
  ASSERT_EQ(y.size(1), 2 * n);
  for (int64_t k = 0; k < n; ++k) {
    EXPECT_TRUE(
        at::equal(y.narrow(1, 2 * k, 2), shared_randn({2, 2 * n, 3}, 100 + k).narrow(1, 0, 2)));
  }
  y.backward(g);
  EXPECT_EQ(
      testing::compare_tensors(x.grad().narrow(1, 0, 2), sum_g.narrow(1, 2 * r, 2), 1e-12, 1e-12),
      "");
}

TEST(Regions, SequenceCollectivesKeepTokenOrderForAnyBatchAndRank) {
  // One batch row (the chunks are contiguous: no copy) and four dims (B, T, heads, D); the
  // results come back contiguous, in token order.
  Comm tp = Comm::world(60);
  const int64_t n = tp.size(), r = tp.rank();
  for (const std::vector<int64_t>& shape :
       {std::vector<int64_t>{1, 2 * n, 3}, std::vector<int64_t>{3, 2 * n, 2, 3}}) {
    at::Tensor x = shared_randn(shape, 300 + r);
    at::Tensor sum_x = at::zeros_like(x);
    for (int64_t k = 0; k < n; ++k) sum_x += shared_randn(shape, 300 + k);
    at::Tensor scattered = reduce_scatter_to_sequence(x, tp);
    EXPECT_TRUE(scattered.is_contiguous());
    EXPECT_EQ(testing::compare_tensors(scattered, sum_x.narrow(1, 2 * r, 2), 1e-12, 1e-12), "")
        << x.sizes();
    at::Tensor gathered = gather_from_sequence(x.narrow(1, 0, 2), tp);
    EXPECT_TRUE(gathered.is_contiguous());
    for (int64_t k = 0; k < n; ++k) {
      EXPECT_TRUE(
          at::equal(gathered.narrow(1, 2 * k, 2), shared_randn(shape, 300 + k).narrow(1, 0, 2)))
          << x.sizes() << " chunk " << k;
    }
  }
}

TEST(VocabParallelCrossEntropy, EqualsFullCrossEntropyWithPadding) {
  Comm tp = Comm::world(60);
  const int64_t n = tp.size(), r = tp.rank();
  const int64_t V = 4 * n + 1;               // never divisible by n > 1: the last rank has padding
  const int64_t per_rank = (V + n - 1) / n;  // padded
  at::Tensor full = shared_randn({7, V}, 5);
  at::Tensor targets = at::arange(7, at::kLong).mul(3).remainder(V);
  targets[0] = V - 1;  // a target on the last rank, next to its padding
  at::Tensor full_leaf = full.clone().set_requires_grad(true);
  at::Tensor expected = at::cross_entropy_loss(full_leaf, targets);
  expected.backward();

  at::Tensor local = at::full({7, per_rank}, 1000.0, at::kDouble);  // padding holds junk
  const int64_t valid = std::min(per_rank, V - r * per_rank);
  local.narrow(1, 0, valid).copy_(full.narrow(1, r * per_rank, valid));
  local.set_requires_grad(true);
  at::Tensor loss = vocab_parallel_cross_entropy(local, targets, r * per_rank, V, tp);
  EXPECT_NEAR(loss.item<double>(), expected.item<double>(), 1e-12);
  loss.backward();
  EXPECT_EQ(testing::compare_tensors(local.grad().narrow(1, 0, valid),
                                     full_leaf.grad().narrow(1, r * per_rank, valid), 1e-10, 1e-14),
            "");
  if (valid < per_rank) {
    EXPECT_EQ(local.grad().narrow(1, valid, per_rank - valid).abs().max().item<double>(), 0.0);
  }
}

// Targets of GPT::kIgnoredTarget (a loss mask) carry no loss and no gradient; the sum of the
// others is still divided by all rows, as the unsharded head computes it.
TEST(VocabParallelCrossEntropy, IgnoredTargetsCarryNoLossAndNoGradient) {
  Comm tp = Comm::world(60);
  const int64_t n = tp.size(), r = tp.rank();
  const int64_t V = 4 * n + 1;
  const int64_t per_rank = (V + n - 1) / n;
  at::Tensor full = shared_randn({7, V}, 6);
  at::Tensor targets = at::arange(7, at::kLong).mul(5).remainder(V);
  targets[1] = GPT::kIgnoredTarget;
  targets[4] = GPT::kIgnoredTarget;
  at::Tensor full_leaf = full.clone().set_requires_grad(true);
  at::Tensor expected =
      at::cross_entropy_loss(full_leaf, targets, {}, at::Reduction::Sum, GPT::kIgnoredTarget) / 7.0;
  expected.backward();

  at::Tensor local = at::zeros({7, per_rank}, at::kDouble);
  const int64_t valid = std::min(per_rank, V - r * per_rank);
  local.narrow(1, 0, valid).copy_(full.narrow(1, r * per_rank, valid));
  local.set_requires_grad(true);
  at::Tensor loss = vocab_parallel_cross_entropy(local, targets, r * per_rank, V, tp);
  EXPECT_NEAR(loss.item<double>(), expected.item<double>(), 1e-12);
  loss.backward();
  EXPECT_EQ(testing::compare_tensors(local.grad().narrow(1, 0, valid),
                                     full_leaf.grad().narrow(1, r * per_rank, valid), 1e-10, 1e-14),
            "");
  EXPECT_EQ(local.grad()[1].abs().max().item<double>(), 0.0);
  EXPECT_EQ(local.grad()[4].abs().max().item<double>(), 0.0);
}

struct Variant {
  PositionEncoding pos;
  Activation activation;
  bool tie, sequence_parallel;
  int64_t n_kv_heads;
};

std::string variant_name(const ::testing::TestParamInfo<Variant>& info) {
  const Variant& v = info.param;
  return str(name_of(v.pos), "_", name_of(v.activation), v.tie ? "_tied" : "_untied",
             v.sequence_parallel ? "_sp" : "", "_kv", v.n_kv_heads);
}

ModelConfig model_for(const Variant& v) {
  // Vocabulary 50: padded for tp = 3 and 4; 12 heads: divisible by 2, 3, 4.
  ModelConfig config = testing::gpt_config(50, 48, 2, 12, 12);
  config.n_kv_heads = v.n_kv_heads;
  config.d_ff = 48;
  config.tie_embeddings = v.tie;
  config.init_std = 0.2;
  config.pos = v.pos;
  config.activation = v.activation;
  config.norm = v.activation == Activation::swiglu ? Norm::rmsnorm : Norm::layernorm;
  return config;
}

// Each of the sharded model's gradients (summed over tp where they are partial, as the trainer
// does) equals its slice of the unsharded model's.
void expect_gradient_slices_equal(GPT& sharded, GPT& reference, Comm& tp) {
  for (auto& parameter : sharded.parameters()) {
    at::Tensor grad = parameter.value.grad();
    ASSERT_TRUE(grad.defined()) << parameter.name;
    if (parameter.tp_partial_grad) tp.all_reduce(grad, ReduceOp::Sum);
    const at::Tensor& full_grad = reference.parameter(parameter.name).value.grad();
    for (const auto& slice : parameter.spec.local_slices()) {
      at::Tensor want = full_grad, got = grad;
      for (size_t d = 0; d < slice.shape.size(); ++d) {
        want = want.narrow(d, slice.global_offsets[d], slice.shape[d]);
      }
      const int64_t dim = std::max<int64_t>(0, parameter.spec.split_dim);
      got = got.narrow(dim, slice.local_start, slice.shape[dim]);
      EXPECT_EQ(testing::compare_tensors(got, want, 1e-8, 1e-12), "") << parameter.name;
    }
  }
}

class TensorParallelGpt : public ::testing::TestWithParam<Variant> {};

TEST_P(TensorParallelGpt, LossAndGradientSlicesEqualUnsharded) {
  Comm tp = Comm::world(60);
  ModelConfig config = model_for(GetParam());
  GPT reference(config, 11, at::kDouble);
  GPT sharded(config, 11, at::kDouble, TensorParallel{&tp, GetParam().sequence_parallel});
  auto generator = at::make_generator<at::CPUGeneratorImpl>(4);
  at::Tensor tokens = at::randint(config.vocab_size, {3, config.seq_len}, generator, at::kLong);
  at::Tensor targets = at::randint(config.vocab_size, {3, config.seq_len}, generator, at::kLong);

  at::Tensor expected = reference.loss(tokens, targets);
  expected.backward();
  tp.counters().reset();
  at::Tensor loss = sharded.loss(tokens, targets);
  loss.backward();
  EXPECT_NEAR(loss.item<double>(), expected.item<double>(), 1e-10 * expected.item<double>());

  // Bytes moved (Shoeybi et al.; Korthikanti et al.): per layer 2 collectives of the (B, T, C)
  // activations forward and 2 backward, plus the embedding (forward) and the head's input
  // (backward); ring all-reduce sends 2(t-1)/t of the buffer, reduce-scatter and all-gather
  // (t-1)/t each. Cross-entropy adds 3 all-reduces of one value per token.
  const double t = tp.size(), L = config.n_layers, bytes = 8;
  const double activation = 3.0 * config.seq_len * config.d_model * bytes,
               per_token = 3.0 * config.seq_len * bytes;
  const auto& counted = tp.counters().bytes;
  const double all_reduce = counted[static_cast<size_t>(CommKind::AllReduce)];
  if (GetParam().sequence_parallel) {
    EXPECT_DOUBLE_EQ(counted[static_cast<size_t>(CommKind::ReduceScatter)],
                     (2 + 4 * L) * (t - 1) / t * activation);
    EXPECT_DOUBLE_EQ(counted[static_cast<size_t>(CommKind::AllGather)],
                     (2 + 4 * L) * (t - 1) / t * activation);
    EXPECT_DOUBLE_EQ(all_reduce, 3 * 2 * (t - 1) / t * per_token);
  } else {
    EXPECT_DOUBLE_EQ(all_reduce, 2 * (t - 1) / t * ((2 + 4 * L) * activation + 3 * per_token));
    EXPECT_EQ(counted[static_cast<size_t>(CommKind::ReduceScatter)], 0);
  }

  expect_gradient_slices_equal(sharded, reference, tp);
  // Whole-vocabulary logits gathered for generation equal the unsharded ones.
  at::NoGradGuard no_grad;
  EXPECT_EQ(testing::compare_tensors(sharded.logits(tokens), reference.logits(tokens), 1e-9, 1e-12),
            "");
}

INSTANTIATE_TEST_SUITE_P(
    Variants, TensorParallelGpt,
    ::testing::Values(Variant{PositionEncoding::learned, Activation::gelu, true, false, 12},
                      Variant{PositionEncoding::learned, Activation::gelu, true, true, 12},
                      Variant{PositionEncoding::rope, Activation::swiglu, false, false, 12},
                      Variant{PositionEncoding::rope, Activation::swiglu, false, true, 12},
                      Variant{PositionEncoding::rope, Activation::gelu, true, true,
                              4},  // kv heads split: tp | 4
                      Variant{PositionEncoding::learned, Activation::swiglu, false, true, 1}
                      // kv replicated
                      ),
    variant_name);

// Other model families (model/block_spec.h) with nonzero biases: Qwen2's on q, k and v
// (column-split with their heads; with 4 kv heads replicated over tp = 3), GPT-2's on every
// projection (the row-split ones added once, after the reduction or the reduce-scatter), also
// with a SwiGLU MLP.
struct FamilyVariant {
  const char* family;
  bool sequence_parallel;
};

BlockSpec block_of(const FamilyVariant& v) {
  const std::string family = v.family;
  if (family == "qwen2") return testing::qwen2_like_block();
  BlockSpec block = testing::gpt2_like_block();
  // SwiGLU's fused gate and value rows carry their biases in the same two blocks.
  if (family == "gpt2_swiglu") block.activation = Activation::swiglu;
  return block;
}

class TensorParallelFamily : public ::testing::TestWithParam<FamilyVariant> {};

TEST_P(TensorParallelFamily, LogitsLossAndGradientSlicesEqualUnsharded) {
  Comm tp = Comm::world(60);
  ModelConfig config = testing::gpt_config(50, 48, 2, 12, 12);
  config.d_ff = 48;
  config.init_std = 0.2;
  const BlockSpec block = block_of(GetParam());
  if (block.position == PositionEncoding::rope) config.n_kv_heads = 4;
  GPT reference(config, block, 11, at::kDouble);
  GPT sharded(config, block, 11, at::kDouble, TensorParallel{&tp, GetParam().sequence_parallel});
  testing::randomize_biases(reference, 21);
  testing::randomize_biases(sharded, 21);
  auto generator = at::make_generator<at::CPUGeneratorImpl>(4);
  at::Tensor tokens = at::randint(config.vocab_size, {3, config.seq_len}, generator, at::kLong);
  at::Tensor targets = at::randint(config.vocab_size, {3, config.seq_len}, generator, at::kLong);

  at::Tensor expected = reference.loss(tokens, targets);
  expected.backward();
  at::Tensor loss = sharded.loss(tokens, targets);
  loss.backward();
  EXPECT_NEAR(loss.item<double>(), expected.item<double>(), 1e-10 * expected.item<double>());
  expect_gradient_slices_equal(sharded, reference, tp);
  // The biases are trained: each has a nonzero gradient.
  for (const auto& parameter : reference.parameters()) {
    if (parameter.name.find("attn.q.bias") != std::string::npos) {
      EXPECT_GT(parameter.value.grad().abs().max().item<double>(), 0) << parameter.name;
    }
  }
  at::NoGradGuard no_grad;
  EXPECT_EQ(testing::compare_tensors(sharded.logits(tokens), reference.logits(tokens), 1e-9, 1e-12),
            "");
}

INSTANTIATE_TEST_SUITE_P(
    Families, TensorParallelFamily,
    ::testing::Values(FamilyVariant{"qwen2", false}, FamilyVariant{"qwen2", true},
                      FamilyVariant{"gpt2", false}, FamilyVariant{"gpt2", true},
                      FamilyVariant{"gpt2_swiglu", true}),
    [](const ::testing::TestParamInfo<FamilyVariant>& info) {
      return std::string(info.param.family) + (info.param.sequence_parallel ? "_sp" : "");
    });

Config training_run(const Variant& v) {
  Config config = testing::tiny_training_run(20, 4, 2);
  config.model = model_for(v);
  config.model.init_std = 0.02;
  return config;
}

struct Outcome {
  TrainResult result;
  double split_bytes_ratio = 0;  // local bytes of split weights / (their global bytes / tp)
};

Outcome train_with(Comm& world, Config config, int64_t tp, bool sequence_parallel) {
  config.parallel.tp = tp;
  config.parallel.dp = world.size() / tp;
  config.parallel.sequence_parallel = sequence_parallel;
  double local_bytes = 0, global_bytes = 0;
  Outcome outcome{testing::train_on(world, config, [&](const Trainer& trainer) {
    for (const Parameter* parameter : trainer.parameters()) {
      if (!parameter->spec.is_split()) continue;
      local_bytes += parameter->value.nbytes();
      global_bytes += numel_of(parameter->spec.global_shape) * parameter->value.element_size();
    }
  })};
  if (global_bytes > 0) outcome.split_bytes_ratio = local_bytes / (global_bytes / tp);
  return outcome;
}

TEST(TensorParallelTraining, TwentyStepsEqualUnsharded) {
  Comm world = Comm::world(120);
  Comm self = world.split(world.rank(), 0, "self");
  for (bool sequence_parallel : {false, true}) {
    Variant v{PositionEncoding::rope, Activation::swiglu, false, sequence_parallel, 12};
    Outcome reference = train_with(self, training_run(v), 1, false);
    Outcome sharded = train_with(world, training_run(v), world.size(), sequence_parallel);
    ASSERT_EQ(sharded.result.losses.size(), 20u);
    for (size_t i = 0; i < reference.result.losses.size(); ++i) {
      EXPECT_NEAR(sharded.result.losses[i], reference.result.losses[i],
                  1e-4 * reference.result.losses[i])
          << "step " << i + 1 << " sequence_parallel " << sequence_parallel;
    }
    // Split weights hold 1/tp of their global bytes, plus the padded vocabulary rows.
    EXPECT_GE(sharded.split_bytes_ratio, 1.0);
    EXPECT_LT(sharded.split_bytes_ratio, 1.03)
        << "per-rank bytes of split weights do not shrink as 1/tp";
  }
}

}  // namespace
}  // namespace strata
