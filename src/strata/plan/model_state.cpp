// Model-state bytes per precision and ZeRO stage (the table in the header).
#include "strata/plan/model_state.h"

#include "strata/core/error.h"

namespace strata {

Precision parse_precision(const std::string& name) {
  if (auto precision = parse_choice<Precision>(name)) return *precision;
  throw UserError(str("precision '", name, "' must be ", spellings_quoted<Precision>()));
}

StateBytesPerParameter state_bytes_per_parameter(Precision precision) {
  switch (precision) {
    case Precision::bf16:
    case Precision::fp16:
      return {2, 2, 12, 2};
    case Precision::fp32:
      return {4, 4, 8, 4};
    case Precision::fp64:
      return {8, 8, 16, 8};
  }
  STRATA_CHECK(false, "unknown precision");
}

ModelStateBytes model_state_bytes(double parameters, int64_t zero, int64_t data_parallel,
                                  Precision precision) {
  STRATA_CHECK(zero >= 0 && zero <= 3 && data_parallel >= 1, "zero ", zero, " dp ", data_parallel);
  const StateBytesPerParameter per = state_bytes_per_parameter(precision);
  const double n = static_cast<double>(data_parallel);
  ModelStateBytes bytes;
  bytes.optimizer = per.optimizer * parameters / (zero >= 1 ? n : 1.0);
  bytes.grads = per.grads * parameters / (zero >= 2 ? n : 1.0);
  bytes.params = per.weights * parameters / (zero >= 3 ? n : 1.0);
  return bytes;
}

}  // namespace strata
