// Sharded checkpoints that load into any layout (docs/checkpoint.md).
//
// A checkpoint is a directory <root>/step_<8 digits>/ holding:
//   rank_<5 digits>.safetensors  the tensors (slices) this rank wrote, safetensors format
//   index.json                   every tensor: global shape, dtype, and for each slice the
//                                file, offsets and shape; every file: size and CRC-32
//   state.json                   training state (step, data position, RNG, config, layout)
//   COMPLETE                     marker, present only when everything above is synced
// It is written into <root>/.tmp.step_<...>/ and renamed into place after every rank has
// synced its file, so a crash while saving leaves the previous checkpoint loadable and never
// a half one under a step_ name. Loaders ignore directories without COMPLETE.
#pragma once
#include <ATen/ATen.h>

#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

namespace strata {

class Comm;

// One tensor as this rank holds it: a slice of a global tensor.
struct ShardedTensor {
  std::string name;                   // global name, e.g. "blocks.0.attn.qkv.weight"
  at::Tensor local;                   // this rank's slice (any dtype; made contiguous on save)
  std::vector<int64_t> global_shape;  // shape of the whole tensor
  std::vector<int64_t> offsets;       // start of `local` inside the global tensor, per dim
  bool write = true;  // false on ranks whose identical replica another rank writes
};

// Collective over `world`. Writes the checkpoint for `step` under `root` and returns its
// directory. Keeps the newest `keep` complete checkpoints (0 = all).
std::string save_checkpoint(const std::string& root, int64_t step,
                            const std::vector<ShardedTensor>& tensors,
                            const nlohmann::json& state, Comm& world, int64_t keep = 0);

// The newest complete checkpoint directory under root, or "" if there is none.
std::string find_latest_checkpoint(const std::string& root);

// Reads state.json of a complete checkpoint. Throws UserError if dir is not one.
nlohmann::json read_checkpoint_state(const std::string& dir);

// Fills each tensor's `local` (shape and dtype already set by the caller's layout) from
// whatever slices of the checkpoint overlap it, and returns state.json. Verifies the CRC-32
// of every file it reads. Throws UserError naming the file/tensor for a missing marker,
// a checksum mismatch or truncated file, a missing tensor, a global-shape mismatch, or a
// region of a tensor no slice covers.
nlohmann::json load_checkpoint(const std::string& dir, std::vector<ShardedTensor>& tensors);

}  // namespace strata
