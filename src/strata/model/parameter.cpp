// Sharding specs and layout-independent initialization.
#include "strata/model/parameter.h"

#include <ATen/CPUGeneratorImpl.h>

#include "strata/core/error.h"

namespace strata {

const char* shard_axis_name(ShardAxis axis) {
  switch (axis) {
    case ShardAxis::None: return "none";
    case ShardAxis::Tp: return "tp";
    case ShardAxis::Ep: return "ep";
  }
  return "?";
}

std::vector<int64_t> ShardSpec::local_shape() const {
  std::vector<int64_t> shape = global_shape;
  if (split_dim >= 0) {
    STRATA_CHECK(shape[split_dim] % split_count == 0, "dim ", split_dim, " of size ",
                 shape[split_dim], " is not divisible into ", split_count, " pieces");
    shape[split_dim] /= split_count;
  }
  return shape;
}

std::vector<int64_t> ShardSpec::local_offsets() const {
  std::vector<int64_t> offsets(global_shape.size(), 0);
  if (split_dim >= 0) offsets[split_dim] = split_index * (global_shape[split_dim] / split_count);
  return offsets;
}

int64_t numel_of(const std::vector<int64_t>& shape) {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  return n;
}

uint64_t hash_name(uint64_t seed, const std::string& name) {
  uint64_t h = 1469598103934665603ull;
  for (unsigned char c : name) h = (h ^ c) * 1099511628211ull;
  uint64_t z = h + seed * 0x9E3779B97F4A7C15ull;
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

at::Tensor init_global_tensor(const std::string& name, const std::vector<int64_t>& global_shape,
                              InitKind kind, double std, uint64_t seed) {
  switch (kind) {
    case InitKind::Zeros: return at::zeros(global_shape, at::kFloat);
    case InitKind::Ones: return at::ones(global_shape, at::kFloat);
    case InitKind::Normal: {
      auto generator = at::make_generator<at::CPUGeneratorImpl>(hash_name(seed, name));
      // Drawn in float32 whatever the training dtype, so float64 tests start from the same
      // values as float32 runs.
      return at::normal(0.0, std, global_shape, generator, at::TensorOptions(at::kFloat));
    }
  }
  STRATA_CHECK(false, "unknown init kind");
}

Parameter make_parameter(const std::string& name, const ShardSpec& spec, InitKind kind,
                         double std, uint64_t seed, at::ScalarType dtype, bool weight_decay) {
  at::Tensor global = init_global_tensor(name, spec.global_shape, kind, std, seed);
  at::Tensor local = global;
  if (spec.split_dim >= 0) {
    int64_t piece = spec.global_shape[spec.split_dim] / spec.split_count;
    local = global.narrow(spec.split_dim, spec.split_index * piece, piece);
  }
  Parameter parameter;
  parameter.name = name;
  parameter.value = local.to(dtype).contiguous().clone().set_requires_grad(true);
  parameter.spec = spec;
  parameter.weight_decay = weight_decay;
  return parameter;
}

}  // namespace strata
