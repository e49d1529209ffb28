// The bookkeeping of the paged KV cache on rank 0: a fixed number of blocks, each holding the
// keys and values of kBlockTokens consecutive positions (in every layer, on every rank),
// handed out and taken back by id. The tensors themselves live in each rank's PagedKVCache
// (model/forward_context.h); a block id b owns slots [b * kBlockTokens, (b + 1) * kBlockTokens).
//
// Prefix caching. A full block is content-addressed: its key is the hash of every token id up
// to and including the block (its parent block's key and its own 16 ids). Blocks are
// reference-counted: several sequences that share a prompt prefix share its full blocks (they
// only read them; a sequence writes only past its cached prefix, into blocks of its own). A
// block whose last holder lets go keeps its contents and its key, and is reused by a later
// sequence with the same prefix, until the pool needs it: blocks never used or never filled are
// handed out first, then cached ones, least recently released first (a sequence's blocks are
// released last block first, so the end of a prefix goes before its beginning). A hit is
// checked against the block's stored ids and parent key, so a hash collision is never a wrong
// prefix.
#pragma once
#include <cstdint>
#include <list>
#include <unordered_map>
#include <vector>

namespace strata {

constexpr int64_t kBlockTokens = 16;

// Blocks that hold `tokens` positions.
inline int64_t blocks_for(int64_t tokens) { return (tokens + kBlockTokens - 1) / kBlockTokens; }

// The content key of the full block holding tokens[0, kBlockTokens), after the block whose key
// is `parent` (0 for a sequence's first block).
uint64_t block_key(uint64_t parent, const int64_t* tokens);

class BlockPool {
 public:
  // caching: whether released full blocks keep their contents for reuse (serve.prefix_cache).
  explicit BlockPool(int64_t num_blocks, bool caching = false);

  int64_t num_blocks() const { return num_blocks_; }
  // Blocks a sequence may take: never used or emptied, and cached ones no sequence holds.
  int64_t num_free() const { return static_cast<int64_t>(empty_.size() + released_.size()); }
  int64_t num_used() const { return num_blocks_ - num_free(); }
  // Free blocks whose contents are kept for a later sequence with the same prefix.
  int64_t num_cached() const { return static_cast<int64_t>(released_.size()); }
  bool caching() const { return caching_; }

  // Appends `count` free blocks to `table`; false (and nothing taken) if fewer are free.
  bool allocate(int64_t count, std::vector<int64_t>& table);
  // Lets go of every block of `table` (last first) and empties it.
  void release(std::vector<int64_t>& table);

  // Prefix caching: `tokens` are a sequence's first tokens, `keys` the keys of its full blocks
  // (block_key chained; at least max_blocks of them). Takes the longest run of cached blocks,
  // at most max_blocks, that holds tokens[0, run * kBlockTokens), appends them to `table` and
  // returns the run's length. 0 without caching.
  int64_t take_prefix(const int64_t* tokens, const std::vector<uint64_t>& keys, int64_t max_blocks,
                      std::vector<int64_t>& table);
  // Marks `block` (held, full: it holds `tokens`, kBlockTokens ids, after the block keyed
  // `parent`) as cached under `key`, unless another block already is.
  void cache(int64_t block, uint64_t key, uint64_t parent, const int64_t* tokens);

 private:
  struct Block {
    int64_t holders = 0;
    bool keyed = false;  // in keyed_ under `key`
    uint64_t key = 0, parent = 0;
    std::vector<int64_t> tokens;         // the ids it holds, when keyed
    std::list<int64_t>::iterator entry;  // its place in released_, when free and keyed
  };
  void forget(int64_t block);  // drops a block's key: its contents will be overwritten

  int64_t num_blocks_;
  bool caching_;
  std::vector<Block> blocks_;
  std::vector<int64_t> empty_;   // free, no contents kept: a stack, the last freed first
  std::list<int64_t> released_;  // free, keyed: least recently released at the front
  std::unordered_map<uint64_t, int64_t> keyed_;  // key -> block
};

}  // namespace strata
