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

// How this rank's tensor is cut from the global one. The split dim is a sequence of blocks
// (one block by default); each block is cut into split_count equal pieces of
// ceil(block / split_count) rows, and this rank holds piece split_index of every block, in
// block order. Blocks keep fused weights correct under tensor parallelism: SwiGLU's
// up-projection is blocks {F, F} (gate, value), so each rank holds matching gate and value
// rows. A block not divisible by split_count is padded at its end (the vocabulary): padding
// rows are part of the local tensor but of no global tensor, checkpoint or loss.
struct ShardSpec {
  std::vector<int64_t> global_shape;
  int64_t split_dim = -1;  // -1: this rank holds the whole tensor
  ShardAxis split_axis = ShardAxis::None;
  int64_t split_index = 0;            // this rank's piece of each block
  int64_t split_count = 1;            // pieces per block
  std::vector<int64_t> split_blocks;  // block sizes along split_dim; empty = one block

  // One contiguous region of the global tensor held locally.
  struct Slice {
    std::vector<int64_t> global_offsets;  // where it starts in the global tensor
    std::vector<int64_t> shape;
    int64_t local_start = 0;  // where it starts along split_dim in the local tensor
  };
  std::vector<int64_t> local_shape() const;  // including padding rows
  std::vector<Slice> local_slices() const;   // the real (non-padding) regions, in local order
  bool is_split() const { return split_dim >= 0 && split_count > 1; }
  // Each rank of that mesh axis holds a different piece (else it holds a replica).
  bool is_split_over(ShardAxis axis) const { return is_split() && split_axis == axis; }
};

struct Parameter {
  std::string name;  // global name, e.g. "blocks.0.attn.qkv.weight"
  at::Tensor value;  // local piece; a leaf that requires grad
  ShardSpec spec;
  bool weight_decay = true;  // false for norm weights and biases
  // Replicated over tp, but each tp rank's gradient is only its part of the sum (norms under
  // sequence parallelism, replicated key/value heads): the gradient is summed over tp.
  bool tp_partial_grad = false;
  // Held by two pipeline stages (the tied token embedding: input on the first virtual stage,
  // head on the last): the copies' gradients are summed, and only the first stage's copy is
  // saved and counted.
  bool pp_tied = false;
  bool pp_tied_copy = false;  // the last virtual stage's copy of a pp_tied parameter
};

// Deterministic initialization from (seed, name) alone: the global tensor is drawn from a
// generator seeded by a hash of both, then this rank's piece is cut out -- so every layout
// starts from the same model.
// Loaded: this rank's shard only, in the parameter's dtype, left for a loader to fill (only
// its padding rows are zeroed).
enum class InitKind { Normal, Zeros, Ones, Loaded };
// How a model's parameters start: drawn (InitKind per parameter), or left for loading.
enum class ParameterInit { random, loaded };
at::Tensor init_global_tensor(const std::string& name, const std::vector<int64_t>& global_shape,
                              InitKind kind, double std, uint64_t seed);
Parameter make_parameter(const std::string& name, const ShardSpec& spec, InitKind kind, double std,
                         uint64_t seed, at::ScalarType dtype, bool weight_decay);

// The pieces of a local tensor (shaped like spec.local_shape()) as checkpoint slices, padding
// left out. `write` = false on ranks whose identical replica another rank writes.
struct ShardedTensor;
std::vector<ShardedTensor> sharded_slices(const std::string& name, const at::Tensor& local,
                                          const ShardSpec& spec, bool write);

uint64_t hash_name(uint64_t seed, const std::string& name);  // FNV-1a mixed with splitmix64

int64_t numel_of(const std::vector<int64_t>& shape);

}  // namespace strata
