// AdamW update and the learning-rate schedule.
#include "strata/optim/adamw.h"

#include <ATen/Dispatch.h>
#include <ATen/Parallel.h>
#include <ATen/core/grad_mode.h>
#include <ATen/record_function.h>

#include <array>
#include <cmath>

#include "strata/kernels/adamw_update.h"

namespace strata {

namespace {

// One update: its scalars (kernels/adamw_update.h), and whether the moments take the gradient
// (false while the variance is frozen).
struct Update {
  AdamWScalars scalars;
  bool update_variance;
};

// One pass over each element (read value, gradient and both moments, write three back) where
// the separate ATen ops make nine, vectorized (kernels/adamw_update.h). Contiguous CPU tensors
// of one floating dtype; false (nothing done) otherwise.
bool fused_update(const AdamW::ParamState& state, const at::Tensor& grad, const Update& u) {
  const at::Tensor& value = state.value;
  if (!value.is_cpu() || !value.is_contiguous()) return false;
  if (value.scalar_type() != at::kFloat && value.scalar_type() != at::kDouble) return false;
  const std::array<const at::Tensor*, 3> others{&state.exp_avg, &state.exp_avg_sq, &grad};
  for (const at::Tensor* t : others) {
    if (t == &grad && !u.update_variance) continue;  // the frozen phase reads no gradient
    if (!t->is_cpu() || !t->is_contiguous() || t->scalar_type() != value.scalar_type() ||
        t->numel() != value.numel()) {
      return false;
    }
  }
  AT_DISPATCH_FLOATING_TYPES(value.scalar_type(), "adamw_fused", [&] {
    scalar_t* w = value.data_ptr<scalar_t>();
    scalar_t* m = state.exp_avg.data_ptr<scalar_t>();
    scalar_t* v = state.exp_avg_sq.data_ptr<scalar_t>();
    const scalar_t* g = u.update_variance ? grad.data_ptr<scalar_t>() : nullptr;
    at::parallel_for(0, value.numel(), 1 << 14, [&](int64_t begin, int64_t end) {
      adamw_update(w + begin, m + begin, v + begin, g ? g + begin : nullptr, end - begin,
                   u.scalars);
    });
  });
  return true;
}

// The same update as ATen ops, for any other tensors (views, CUDA, 16-bit).
void unfused_update(AdamW::ParamState& state, const at::Tensor& grad, const Update& update) {
  const AdamWScalars& u = update.scalars;
  at::Tensor& value = state.value;
  if (u.decay != 1.0) value.mul_(u.decay);
  if (update.update_variance) {
    state.exp_avg.mul_(u.beta1).add_(grad, 1.0 - u.beta1);
    state.exp_avg_sq.mul_(u.beta2).addcmul_(grad, grad, 1.0 - u.beta2);
  }
  auto denominator = (state.exp_avg_sq.sqrt() * u.inv_sqrt_bias_correction2).add_(u.eps);
  value.addcdiv_(state.exp_avg, denominator, -u.step_size);
}

void update(AdamW::ParamState& state, const at::Tensor& grad, const Update& u) {
  RECORD_FUNCTION("strata::adamw_update", std::vector<c10::IValue>({state.value}));
  if (!fused_update(state, grad, u)) unfused_update(state, grad, u);
}

std::vector<AdamW::ParamState> param_states_of(const std::vector<Parameter*>& parameters) {
  std::vector<AdamW::ParamState> states;
  for (const Parameter* parameter : parameters) {
    states.push_back({parameter->value, at::Tensor(), at::zeros_like(parameter->value),
                      at::zeros_like(parameter->value), parameter->weight_decay});
  }
  return states;
}
}  // namespace

AdamW::AdamW(std::vector<Parameter*> parameters, const TrainConfig& config)
    : AdamW(param_states_of(parameters), config) {}

AdamW::AdamW(std::vector<ParamState> states, const TrainConfig& config)
    : states_(std::move(states)),
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
  for (ParamState& state : states_) {
    const at::Tensor grad = state.grad.defined() ? state.grad : state.value.grad();
    if (!grad.defined()) continue;
    const double decay = state.weight_decay ? 1.0 - lr * weight_decay_ : 1.0;
    update(
        state, grad,
        {{decay, beta1_, beta2_, step_size, inv_sqrt_bias_correction2, eps_}, /*variance=*/true});
  }
}

void AdamW::step_with_frozen_variance(double lr, int64_t variance_steps) {
  at::NoGradGuard no_grad;
  ++step_count_;
  const double bias_correction1 = 1.0 - std::pow(beta1_, static_cast<double>(step_count_));
  const double bias_correction2 = 1.0 - std::pow(beta2_, static_cast<double>(variance_steps));
  const double step_size = lr / bias_correction1;
  const double inv_sqrt_bias_correction2 = 1.0 / std::sqrt(bias_correction2);
  for (ParamState& state : states_) {
    const double decay = state.weight_decay ? 1.0 - lr * weight_decay_ : 1.0;
    update(
        state, at::Tensor(),
        {{decay, beta1_, beta2_, step_size, inv_sqrt_bias_correction2, eps_}, /*variance=*/false});
  }
}

int64_t AdamW::state_bytes() const {
  int64_t bytes = 0;
  for (const ParamState& state : states_)
    bytes += state.exp_avg.nbytes() + state.exp_avg_sq.nbytes();
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
