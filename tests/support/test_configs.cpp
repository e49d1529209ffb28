// Implementation of the shared test configs.
#include "test_configs.h"

#include <algorithm>

#include "test_support.h"

namespace strata::testing {

ModelConfig gpt_config(int64_t vocab_size, int64_t d_model, int64_t n_layers, int64_t n_heads,
                       int64_t seq_len) {
  ModelConfig model;
  model.vocab_size = vocab_size;
  model.d_model = d_model;
  model.n_layers = n_layers;
  model.n_heads = n_heads;
  model.seq_len = seq_len;
  return model;
}

ModelConfig tiny_model() {
  ModelConfig model = gpt_config(11, 8, 2, 2, 6);
  model.d_ff = 12;
  model.init_std = 0.3;
  return model;
}

Config tiny_training_run(int64_t steps, int64_t global_batch, int64_t micro_batch) {
  Config config;
  config.model = gpt_config(256, 32, 2, 4, 32);
  config.train.steps = steps;
  config.train.global_batch = global_batch;
  config.train.micro_batch = micro_batch;
  config.train.lr = 3e-3;
  config.train.min_lr = 3e-4;
  config.train.warmup_steps = std::min<int64_t>(3, steps);
  config.data.source = DataSource::synthetic;
  config.log.progress = ProgressDisplay::none;
  config.log.dir = log_dir();
  return config;
}

}  // namespace strata::testing
