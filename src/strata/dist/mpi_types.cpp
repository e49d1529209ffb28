// ATen dtypes and ReduceOps as MPI datatypes and operations. MPI has no 16-bit floats, so
// bfloat16 and float16 travel as 2-byte MPI_UINT16_T elements (2 bytes on the wire, not 4)
// and reduce with user-defined operations that widen each pair to float, combine, and round
// back to nearest-even, exactly what an ATen add/max/min on those dtypes computes.
#include <c10/util/BFloat16.h>
#include <c10/util/Half.h>

#include <array>
#include <cmath>
#include <cstdio>

#include "strata/core/error.h"

#include "strata/dist/mpi_internal.h"

namespace strata::dist_internal {
namespace {

template <typename T>
float widen(T value) {
  return static_cast<float>(value);
}

// inout[i] = combine(in[i], inout[i]) for 16-bit float types T.
template <typename T, typename Combine>
void reduce_16bit(void* in, void* inout, int* len, Combine combine) {
  const T* a = static_cast<const T*>(in);
  T* b = static_cast<T*>(inout);
  for (int i = 0; i < *len; ++i) b[i] = T(combine(widen(a[i]), widen(b[i])));
}

float add(float a, float b) { return a + b; }
// NaN propagates, as in at::maximum / at::minimum.
float max_nan(float a, float b) { return (a > b || std::isnan(a)) ? a : b; }
float min_nan(float a, float b) { return (a < b || std::isnan(a)) ? a : b; }

// Large bfloat16/float16 sums go through ATen's vectorized kernels (same rounding).
template <typename T>
void sum_16bit(void* in, void* inout, int* len, MPI_Datatype*) {
  constexpr int kVectorizeFrom = 4096;
  if (*len < kVectorizeFrom) return reduce_16bit<T>(in, inout, len, add);
  const auto dtype = std::is_same_v<T, c10::BFloat16> ? at::kBFloat16 : at::kHalf;
  const auto options = at::TensorOptions().dtype(dtype);
  const int64_t n = *len;
  at::from_blob(inout, {n}, options).add_(at::from_blob(in, {n}, options));
}
template <typename T>
void max_16bit(void* in, void* inout, int* len, MPI_Datatype*) {
  reduce_16bit<T>(in, inout, len, max_nan);
}
template <typename T>
void min_16bit(void* in, void* inout, int* len, MPI_Datatype*) {
  reduce_16bit<T>(in, inout, len, min_nan);
}

// The six user-defined operations, created on first use (MPI_Op_create is local) and
// freed by finalize_mpi.
struct CustomOps {
  MPI_Op bf16_sum = MPI_OP_NULL, bf16_max = MPI_OP_NULL, bf16_min = MPI_OP_NULL;
  MPI_Op f16_sum = MPI_OP_NULL, f16_max = MPI_OP_NULL, f16_min = MPI_OP_NULL;
  std::array<MPI_Op*, 6> all() {
    return {&bf16_sum, &bf16_max, &bf16_min, &f16_sum, &f16_max, &f16_min};
  }
};
CustomOps& custom_op_storage() {
  static CustomOps ops;
  return ops;
}
const CustomOps& custom_ops() {
  CustomOps& ops = custom_op_storage();
  if (ops.bf16_sum != MPI_OP_NULL) return ops;
  const int commutative = 1;
  const std::array<MPI_User_function*, 6> functions = {
      &sum_16bit<c10::BFloat16>, &max_16bit<c10::BFloat16>, &min_16bit<c10::BFloat16>,
      &sum_16bit<c10::Half>,     &max_16bit<c10::Half>,     &min_16bit<c10::Half>};
  const auto handles = ops.all();
  for (size_t i = 0; i < handles.size(); ++i) {
    const int rc = MPI_Op_create(functions[i], commutative, handles[i]);
    if (rc != MPI_SUCCESS) {
      throw CommError("MPI_Op_create for the bfloat16/float16 reductions failed: " +
                      mpi_error_string(rc));
    }
  }
  return ops;
}

}  // namespace

MPI_Datatype mpi_datatype_of(at::ScalarType dtype) {
  static_assert(sizeof(bool) == 1, "at::kBool travels as MPI_C_BOOL (1 byte)");
  switch (dtype) {
    case at::kFloat:
      return MPI_FLOAT;
    case at::kDouble:
      return MPI_DOUBLE;
    case at::kBFloat16:
    case at::kHalf:
      return MPI_UINT16_T;
    case at::kInt:
      return MPI_INT32_T;
    case at::kLong:
      return MPI_INT64_T;
    case at::kShort:
      return MPI_INT16_T;
    case at::kChar:
      return MPI_INT8_T;
    case at::kByte:
      return MPI_UINT8_T;
    case at::kBool:
      return MPI_C_BOOL;
    default:
      return MPI_DATATYPE_NULL;
  }
}

MPI_Op mpi_op_of(ReduceOp op, at::ScalarType dtype) {
  if (dtype == at::kBFloat16 || dtype == at::kHalf) {
    const CustomOps& ops = custom_ops();
    const bool bf16 = dtype == at::kBFloat16;
    switch (op) {
      case ReduceOp::Sum:
      case ReduceOp::Avg:
        return bf16 ? ops.bf16_sum : ops.f16_sum;
      case ReduceOp::Max:
        return bf16 ? ops.bf16_max : ops.f16_max;
      case ReduceOp::Min:
        return bf16 ? ops.bf16_min : ops.f16_min;
    }
  }
  if (dtype == at::kBool) {  // torch's bool arithmetic: sum and max are "or", min is "and"
    switch (op) {
      case ReduceOp::Sum:
      case ReduceOp::Max:
        return MPI_LOR;
      case ReduceOp::Min:
        return MPI_LAND;
      case ReduceOp::Avg:
        return MPI_OP_NULL;
    }
  }
  if (mpi_datatype_of(dtype) == MPI_DATATYPE_NULL) return MPI_OP_NULL;
  const bool floating = at::isFloatingType(dtype);
  switch (op) {
    case ReduceOp::Sum:
      return MPI_SUM;
    case ReduceOp::Avg:
      return floating ? MPI_SUM : MPI_OP_NULL;  // integer mean is inexact
    case ReduceOp::Max:
      return MPI_MAX;
    case ReduceOp::Min:
      return MPI_MIN;
  }
  return MPI_OP_NULL;
}

void free_custom_ops() {
  for (MPI_Op* op : custom_op_storage().all()) {
    if (*op == MPI_OP_NULL) continue;
    const int rc = MPI_Op_free(op);  // frees and resets to MPI_OP_NULL
    if (rc != MPI_SUCCESS) {
      std::fprintf(stderr, "strata: MPI_Op_free of a 16-bit reduction failed: %s\n",
                   mpi_error_string(rc).c_str());
      *op = MPI_OP_NULL;
    }
  }
}

}  // namespace strata::dist_internal
