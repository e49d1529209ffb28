// AsyncCheckpointer: the save protocol of checkpoint_save.cpp with its write phase on a
// background thread.
#include "strata/ckpt/async_checkpoint.h"

#include <chrono>

#include "strata/core/fault_injection.h"

namespace strata {

AsyncCheckpointer::~AsyncCheckpointer() {
  if (pending_ && pending_->record.valid()) pending_->record.wait();
}

void AsyncCheckpointer::save(const std::string& root, int64_t step,
                             const std::vector<ShardedTensor>& tensors, const nlohmann::json& state,
                             int64_t keep) {
  finish();
  // The copies the writer owns: the training thread goes on updating the originals.
  std::vector<ShardedTensor> copies = tensors;
  for (ShardedTensor& copy : copies) {
    if (copy.write) copy.local = copy.local.detach().clone(at::MemoryFormat::Contiguous);
  }
  Pending pending{std::make_unique<CheckpointSave>(root, step, group_, keep), state, {}};
  const CheckpointSave* staged = pending.save.get();
  const int rank = group_.rank();
  pending.record =
      std::async(std::launch::async, [staged, copies = std::move(copies), step, rank]() {
        nlohmann::json record = staged->write(copies);
        inject_fault("async_write", step, rank);
        return record;
      });
  pending_ = std::move(pending);
}

std::string AsyncCheckpointer::poll() {
  if (!pending_) return "";
  using namespace std::chrono_literals;
  const bool written = pending_->record.wait_for(0s) == std::future_status::ready;
  for (const std::string& reply : group_.all_gather_bytes(written ? "1" : "0")) {
    if (reply != "1") return "";
  }
  return commit();
}

std::string AsyncCheckpointer::finish() { return pending_ ? commit() : ""; }

std::string AsyncCheckpointer::commit() {
  Pending pending = std::move(*pending_);
  pending_.reset();
  return pending.save->commit([&] { return pending.record.get(); }, pending.state);
}

}  // namespace strata
