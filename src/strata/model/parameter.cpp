// Sharding specs and layout-independent initialization.
#include "strata/model/parameter.h"

#include <ATen/CPUGeneratorImpl.h>

#include <cstdint>

#include "strata/ckpt/checkpoint.h"
#include "strata/core/error.h"
#include "strata/core/hash.h"

namespace strata {

const char* shard_axis_name(ShardAxis axis) {
  switch (axis) {
    case ShardAxis::None:
      return "none";
    case ShardAxis::Tp:
      return "tp";
    case ShardAxis::Ep:
      return "ep";
  }
  return "?";
}

namespace {
std::vector<int64_t> blocks_of(const ShardSpec& spec) {
  if (!spec.split_blocks.empty()) return spec.split_blocks;
  return {spec.global_shape[spec.split_dim]};
}
int64_t piece_of(int64_t block, int64_t count) { return (block + count - 1) / count; }
}  // namespace

std::vector<int64_t> ShardSpec::local_shape() const {
  std::vector<int64_t> shape = global_shape;
  if (split_dim < 0) return shape;
  int64_t rows = 0;
  for (int64_t block : blocks_of(*this)) rows += piece_of(block, split_count);
  shape[split_dim] = rows;
  return shape;
}

std::vector<ShardSpec::Slice> ShardSpec::local_slices() const {
  if (split_dim < 0) return {Slice{std::vector<int64_t>(global_shape.size(), 0), global_shape, 0}};
  std::vector<Slice> slices;
  int64_t block_start = 0, local_start = 0;
  for (int64_t block : blocks_of(*this)) {
    const int64_t piece = piece_of(block, split_count);
    const int64_t begin = std::min(block, split_index * piece);
    const int64_t rows = std::min(block, begin + piece) - begin;
    if (rows > 0) {
      Slice slice{std::vector<int64_t>(global_shape.size(), 0), global_shape, local_start};
      slice.global_offsets[split_dim] = block_start + begin;
      slice.shape[split_dim] = rows;
      slices.push_back(slice);
    }
    block_start += block;
    local_start += piece;
  }
  STRATA_CHECK(block_start == global_shape[split_dim], "blocks of ", block_start,
               " rows for a dim of ", global_shape[split_dim]);
  return slices;
}

int64_t numel_of(const std::vector<int64_t>& shape) {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  return n;
}

std::vector<ShardedTensor> sharded_slices(const std::string& name, const at::Tensor& local,
                                          const ShardSpec& spec, bool write) {
  std::vector<ShardedTensor> out;
  const int64_t split_dim = std::max<int64_t>(0, spec.split_dim);
  for (const auto& slice : spec.local_slices()) {
    at::Tensor piece = local.dim() == 0
                           ? local
                           : local.narrow(split_dim, slice.local_start, slice.shape[split_dim]);
    out.push_back({name, piece, spec.global_shape, slice.global_offsets, write});
  }
  return out;
}

uint64_t hash_name(uint64_t seed, const std::string& name) {
  // FNV-1a from the basis these seeds have always used (one digit short of FNV's own).
  const uint64_t h = fnv1a(name, 1469598103934665603ull);
  // splitmix64 adds the golden ratio once more: h + seed * golden, the mix it always was.
  return splitmix64(h + (seed - 1) * 0x9e3779b97f4a7c15ull);
}

at::Tensor init_global_tensor(const std::string& name, const std::vector<int64_t>& global_shape,
                              InitKind kind, double std, uint64_t seed) {
  switch (kind) {
    case InitKind::Zeros:
      return at::zeros(global_shape, at::kFloat);
    case InitKind::Ones:
      return at::ones(global_shape, at::kFloat);
    case InitKind::Loaded:  // nothing to draw: make_parameter allocates the shard
      break;
    case InitKind::Normal: {
      auto generator = at::make_generator<at::CPUGeneratorImpl>(hash_name(seed, name));
      // Drawn in float32 whatever the training dtype, so float64 tests start from the same
      // values as float32 runs.
      return at::normal(0.0, std, global_shape, generator, at::TensorOptions(at::kFloat));
    }
  }
  STRATA_CHECK(false, "no global tensor to draw for this init kind");
}

namespace {

// A shard about to be overwritten by a load: left unwritten (the loaders check that they cover
// every element a global tensor has), so its pages are first touched by the copy that fills
// them, while the file's pages are still being read, and not in a pass of their own before it.
// Only padding rows, which are in no global tensor, are zeroed here. Blocks of 2 MiB and more
// come on transparent huge pages (core/memory.h): a fresh 4 KiB page costs a fault on first
// touch, and in a virtual machine every later TLB miss walks two page tables.
at::Tensor shard_for_loading(const ShardSpec& spec, at::ScalarType dtype) {
  at::Tensor local = at::empty(spec.local_shape(), dtype);
  if (!spec.is_split()) return local;
  const int64_t dim = spec.split_dim;
  int64_t covered_to = 0;
  const auto zero_up_to = [&](int64_t end) {
    if (end > covered_to) local.narrow(dim, covered_to, end - covered_to).zero_();
  };
  for (const auto& slice : spec.local_slices()) {  // in local order
    zero_up_to(slice.local_start);
    covered_to = slice.local_start + slice.shape[dim];
  }
  zero_up_to(local.size(dim));
  return local;
}

}  // namespace

Parameter make_parameter(const std::string& name, const ShardSpec& spec, InitKind kind, double std,
                         uint64_t seed, at::ScalarType dtype, bool weight_decay) {
  Parameter parameter;
  parameter.name = name;
  parameter.spec = spec;
  parameter.weight_decay = weight_decay;
  if (kind == InitKind::Loaded) {
    parameter.value = shard_for_loading(spec, dtype).set_requires_grad(true);
    return parameter;
  }
  at::Tensor global = init_global_tensor(name, spec.global_shape, kind, std, seed);
  at::Tensor local = at::zeros(spec.local_shape(), global.options());  // padding stays zero
  for (const auto& slice : spec.local_slices()) {
    at::Tensor source = global;
    for (size_t dim = 0; dim < slice.shape.size(); ++dim) {
      source =
          source.narrow(static_cast<int64_t>(dim), slice.global_offsets[dim], slice.shape[dim]);
    }
    const int64_t split_dim = std::max<int64_t>(0, spec.split_dim);
    local.narrow(split_dim, slice.local_start, slice.shape[split_dim]).copy_(source);
  }
  parameter.value = local.to(dtype).contiguous().set_requires_grad(true);
  return parameter;
}

}  // namespace strata
