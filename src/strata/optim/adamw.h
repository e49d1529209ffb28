// AdamW (Loshchilov & Hutter) over the local pieces of the parameters: decoupled weight decay,
// none on parameters marked weight_decay = false (norms, biases). Its state (step count and
// the two moments per parameter) is exposed for checkpoints.
#pragma once
#include <ATen/ATen.h>

#include <cstdint>
#include <vector>

#include "strata/core/config.h"
#include "strata/model/parameter.h"

namespace strata {

class AdamW {
 public:
  AdamW(std::vector<Parameter*> parameters, const TrainConfig& config);

  // One update with learning rate lr, using each parameter's .grad().
  void step(double lr);
  void zero_grad();

  int64_t step_count() const { return step_count_; }
  void set_step_count(int64_t steps) { step_count_ = steps; }
  std::vector<at::Tensor>& exp_avg() { return exp_avg_; }        // first moments, like params
  std::vector<at::Tensor>& exp_avg_sq() { return exp_avg_sq_; }  // second moments, like params
  int64_t state_bytes() const;

 private:
  std::vector<Parameter*> parameters_;
  double beta1_, beta2_, eps_, weight_decay_;
  int64_t step_count_ = 0;
  std::vector<at::Tensor> exp_avg_, exp_avg_sq_;
};

// Warmup then cosine: lr * (step + 1) / warmup for step < warmup, then cosine decay from lr
// to min_lr at the last step.
double learning_rate(const TrainConfig& config, int64_t step);

}  // namespace strata
