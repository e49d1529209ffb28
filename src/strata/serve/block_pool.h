// The bookkeeping of the paged KV cache on rank 0: a fixed number of blocks, each holding the
// keys and values of kBlockTokens consecutive positions of one sequence (in every layer, on
// every rank), handed out and taken back by id. The tensors themselves live in each rank's
// PagedKVCache (model/forward_context.h); a block id b owns slots
// [b * kBlockTokens, (b + 1) * kBlockTokens).
#pragma once
#include <cstdint>
#include <vector>

namespace strata {

constexpr int64_t kBlockTokens = 16;

// Blocks that hold `tokens` positions.
inline int64_t blocks_for(int64_t tokens) { return (tokens + kBlockTokens - 1) / kBlockTokens; }

class BlockPool {
 public:
  explicit BlockPool(int64_t num_blocks);

  int64_t num_blocks() const { return num_blocks_; }
  int64_t num_free() const { return static_cast<int64_t>(free_.size()); }
  int64_t num_used() const { return num_blocks_ - num_free(); }

  // Appends `count` free blocks to `table`; false (and nothing taken) if fewer are free.
  bool allocate(int64_t count, std::vector<int64_t>& table);
  // Returns every block of `table` to the pool and empties it.
  void release(std::vector<int64_t>& table);

 private:
  int64_t num_blocks_;
  std::vector<int64_t> free_;  // a stack: the most recently freed block is reused first
};

}  // namespace strata
