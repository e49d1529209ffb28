// Timing a layer, the embedding and the head and loss (layer_timing.h).
#include "strata/train/layer_timing.h"

#include <ATen/ATen.h>
#include <torch/csrc/autograd/autograd.h>

#include <algorithm>
#include <chrono>
#include <memory>
#include <vector>

#include "strata/core/error.h"
#include "strata/core/precision.h"
#include "strata/hf/hf_config.h"
#include "strata/model/gpt.h"
#include "strata/model/product_routes.h"

namespace strata {
namespace {

double median(std::vector<double> values) {
  std::sort(values.begin(), values.end());
  return values[values.size() / 2];
}

// One pipeline chunk of `period` layers, with the embedding and with the head as asked, and a
// microbatch to run through it.
struct TimedChunk {
  std::unique_ptr<GPT> model;
  at::Tensor input, targets, output_grad;

  TimedChunk(const Config& config, int64_t period, bool first, bool last) {
    const ModelConfig& shape = config.model;
    const at::ScalarType dtype = compute_dtype(config.train.precision);
    model = std::make_unique<GPT>(shape, run_block_spec(config), config.train.seed, dtype,
                                  TensorParallel{}, StageSpec{0, period, first, last});
    const int64_t rows = config.parallel.micro_batch;
    const auto token_options = at::TensorOptions().dtype(at::kLong);
    targets = at::randint(shape.vocab_size, {rows, shape.seq_len}, token_options);
    input = first ? at::randint(shape.vocab_size, {rows, shape.seq_len}, token_options)
                  : at::randn({rows, shape.seq_len, shape.d_model}, at::TensorOptions(dtype));
    if (!last)
      output_grad = at::randn({rows, shape.seq_len, shape.d_model}, at::TensorOptions(dtype));
  }

  // Seconds of one forward and backward (weight gradients accumulated, as in training).
  double run() {
    const at::Tensor activations =
        input.is_floating_point() ? input.detach().set_requires_grad(true) : input;
    const auto start = std::chrono::steady_clock::now();
    const at::Tensor output = model->forward_stage(activations, targets);
    if (output_grad.defined()) {
      output.backward(output_grad);
    } else {
      output.backward();
    }
    return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  }
};

}  // namespace

SplitCosts time_split_costs(Comm& world, const Config& config, int rounds) {
  STRATA_CHECK(rounds >= 1, "rounds ", rounds);
  const ModelConfig& shape = config.model;
  const int64_t period = shape.moe.num_experts > 0 ? std::min(shape.moe.every, shape.n_layers) : 1;
  choose_product_routes(world, config, training_products(config));
  TimedChunk layers(config, period, false, false);
  TimedChunk with_embedding(config, period, true, false);
  TimedChunk with_head(config, period, false, true);
  std::vector<double> alone, embedded, headed;
  for (int round = -1; round < rounds; ++round) {  // round -1 warms up and is not kept
    const double a = layers.run(), e = with_embedding.run(), h = with_head.run();
    if (round < 0) continue;
    alone.push_back(a);
    embedded.push_back(e);
    headed.push_back(h);
  }
  const double layer = median(alone);
  // The slowest rank's, as every rank must wait for it.
  at::Tensor seconds =
      at::tensor({layer / static_cast<double>(period), std::max(0.0, median(embedded) - layer),
                  std::max(0.0, median(headed) - layer)},
                 at::kDouble);
  world.all_reduce(seconds, ReduceOp::Max);
  SplitCosts costs;
  costs.layer = seconds[0].item<double>();
  costs.embedding = seconds[1].item<double>();
  costs.head = seconds[2].item<double>();
  return costs;
}

}  // namespace strata
