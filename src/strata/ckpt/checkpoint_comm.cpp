// CommCheckpointGroup: the save protocol's one collective on a strata::Comm. Kept apart from
// the protocol so that code (and its tests) builds and runs without MPI.
#include <cstring>

#include "strata/ckpt/checkpoint.h"
#include "strata/dist/comm.h"

namespace strata {

int CommCheckpointGroup::rank() const { return comm_.rank(); }

int CommCheckpointGroup::size() const { return comm_.size(); }

// Two all-gathers: every rank's length, then every rank's bytes padded to the longest (a
// fixed-size collective; the messages here are a few kilobytes of JSON).
std::vector<std::string> CommCheckpointGroup::all_gather_bytes(const std::string& bytes) {
  const int64_t size = comm_.size();
  at::Tensor length = at::full({1}, static_cast<int64_t>(bytes.size()), at::kLong);
  at::Tensor lengths = at::empty({size}, at::kLong);
  comm_.all_gather(lengths, length);
  const int64_t longest = lengths.max().item<int64_t>();

  std::vector<std::string> gathered(size);
  if (longest == 0) return gathered;
  at::Tensor padded = at::zeros({longest}, at::kByte);
  std::memcpy(padded.data_ptr(), bytes.data(), bytes.size());
  at::Tensor all = at::empty({size * longest}, at::kByte);
  comm_.all_gather(all, padded);
  const auto* data = static_cast<const char*>(all.data_ptr());
  for (int64_t rank = 0; rank < size; ++rank) {
    gathered[rank].assign(data + rank * longest, lengths[rank].item<int64_t>());
  }
  return gathered;
}

std::string save_checkpoint(const std::string& root, int64_t step,
                            const std::vector<ShardedTensor>& tensors, const nlohmann::json& state,
                            Comm& world, int64_t keep) {
  CommCheckpointGroup group(world);
  return save_checkpoint(root, step, tensors, state, group, keep);
}

}  // namespace strata
