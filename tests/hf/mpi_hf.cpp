// Hugging Face models loaded on two ranks, each rank reading only its slices: tensor parallel
// (tp 2: q/k/v heads, the MLP's units and the vocabulary split), pipeline (pp 2: each rank its
// layers, the tied embedding on both ends) and expert parallel (Mixtral, ep 2), each equal to
// the independent reference.
#include <gtest/gtest.h>

#include "hf_test_models.h"
#include "strata/dist/comm.h"
#include "strata/hf/hf_load.h"

namespace strata {
namespace {

using testing::compare_to_reference;
using testing::hf_reference_logits;
using testing::hf_test_ids;

// A model of `arch` in a directory every rank sees (rank 0 writes it).
class SharedModel {
 public:
  SharedModel(Comm& world, const std::string& arch, const std::string& options) {
    if (world.rank() == 0) testing::make_hf_model(arch, local_.path(), options);
    dir_ = testing::rank0_path(world, local_.path());
    world.barrier();
  }
  const std::string& dir() const { return dir_; }

 private:
  testing::TempDir local_{"strata-hf-mpi"};
  std::string dir_;
};

at::Tensor ids_tensor() { return at::tensor(hf_test_ids(), at::kLong).view({1, -1}); }

struct Case {
  std::string arch, options;
};
const std::vector<Case> kCases = {{"gpt2", ""},
                                  {"llama", "--variant gqa --variant llama3-rope"},
                                  {"llama", "--variant untied --dtype bf16 --shards 2"},
                                  {"llama", "--variant attention-bias --variant mlp-bias"},
                                  {"qwen2", ""},
                                  {"mistral", "--variant head-dim"},
                                  {"mixtral", ""}};

TEST(HfLoad, TensorParallelMatchesTheReference) {
  Comm world = Comm::world(120);
  ASSERT_EQ(world.size(), 2);
  for (const Case& c : kCases) {
    SharedModel model_dir(world, c.arch, c.options);
    const HfModel hf = read_hf_config(model_dir.dir());
    GPT model(hf.model, hf.block, 1, at::kFloat, TensorParallel{&world, false});
    load_hf_weights(model_dir.dir(), model);
    at::NoGradGuard no_grad;
    const at::Tensor logits = model.logits(ids_tensor()).select(0, 0);
    if (world.rank() == 0) {
      EXPECT_EQ(compare_to_reference(logits, hf_reference_logits(model_dir.dir(), hf_test_ids())),
                "")
          << c.arch << " " << c.options;
    }
  }
}

// Rank 0 runs the first half of the layers and sends its output; rank 1 the rest and the
// loss, which must be the reference logits' cross-entropy.
TEST(HfLoad, PipelineStagesMatchTheReference) {
  Comm world = Comm::world(120);
  ASSERT_EQ(world.size(), 2);
  for (const Case& c : kCases) {
    SharedModel model_dir(world, c.arch, c.options);
    const HfModel hf = read_hf_config(model_dir.dir());
    const int64_t first_half = hf.model.n_layers / 2;
    const bool first = world.rank() == 0;
    StageSpec stage{first ? 0 : first_half, first ? first_half : hf.model.n_layers - first_half,
                    first, !first};
    GPT model(hf.model, hf.block, 1, at::kFloat, {}, stage);
    load_hf_weights(model_dir.dir(), model);
    at::NoGradGuard no_grad;
    const at::Tensor tokens = ids_tensor();
    const at::Tensor targets = tokens.roll(-1, 1);
    if (first) {
      world.send(model.forward_stage(tokens, {}).contiguous(), 1);
    } else {
      at::Tensor activations = at::empty({1, tokens.size(1), hf.model.d_model});
      world.recv(activations, 0);
      const double loss = model.forward_stage(activations, targets).item<double>();
      const at::Tensor reference = hf_reference_logits(model_dir.dir(), hf_test_ids());
      const double expected = at::cross_entropy_loss(reference, targets.view({-1})).item<double>();
      EXPECT_NEAR(loss, expected, 1e-4 * expected) << c.arch << " " << c.options;
    }
    world.barrier();  // rank 0 keeps the model directory until rank 1 is done with it
  }
}

TEST(HfLoad, ExpertParallelMixtralMatchesTheReference) {
  Comm world = Comm::world(120);
  ASSERT_EQ(world.size(), 2);
  SharedModel model_dir(world, "mixtral", "--dtype bf16");
  const HfModel hf = read_hf_config(model_dir.dir());
  GPT model(hf.model, hf.block, 1, at::kFloat, {}, {}, &world);
  load_hf_weights(model_dir.dir(), model);
  // Each rank holds half the experts.
  const Parameter& experts = model.parameter("blocks.0.moe.experts.fc.weight");
  EXPECT_EQ(experts.value.size(0), hf.block.moe.num_experts / 2);
  at::NoGradGuard no_grad;
  const at::Tensor logits = model.logits(ids_tensor()).select(0, 0);
  EXPECT_EQ(compare_to_reference(logits, hf_reference_logits(model_dir.dir(), hf_test_ids())), "");
  world.barrier();  // rank 0 keeps the model directory until rank 1 is done with it
}

}  // namespace
}  // namespace strata
