// Token shards: one file holding a run of token ids, in the binary format documented in
// docs/data.md ("STRATOK\0" header of 64 bytes, then little-endian uint16 or uint32 ids).
// Writes are atomic (a reader never sees half a shard); reads refuse anything malformed.
#pragma once
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

namespace strata {

// Header layout constants, shared with the tests that build corrupt files on purpose.
inline constexpr char kShardMagic[8] = {'S', 'T', 'R', 'A', 'T', 'O', 'K', '\0'};
inline constexpr uint32_t kShardVersion = 1;
inline constexpr size_t kShardHeaderBytes = 64;
inline constexpr size_t kShardNameBytes = 32;  // tokenizer name, NUL-padded, at most 31 chars

enum class ShardDtype : uint32_t { UInt16 = 1, UInt32 = 2 };

// The narrowest dtype that holds every id of a vocabulary of this size.
ShardDtype shard_dtype_for_vocab(int64_t vocab_size);
size_t shard_dtype_bytes(ShardDtype dtype);
const char* shard_dtype_name(ShardDtype dtype);

struct TokenShard {
  std::string tokenizer;  // name of the tokenizer that produced the ids
  ShardDtype dtype = ShardDtype::UInt16;
  std::vector<int32_t> tokens;
};

// Writes `count` ids to `path` with the dtype chosen from vocab_size: to a temporary file in
// the same directory, fsync, rename over `path`, fsync the directory. Throws UserError when
// the file cannot be written (naming it and the OS reason).
void write_token_shard(const std::string& path, const int32_t* tokens, size_t count,
                       const std::string& tokenizer, int64_t vocab_size);

inline void write_token_shard(const std::string& path, const std::vector<int32_t>& tokens,
                              const std::string& tokenizer, int64_t vocab_size) {
  write_token_shard(path, tokens.data(), tokens.size(), tokenizer, vocab_size);
}

// Reads a shard. Throws UserError naming the file and the defect: missing file, short header,
// bad magic, unknown version or dtype, unterminated tokenizer name, or a size that does not
// match the token count (truncated or trailing bytes).
TokenShard read_token_shard(const std::string& path);

}  // namespace strata
