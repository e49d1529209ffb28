// Token shards: one file holding a run of token ids, in the binary format documented in
// docs/data.md ("STRATOK\0" header of 64 bytes, little-endian uint16 or uint32 ids, then
// (version 2) where documents begin and an optional per-token loss mask). Writes are atomic
// (a reader never sees half a shard); reads refuse anything malformed and still read
// version 1 (ids only).
#pragma once
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

namespace strata {

// Header layout constants, shared with the tests that build corrupt files on purpose.
inline constexpr char kShardMagic[8] = {'S', 'T', 'R', 'A', 'T', 'O', 'K', '\0'};
inline constexpr uint32_t kShardVersion = 2;
inline constexpr uint32_t kShardFlagLossMask = 1;  // header flags (offset 56): a mask follows
inline constexpr size_t kShardHeaderBytes = 64;
inline constexpr size_t kShardNameBytes = 32;  // tokenizer name, NUL-padded, at most 31 chars

enum class ShardDtype : uint32_t { UInt16 = 1, UInt32 = 2 };

// The narrowest dtype that holds every id of a vocabulary of this size.
ShardDtype shard_dtype_for_vocab(int64_t vocab_size);
size_t shard_dtype_bytes(ShardDtype dtype);
const char* shard_dtype_name(ShardDtype dtype);

struct TokenShard {
  uint32_t version = kShardVersion;  // 1: ids only, no document boundaries
  std::string tokenizer;             // shard_tokenizer_label of the tokenizer that made the ids
  ShardDtype dtype = ShardDtype::UInt16;
  std::vector<int32_t> tokens;
  // Ascending offsets into `tokens` where a document begins; a shard that starts inside a
  // document does not list 0. Always empty in a version-1 shard.
  std::vector<int64_t> document_starts;
  // Empty, or one entry per token: 1 where the token carries loss as a target, else 0.
  std::vector<uint8_t> loss_mask;
};

// What a shard's header records of the tokenizer called `name`: the name itself when it fits
// (at most 31 bytes), else "#" and 16 hex digits of its 64-bit FNV-1a hash (a tokenizer
// loaded from a directory is named by its path, which may be longer). Idempotent.
std::string shard_tokenizer_label(const std::string& name);

// What one shard file holds, borrowed from the caller (document_starts and loss_mask as in
// TokenShard; loss_mask null for none, else `count` entries).
struct ShardContents {
  const int32_t* tokens = nullptr;
  size_t count = 0;
  const int64_t* document_starts = nullptr;
  size_t document_start_count = 0;
  const uint8_t* loss_mask = nullptr;
};

// Writes a version-2 shard to `path` with the dtype chosen from vocab_size and the label of
// tokenizer name `tokenizer`: to a temporary
// file in the same directory, fsync, rename over `path`, fsync the directory. Throws
// UserError when the file cannot be written (naming it and the OS reason).
void write_token_shard(const std::string& path, const ShardContents& contents,
                       const std::string& tokenizer, int64_t vocab_size);

// A shard of ids alone (no document boundaries, no loss mask).
inline void write_token_shard(const std::string& path, const int32_t* tokens, size_t count,
                              const std::string& tokenizer, int64_t vocab_size) {
  write_token_shard(path, ShardContents{tokens, count}, tokenizer, vocab_size);
}

inline void write_token_shard(const std::string& path, const std::vector<int32_t>& tokens,
                              const std::string& tokenizer, int64_t vocab_size) {
  write_token_shard(path, tokens.data(), tokens.size(), tokenizer, vocab_size);
}

// Reads a shard of version 1 or 2. Throws UserError naming the file and the defect: missing
// file, short header, bad magic, unknown version or dtype, unterminated tokenizer name, a
// size that does not match the counts (truncated or trailing bytes), document starts that
// are not ascending inside the shard, or a loss mask entry other than 0 or 1.
TokenShard read_token_shard(const std::string& path);

}  // namespace strata
