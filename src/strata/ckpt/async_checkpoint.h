// Asynchronous checkpoints (checkpoint.async = true): the training loop copies the tensors it
// saves and goes on; a background thread writes and syncs this rank's file; the commit (the
// index, COMPLETE, the rename) follows on the training thread once every rank's file is
// written. MPI is called only from the training thread (FUNNELED): the thread does file I/O.
//
//   save()     collective: waits for (and commits) the save still in flight, if any, then runs
//              the prepare phase, copies the tensors and starts the writer
//   poll()     collective, after every step: one small all-gather while a save is in flight;
//              commits it once every rank's writer finished
//   finish()   collective: waits for the writer and commits (the end of training)
// At most one save is in flight. A crash before the commit leaves the staging directory,
// which loaders ignore and the next save removes: the previous checkpoint stays the newest.
#pragma once
#include <future>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "strata/ckpt/checkpoint.h"

namespace strata {

class AsyncCheckpointer {
 public:
  explicit AsyncCheckpointer(CheckpointGroup& group) : group_(group) {}
  // Waits for a writer still running; its save is left uncommitted (discarded whole).
  ~AsyncCheckpointer();
  AsyncCheckpointer(const AsyncCheckpointer&) = delete;
  AsyncCheckpointer& operator=(const AsyncCheckpointer&) = delete;

  void save(const std::string& root, int64_t step, const std::vector<ShardedTensor>& tensors,
            const nlohmann::json& state, int64_t keep);
  // The directory committed by this call, or "".
  std::string poll();
  // The directory committed by this call, or "" when nothing was in flight.
  std::string finish();
  bool in_flight() const { return pending_.has_value(); }

 private:
  struct Pending {
    std::unique_ptr<CheckpointSave> save;
    nlohmann::json state;
    std::future<nlohmann::json> record;  // the writer's FileRecord, or its exception
  };
  std::string commit();

  CheckpointGroup& group_;
  std::optional<Pending> pending_;
};

}  // namespace strata
