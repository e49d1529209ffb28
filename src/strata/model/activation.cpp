// GELU and SwiGLU in h's dtype (float16 on CPU through float32: core/precision.h).
#include "strata/model/activation.h"

#include "strata/core/precision.h"
#include "strata/kernels/gelu.h"

namespace strata {

at::Tensor ffn_activation(const at::Tensor& h, Activation activation) {
  const at::Tensor x = computable(h);
  at::Tensor y;
  if (activation == Activation::swiglu) {
    const int64_t F = x.size(-1) / 2;
    y = at::silu(x.narrow(-1, 0, F)) * x.narrow(-1, F, F);
  } else {
    y = gelu_tanh(x);
  }
  return y.to(h.scalar_type());
}

}  // namespace strata
