// A model parameter that knows its global self: global name and shape, and how this rank's
// tensor is cut from the global one (which dim is split over which mesh axis). Everything
// layout-dependent -- initialization, gradient reduction groups, the global grad norm,
// checkpoints -- is derived from this one record.
#pragma once
#include <ATen/ATen.h>

#include <cstdint>
#include <string>
#include <vector>

namespace strata {

enum class ShardAxis { None, Tp, Ep };
const char* shard_axis_name(ShardAxis axis);

struct ShardSpec {
  std::vector<int64_t> global_shape;
  int64_t split_dim = -1;           // -1: this rank holds the whole tensor
  ShardAxis split_axis = ShardAxis::None;
  int64_t split_index = 0;          // this rank's piece along split_dim
  int64_t split_count = 1;          // number of equal pieces along split_dim

  std::vector<int64_t> local_shape() const;
  std::vector<int64_t> local_offsets() const;  // start of the local piece in the global tensor
};

struct Parameter {
  std::string name;   // global name, e.g. "blocks.0.attn.qkv.weight"
  at::Tensor value;   // local piece; a leaf that requires grad
  ShardSpec spec;
  bool weight_decay = true;  // false for norm weights and biases
};

// Deterministic initialization from (seed, name) alone: the global tensor is drawn from a
// generator seeded by a hash of both, then this rank's piece is cut out -- so every layout
// starts from the same model.
enum class InitKind { Normal, Zeros, Ones };
at::Tensor init_global_tensor(const std::string& name, const std::vector<int64_t>& global_shape,
                              InitKind kind, double std, uint64_t seed);
Parameter make_parameter(const std::string& name, const ShardSpec& spec, InitKind kind,
                         double std, uint64_t seed, at::ScalarType dtype, bool weight_decay);

uint64_t hash_name(uint64_t seed, const std::string& name);  // FNV-1a mixed with splitmix64

int64_t numel_of(const std::vector<int64_t>& shape);

}  // namespace strata
