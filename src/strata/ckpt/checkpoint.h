// Sharded checkpoints that load into any layout (docs/checkpoint.md).
//
// A checkpoint is a directory <root>/step_<8 digits>/ holding:
//   rank_<5 digits>.safetensors  the tensors (slices) this rank wrote, safetensors format
//                                (a rank with nothing to write writes no file)
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
#include <functional>
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
  bool write = true;                  // false on ranks whose identical replica another rank writes
};

// The one collective a save needs, apart from Comm, so that the save protocol also runs in a
// single process (offline tools, unit tests). Every rank of the group calls it the same
// number of times.
class CheckpointGroup {
 public:
  virtual ~CheckpointGroup() = default;
  virtual int rank() const = 0;
  virtual int size() const = 0;
  // Every rank's `bytes`, indexed by rank.
  virtual std::vector<std::string> all_gather_bytes(const std::string& bytes) = 0;
};

// A group of one process: saving without MPI.
class SingleProcessGroup final : public CheckpointGroup {
 public:
  int rank() const override { return 0; }
  int size() const override { return 1; }
  std::vector<std::string> all_gather_bytes(const std::string& bytes) override { return {bytes}; }
};

// A Comm as a CheckpointGroup: all-gathers the lengths, then the bytes padded to the longest.
class CommCheckpointGroup final : public CheckpointGroup {
 public:
  explicit CommCheckpointGroup(Comm& comm) : comm_(comm) {}
  int rank() const override;
  int size() const override;
  std::vector<std::string> all_gather_bytes(const std::string& bytes) override;

 private:
  Comm& comm_;
};

// Collective over `world`. Writes the checkpoint for `step` under `root` and returns its
// directory. Keeps the newest `keep` complete checkpoints (0 = all). state.json is rank 0's
// `state`. A failure on any rank (disk full, unwritable root) throws on every rank, naming
// that rank, instead of leaving the others waiting. A tensor with write=false on every rank
// holding some region of it, or written by two ranks, is a bug (InternalError).
std::string save_checkpoint(const std::string& root, int64_t step,
                            const std::vector<ShardedTensor>& tensors, const nlohmann::json& state,
                            Comm& world, int64_t keep = 0);
std::string save_checkpoint(const std::string& root, int64_t step,
                            const std::vector<ShardedTensor>& tensors, const nlohmann::json& state,
                            CheckpointGroup& group, int64_t keep = 0);

// save_checkpoint in its three steps, for a save whose file is written apart from the
// collectives (AsyncCheckpointer writes it on a background thread):
//   CheckpointSave save(root, step, group, keep);   collective: the prepare phase
//   nlohmann::json record = save.write(tensors);    this rank's file; no communication
//   save.commit([&] { return record; }, state);     collective: gather the records, commit
// `record` passed to commit returns this rank's record or throws its write's failure; any
// rank's failure throws on every rank. Until commit renames it into place the save lives in
// a hidden staging directory that loaders ignore and the next save removes.
class CheckpointSave {
 public:
  CheckpointSave(const std::string& root, int64_t step, CheckpointGroup& group, int64_t keep);
  nlohmann::json write(const std::vector<ShardedTensor>& tensors) const;
  std::string commit(const std::function<nlohmann::json()>& record, const nlohmann::json& state);
  int64_t step() const { return step_; }

 private:
  std::string root_;
  int64_t step_, keep_;
  CheckpointGroup& group_;
  std::string staging_dir_, what_;
};

// <root>/step_<8 digits>: where save_checkpoint puts `step`.
std::string checkpoint_dir(const std::string& root, int64_t step);

// The newest complete checkpoint directory under root, or "" if there is none.
std::string find_latest_checkpoint(const std::string& root);

// Every step_* directory under root, newest first, complete or not (a resume reports the
// ones it cannot use before it falls back to older ones). Empty if root does not exist.
std::vector<std::string> list_checkpoints(const std::string& root);

// Reads state.json of a complete checkpoint. Throws UserError if dir is not one.
nlohmann::json read_checkpoint_state(const std::string& dir);

// Fills each tensor's `local` (shape and dtype already set by the caller's layout) from
// whatever slices of the checkpoint overlap it, and returns state.json. Verifies the CRC-32
// of every file it reads. Throws UserError naming the file/tensor for a missing marker,
// a checksum mismatch or truncated file, a missing tensor, a global-shape mismatch, or a
// region of a tensor no slice covers. A dtype other than the saved one is converted.
nlohmann::json load_checkpoint(const std::string& dir, std::vector<ShardedTensor>& tensors);

}  // namespace strata
