// Allocation of KV cache blocks: reference counts, the free stack and the cached blocks'
// least-recently-released list.
#include "strata/serve/block_pool.h"

#include <algorithm>
#include <string_view>

#include "strata/core/error.h"
#include "strata/core/hash.h"

namespace strata {

uint64_t block_key(uint64_t parent, const int64_t* tokens) {
  const uint64_t hash =
      fnv1a(std::string_view(reinterpret_cast<const char*>(&parent), sizeof parent));
  return fnv1a(
      std::string_view(reinterpret_cast<const char*>(tokens), kBlockTokens * sizeof(int64_t)),
      hash);
}

BlockPool::BlockPool(int64_t num_blocks, bool caching)
    : num_blocks_(num_blocks), caching_(caching) {
  STRATA_CHECK(num_blocks >= 0, "block pool of ", num_blocks, " blocks");
  blocks_.resize(num_blocks);
  empty_.reserve(num_blocks);
  for (int64_t block = num_blocks - 1; block >= 0; --block) empty_.push_back(block);
}

void BlockPool::forget(int64_t block) {
  Block& entry = blocks_[block];
  if (!entry.keyed) return;
  auto keyed = keyed_.find(entry.key);
  if (keyed != keyed_.end() && keyed->second == block) keyed_.erase(keyed);
  entry.keyed = false;
  entry.tokens.clear();
}

bool BlockPool::allocate(int64_t count, std::vector<int64_t>& table) {
  STRATA_CHECK(count >= 0, "allocate ", count, " blocks");
  if (count > num_free()) return false;
  for (int64_t i = 0; i < count; ++i) {
    int64_t block;
    if (!empty_.empty()) {
      block = empty_.back();
      empty_.pop_back();
    } else {  // evict the least recently released cached block
      block = released_.front();
      released_.pop_front();
      forget(block);
    }
    blocks_[block].holders = 1;
    table.push_back(block);
  }
  return true;
}

void BlockPool::release(std::vector<int64_t>& table) {
  for (auto it = table.rbegin(); it != table.rend(); ++it) {
    const int64_t block = *it;
    STRATA_CHECK(block >= 0 && block < num_blocks_, "block ", block, " is not in the pool");
    Block& entry = blocks_[block];
    STRATA_CHECK(entry.holders > 0, "block ", block, " was released twice");
    if (--entry.holders > 0) continue;
    if (entry.keyed) {
      entry.entry = released_.insert(released_.end(), block);
    } else {
      empty_.push_back(block);
    }
  }
  table.clear();
}

int64_t BlockPool::take_prefix(const int64_t* tokens, const std::vector<uint64_t>& keys,
                               int64_t max_blocks, std::vector<int64_t>& table) {
  if (!caching_) return 0;
  STRATA_CHECK(static_cast<int64_t>(keys.size()) >= max_blocks, "keys of ", keys.size(),
               " blocks for a prefix of ", max_blocks);
  int64_t run = 0;
  for (; run < max_blocks; ++run) {
    auto keyed = keyed_.find(keys[run]);
    if (keyed == keyed_.end()) break;
    Block& entry = blocks_[keyed->second];
    const uint64_t parent = run == 0 ? 0 : keys[run - 1];
    if (entry.parent != parent ||
        !std::equal(entry.tokens.begin(), entry.tokens.end(), tokens + run * kBlockTokens)) {
      break;  // a hash collision: not this prefix
    }
    if (entry.holders++ == 0) released_.erase(entry.entry);
    table.push_back(keyed->second);
  }
  return run;
}

void BlockPool::cache(int64_t block, uint64_t key, uint64_t parent, const int64_t* tokens) {
  if (!caching_) return;
  Block& entry = blocks_[block];
  STRATA_CHECK(entry.holders > 0, "caching block ", block, ", which no sequence holds");
  if (entry.keyed || keyed_.count(key) > 0) return;
  entry.keyed = true;
  entry.key = key;
  entry.parent = parent;
  entry.tokens.assign(tokens, tokens + kBlockTokens);
  keyed_.emplace(key, block);
}

}  // namespace strata
