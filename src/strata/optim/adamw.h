// AdamW (Loshchilov & Hutter) over the local pieces of the parameters: decoupled weight decay,
// none on parameters marked weight_decay = false (norms, biases). Its state (step count and
// the two moments per parameter) is exposed for checkpoints. It updates ParamStates: a value
// with its gradient and moments, either one per parameter (moments owned here) or views the
// caller owns (ZeRO's shards of flat buffers, data_parallel/sharded_optimizer.h).
#pragma once
#include <ATen/ATen.h>

#include <cstdint>
#include <vector>

#include "strata/core/config.h"
#include "strata/model/parameter.h"

namespace strata {

class AdamW {
 public:
  // All four tensors have the same shape; any may be a view into a larger buffer.
  struct ParamState {
    at::Tensor value;  // updated in place
    at::Tensor grad;   // undefined: read value.grad() at each step (skipped if undefined)
    at::Tensor exp_avg, exp_avg_sq;
    bool weight_decay = true;
  };
  // One state per parameter; moments allocated here, gradients read from value.grad().
  AdamW(std::vector<Parameter*> parameters, const TrainConfig& config);
  // Caller-owned states.
  AdamW(std::vector<ParamState> states, const TrainConfig& config);

  // One update with learning rate lr, using each parameter's .grad().
  void step(double lr);
  // 1-bit Adam's compressed phase (data_parallel/sharded_optimizer.h): the caller has put this
  // step's momentum into exp_avg; exp_avg_sq stays as the first variance_steps updates left it
  // (frozen), and so does its bias correction. Gradients are not read.
  void step_with_frozen_variance(double lr, int64_t variance_steps);

  int64_t step_count() const { return step_count_; }
  void set_step_count(int64_t steps) { step_count_ = steps; }
  int64_t state_bytes() const;  // bytes of the moments' elements

 private:
  std::vector<ParamState> states_;
  double beta1_, beta2_, eps_, weight_decay_;
  int64_t step_count_ = 0;
};

// Warmup then cosine: lr * (step + 1) / warmup for step < warmup, then cosine decay from lr
// to min_lr at the last step.
double learning_rate(const TrainConfig& config, int64_t step);

}  // namespace strata
