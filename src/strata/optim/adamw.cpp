// AdamW update and the learning-rate schedule.
#include "strata/optim/adamw.h"

#include <ATen/core/grad_mode.h>

#include <cmath>

namespace strata {

namespace {
std::vector<AdamW::Slot> slots_of(const std::vector<Parameter*>& parameters) {
  std::vector<AdamW::Slot> slots;
  for (const Parameter* parameter : parameters) {
    slots.push_back({parameter->value, at::Tensor(), at::zeros_like(parameter->value),
                     at::zeros_like(parameter->value), parameter->weight_decay});
  }
  return slots;
}
}  // namespace

AdamW::AdamW(std::vector<Parameter*> parameters, const TrainConfig& config)
    : AdamW(slots_of(parameters), config) {}

AdamW::AdamW(std::vector<Slot> slots, const TrainConfig& config)
    : slots_(std::move(slots)),
      beta1_(config.beta1),
      beta2_(config.beta2),
      eps_(config.eps),
      weight_decay_(config.weight_decay) {}

void AdamW::step(double lr) {
  at::NoGradGuard no_grad;
  ++step_count_;
  const double bias_correction1 = 1.0 - std::pow(beta1_, static_cast<double>(step_count_));
  const double bias_correction2 = 1.0 - std::pow(beta2_, static_cast<double>(step_count_));
  const double step_size = lr / bias_correction1;
  const double inv_sqrt_bias_correction2 = 1.0 / std::sqrt(bias_correction2);
  for (Slot& slot : slots_) {
    at::Tensor& value = slot.value;
    const at::Tensor grad = slot.grad.defined() ? slot.grad : value.grad();
    if (!grad.defined()) continue;
    if (slot.weight_decay && weight_decay_ != 0.0) value.mul_(1.0 - lr * weight_decay_);
    slot.exp_avg.mul_(beta1_).add_(grad, 1.0 - beta1_);
    slot.exp_avg_sq.mul_(beta2_).addcmul_(grad, grad, 1.0 - beta2_);
    auto denominator = (slot.exp_avg_sq.sqrt() * inv_sqrt_bias_correction2).add_(eps_);
    value.addcdiv_(slot.exp_avg, denominator, -step_size);
  }
}

void AdamW::step_with_frozen_variance(double lr, int64_t variance_steps) {
  at::NoGradGuard no_grad;
  ++step_count_;
  const double bias_correction1 = 1.0 - std::pow(beta1_, static_cast<double>(step_count_));
  const double bias_correction2 = 1.0 - std::pow(beta2_, static_cast<double>(variance_steps));
  const double step_size = lr / bias_correction1;
  const double inv_sqrt_bias_correction2 = 1.0 / std::sqrt(bias_correction2);
  for (Slot& slot : slots_) {
    at::Tensor& value = slot.value;
    if (slot.weight_decay && weight_decay_ != 0.0) value.mul_(1.0 - lr * weight_decay_);
    auto denominator = (slot.exp_avg_sq.sqrt() * inv_sqrt_bias_correction2).add_(eps_);
    value.addcdiv_(slot.exp_avg, denominator, -step_size);
  }
}

int64_t AdamW::state_bytes() const {
  int64_t bytes = 0;
  for (const Slot& slot : slots_) bytes += slot.exp_avg.nbytes() + slot.exp_avg_sq.nbytes();
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
