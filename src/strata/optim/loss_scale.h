// Dynamic loss scaling for fp16 training (Micikevicius et al. 2018, arXiv 1710.03740; the
// policy of Megatron-LM's DynamicGradScaler): the loss is multiplied by `scale` before
// backward so small gradients survive float16; a step whose gradients overflowed (inf or NaN
// on any rank) is skipped. After `hysteresis` overflows since the last growth the scale backs
// off by `backoff`; after `growth_interval` clean steps in a row it grows by `growth`.
#pragma once
#include <cstdint>

#include <nlohmann/json.hpp>

namespace strata {

class LossScaler {
 public:
  struct Policy {
    double initial = 65536.0;  // 2^16
    double growth = 2.0;
    double backoff = 0.5;
    int64_t growth_interval = 1000;
    int64_t hysteresis = 2;
    double min_scale = 1.0;
  };
  // enabled = false: scale 1 forever, nothing skipped (fp32, bf16, fp64).
  LossScaler(bool enabled, Policy policy);
  LossScaler() : LossScaler(false, Policy{}) {}

  bool enabled() const { return enabled_; }
  double scale() const { return scale_; }
  int64_t skipped_steps() const { return skipped_; }
  // After a step's gradients are known: records whether they overflowed and moves the scale
  // for the next step. Returns true when the step must be skipped.
  bool update(bool overflowed);

  // The state a checkpoint keeps, so a resumed run scales exactly as an uninterrupted one
  // (null when disabled).
  nlohmann::json state() const;
  void load_state(const nlohmann::json& state);  // a missing state (an older run) keeps initial

 private:
  bool enabled_;
  Policy policy_;
  double scale_;
  int64_t clean_steps_ = 0;      // since the last overflow or growth
  int64_t hysteresis_left_ = 0;  // overflows tolerated before the next backoff
  int64_t skipped_ = 0;
};

}  // namespace strata
