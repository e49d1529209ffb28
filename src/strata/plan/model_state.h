// Bytes of model state per parameter for each training precision, and how ZeRO (Rajbhandari
// et al. 2020) divides them over the N_d data-parallel ranks: stage 1 shards the optimizer
// state, stage 2 also the gradients, stage 3 also the parameters.
//   mixed precision (bf16, fp16): 2 weights + 2 gradients + 12 optimizer (fp32 master, m, v)
//   = 16, as the ZeRO paper counts (strata's runtime accumulates gradients in fp32: 18)
//   fp32 (this release's CPU runtime): 4 + 4 + 8 (m, v) = 16
//   fp64 (tests): 8 + 8 + 16
#pragma once
#include <cstdint>
#include <string>

#include "strata/core/config_enums.h"

namespace strata {

// "fp32", "bf16", "fp16" or "fp64" (config_enums.h); throws UserError for anything else.
Precision parse_precision(const std::string& name);

struct StateBytesPerParameter {
  double weights = 0, grads = 0, optimizer = 0;
  double activation_element = 0;  // bytes of one activation element
};
StateBytesPerParameter state_bytes_per_parameter(Precision precision);

struct ModelStateBytes {
  double params = 0, grads = 0, optimizer = 0;
  double total() const { return params + grads + optimizer; }
};

// Model-state bytes on one device holding `parameters` parameters replicated over
// `data_parallel` ranks, with ZeRO stage `zero` (0..3) sharding over those ranks.
ModelStateBytes model_state_bytes(double parameters, int64_t zero, int64_t data_parallel,
                                  Precision precision);

}  // namespace strata
