// A Comm carried through an autograd context: contexts hold IValues only, so the pointer
// travels as an integer. The Comm outlives every graph built over it.
#pragma once
#include <torch/csrc/autograd/custom_function.h>

#include <cstdint>

#include "strata/dist/comm.h"

namespace strata {

inline void remember_comm(torch::autograd::AutogradContext* ctx, Comm& comm) {
  ctx->saved_data["comm"] = static_cast<int64_t>(reinterpret_cast<intptr_t>(&comm));
}

inline Comm& recall_comm(torch::autograd::AutogradContext* ctx) {
  return *reinterpret_cast<Comm*>(static_cast<intptr_t>(ctx->saved_data["comm"].toInt()));
}

}  // namespace strata
