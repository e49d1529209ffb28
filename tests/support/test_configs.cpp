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
  config.parallel.micro_batch = micro_batch;
  config.train.lr = 3e-3;
  config.train.min_lr = 3e-4;
  config.train.warmup_steps = std::min<int64_t>(3, steps);
  config.data.source = DataSource::synthetic;
  config.log.progress = ProgressDisplay::none;
  config.log.dir = log_dir();
  return config;
}

std::string tiny_run_toml(int64_t steps) {
  const ModelConfig model = tiny_training_run(steps, 4, 2).model;
  return "[model]\nvocab_size = " + std::to_string(model.vocab_size) +
         "\nd_model = " + std::to_string(model.d_model) +
         "\nn_layers = " + std::to_string(model.n_layers) +
         "\nn_heads = " + std::to_string(model.n_heads) +
         "\nseq_len = " + std::to_string(model.seq_len) +
         "\n[train]\nsteps = " + std::to_string(steps) +
         "\nglobal_batch = 4\nmicro_batch = 2\nlr = 0.003\nmin_lr = 0.0003\nwarmup_steps = 2\n";
}

Layout pipeline_layout(PipelineSchedule schedule, int64_t pp, int64_t microbatches, int64_t vpp) {
  Layout layout;
  layout.schedule = schedule;
  layout.pp = pp;
  layout.microbatches = microbatches;
  layout.vpp = vpp;
  return layout;
}

std::string TestLayout::name() const {
  std::string out;
  auto add = [&out](const std::string& part) { out += (out.empty() ? "" : " ") + part; };
  if (tp > 1) add("tp" + std::to_string(tp) + (sequence_parallel ? "(sp)" : ""));
  if (pp > 1) {
    add("pp" + std::to_string(pp) + "(" + name_of(schedule) +
        (vpp > 1 ? " vpp " + std::to_string(vpp) : "") + ")");
  }
  if (cp > 1) add("cp" + std::to_string(cp) + "(" + name_of(cp_comm) + ")");
  if (dp > 1) add("dp" + std::to_string(dp));
  if (zero > 0) add("zero " + std::to_string(zero));
  if (ep > 1) add("ep" + std::to_string(ep));
  if (moe) add("moe");
  if (gradients != GradientCompression::none) add(std::string("gradients ") + name_of(gradients));
  if (zero_gather != GatherCompression::none) {
    add(std::string("zero_gather ") + name_of(zero_gather));
  }
  return out.empty() ? "single rank" : out;
}

void TestLayout::apply_to(Config& config) const {
  config.parallel.tp = tp;
  config.parallel.pp = pp;
  config.parallel.vpp = vpp;
  config.parallel.cp = cp;
  config.parallel.dp = dp;
  config.parallel.ep = ep;
  config.parallel.zero = zero;
  config.parallel.sequence_parallel = sequence_parallel;
  config.parallel.schedule = schedule;
  config.parallel.cp_comm = cp_comm;
  config.compression.gradients = gradients;
  config.compression.zero_gather = zero_gather;
}

}  // namespace strata::testing
