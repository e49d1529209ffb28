// Dtypes of a precision.
#include "strata/core/precision.h"

#include <ATen/ATen.h>

namespace strata {

at::ScalarType compute_dtype(Precision precision) {
  switch (precision) {
    case Precision::fp32:
      return at::kFloat;
    case Precision::bf16:
      return at::kBFloat16;
    case Precision::fp16:
      return at::kHalf;
    case Precision::fp64:
      return at::kDouble;
  }
  STRATA_CHECK(false, "unknown precision");
}

at::ScalarType master_dtype(Precision precision) {
  return precision == Precision::fp64 ? at::kDouble : at::kFloat;
}

at::Tensor computable(const at::Tensor& x) {
  return x.scalar_type() == at::kHalf && x.is_cpu() ? x.to(at::kFloat) : x;
}

}  // namespace strata
