// Free-list allocation of KV cache blocks.
#include "strata/serve/block_pool.h"

#include "strata/core/error.h"

namespace strata {

BlockPool::BlockPool(int64_t num_blocks) : num_blocks_(num_blocks) {
  STRATA_CHECK(num_blocks >= 0, "block pool of ", num_blocks, " blocks");
  free_.reserve(num_blocks);
  for (int64_t block = num_blocks - 1; block >= 0; --block) free_.push_back(block);
}

bool BlockPool::allocate(int64_t count, std::vector<int64_t>& table) {
  STRATA_CHECK(count >= 0, "allocate ", count, " blocks");
  if (count > num_free()) return false;
  for (int64_t i = 0; i < count; ++i) {
    table.push_back(free_.back());
    free_.pop_back();
  }
  return true;
}

void BlockPool::release(std::vector<int64_t>& table) {
  for (const int64_t block : table) {
    STRATA_CHECK(block >= 0 && block < num_blocks_, "block ", block, " is not in the pool");
    free_.push_back(block);
  }
  STRATA_CHECK(num_free() <= num_blocks_, "a block was released twice");
  table.clear();
}

}  // namespace strata
