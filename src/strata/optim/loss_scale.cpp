// The dynamic loss-scale policy.
#include "strata/optim/loss_scale.h"

#include <algorithm>

namespace strata {

LossScaler::LossScaler(bool enabled, Policy policy)
    : enabled_(enabled),
      policy_(policy),
      scale_(enabled ? policy.initial : 1.0),
      hysteresis_left_(policy.hysteresis) {}

bool LossScaler::update(bool overflowed) {
  if (!enabled_) return false;
  if (overflowed) {
    ++skipped_;
    clean_steps_ = 0;
    if (--hysteresis_left_ <= 0) scale_ = std::max(scale_ * policy_.backoff, policy_.min_scale);
    return true;
  }
  if (++clean_steps_ == policy_.growth_interval) {
    clean_steps_ = 0;
    hysteresis_left_ = policy_.hysteresis;
    scale_ *= policy_.growth;
  }
  return false;
}

nlohmann::json LossScaler::state() const {
  if (!enabled_) return nullptr;
  return {{"scale", scale_},
          {"clean_steps", clean_steps_},
          {"hysteresis_left", hysteresis_left_},
          {"skipped_steps", skipped_}};
}

void LossScaler::load_state(const nlohmann::json& state) {
  if (!enabled_ || state.is_null()) return;
  scale_ = state.at("scale").get<double>();
  clean_steps_ = state.at("clean_steps").get<int64_t>();
  hysteresis_left_ = state.at("hysteresis_left").get<int64_t>();
  skipped_ = state.at("skipped_steps").get<int64_t>();
}

}  // namespace strata
