// AdamW update and the learning-rate schedule.
#include "strata/optim/adamw.h"

#include <ATen/core/grad_mode.h>

#include <cmath>

namespace strata {

AdamW::AdamW(std::vector<Parameter*> parameters, const TrainConfig& config)
    : parameters_(std::move(parameters)),
      beta1_(config.beta1),
      beta2_(config.beta2),
      eps_(config.eps),
      weight_decay_(config.weight_decay) {
  for (const Parameter* parameter : parameters_) {
    exp_avg_.push_back(at::zeros_like(parameter->value));
    exp_avg_sq_.push_back(at::zeros_like(parameter->value));
  }
}

void AdamW::step(double lr) {
  at::NoGradGuard no_grad;
  ++step_count_;
  const double bias_correction1 = 1.0 - std::pow(beta1_, static_cast<double>(step_count_));
  const double bias_correction2 = 1.0 - std::pow(beta2_, static_cast<double>(step_count_));
  const double step_size = lr / bias_correction1;
  const double inv_sqrt_bias_correction2 = 1.0 / std::sqrt(bias_correction2);
  for (size_t i = 0; i < parameters_.size(); ++i) {
    at::Tensor& value = parameters_[i]->value;
    const at::Tensor& grad = value.grad();
    if (!grad.defined()) continue;
    if (parameters_[i]->weight_decay && weight_decay_ != 0.0) value.mul_(1.0 - lr * weight_decay_);
    exp_avg_[i].mul_(beta1_).add_(grad, 1.0 - beta1_);
    exp_avg_sq_[i].mul_(beta2_).addcmul_(grad, grad, 1.0 - beta2_);
    auto denominator = (exp_avg_sq_[i].sqrt() * inv_sqrt_bias_correction2).add_(eps_);
    value.addcdiv_(exp_avg_[i], denominator, -step_size);
  }
}

void AdamW::zero_grad() {
  for (Parameter* parameter : parameters_) {
    if (parameter->value.grad().defined()) parameter->value.mutable_grad().zero_();
  }
}

int64_t AdamW::state_bytes() const {
  int64_t bytes = 0;
  for (size_t i = 0; i < exp_avg_.size(); ++i) {
    bytes += exp_avg_[i].nbytes() + exp_avg_sq_[i].nbytes();
  }
  return bytes;
}

double learning_rate(const TrainConfig& config, int64_t step) {
  if (step < config.warmup_steps) {
    return config.lr * static_cast<double>(step + 1) / static_cast<double>(config.warmup_steps);
  }
  const int64_t decay_steps = config.steps - config.warmup_steps;
  if (decay_steps <= 1) return config.lr;
  const double progress =
      static_cast<double>(step - config.warmup_steps) / static_cast<double>(decay_steps - 1);
  const double cosine = 0.5 * (1.0 + std::cos(M_PI * std::min(1.0, progress)));
  return config.min_lr + (config.lr - config.min_lr) * cosine;
}

}  // namespace strata
