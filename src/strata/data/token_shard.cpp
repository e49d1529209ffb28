// Token shard writing and validated reading. Bytes are assembled with shifts rather than
// memcpy of host integers, so the files are little-endian on any host.
#include "strata/data/token_shard.h"

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>

#include "strata/core/error.h"
#include "strata/data/atomic_file.h"

namespace strata {

namespace {

void put_le(unsigned char* out, uint64_t value, size_t bytes) {
  for (size_t i = 0; i < bytes; ++i) out[i] = static_cast<unsigned char>(value >> (8 * i));
}

uint64_t get_le(const unsigned char* in, size_t bytes) {
  uint64_t value = 0;
  for (size_t i = 0; i < bytes; ++i) value |= static_cast<uint64_t>(in[i]) << (8 * i);
  return value;
}

std::string os_reason() { return std::strerror(errno); }

}  // namespace

ShardDtype shard_dtype_for_vocab(int64_t vocab_size) {
  STRATA_CHECK(vocab_size > 0 && vocab_size <= (int64_t{1} << 31), "vocab_size ", vocab_size);
  return vocab_size <= 65536 ? ShardDtype::UInt16 : ShardDtype::UInt32;
}

size_t shard_dtype_bytes(ShardDtype dtype) { return dtype == ShardDtype::UInt16 ? 2 : 4; }

const char* shard_dtype_name(ShardDtype dtype) {
  return dtype == ShardDtype::UInt16 ? "uint16" : "uint32";
}

void write_token_shard(const std::string& path, const int32_t* tokens, size_t count,
                       const std::string& tokenizer, int64_t vocab_size) {
  STRATA_CHECK(!tokenizer.empty() && tokenizer.size() < kShardNameBytes, "tokenizer name '",
               tokenizer, "' must have 1..", kShardNameBytes - 1, " chars");
  ShardDtype dtype = shard_dtype_for_vocab(vocab_size);
  size_t width = shard_dtype_bytes(dtype);

  std::vector<unsigned char> bytes(kShardHeaderBytes + count * width, 0);
  std::memcpy(bytes.data(), kShardMagic, sizeof(kShardMagic));
  put_le(bytes.data() + 8, kShardVersion, 4);
  put_le(bytes.data() + 12, static_cast<uint32_t>(dtype), 4);
  put_le(bytes.data() + 16, count, 8);
  std::memcpy(bytes.data() + 24, tokenizer.data(), tokenizer.size());
  unsigned char* out = bytes.data() + kShardHeaderBytes;
  for (size_t i = 0; i < count; ++i) {
    STRATA_CHECK(tokens[i] >= 0 && tokens[i] < vocab_size, "token ", tokens[i], " at ", i,
                 " outside vocab of ", vocab_size);
    put_le(out + i * width, static_cast<uint32_t>(tokens[i]), width);
  }

  write_file_atomically(path, bytes.data(), bytes.size());
}

TokenShard read_token_shard(const std::string& path) {
  std::error_code error;
  if (std::filesystem::is_directory(path, error)) {
    throw UserError(str("token shard ", path, " is a directory, not a shard file"));
  }
  std::ifstream in(path, std::ios::binary);
  if (!in) throw UserError(str("cannot open token shard ", path, ": ", os_reason()));
  in.seekg(0, std::ios::end);
  std::vector<unsigned char> bytes(static_cast<size_t>(in.tellg()));
  in.seekg(0, std::ios::beg);
  in.read(reinterpret_cast<char*>(bytes.data()), static_cast<std::streamsize>(bytes.size()));
  if (!in) throw UserError(str("cannot read token shard ", path, ": ", os_reason()));
  auto fail = [&](const std::string& what) {
    return UserError(str("token shard ", path, " ", what));
  };

  if (bytes.size() < kShardHeaderBytes) {
    throw fail(str("is truncated: ", bytes.size(), " bytes, shorter than the ", kShardHeaderBytes,
                   "-byte header"));
  }
  if (std::memcmp(bytes.data(), kShardMagic, sizeof(kShardMagic)) != 0) {
    throw fail(
        "has a bad magic (expected \"STRATOK\\0\"): not a token shard; make one with "
        "`strata data prepare`");
  }
  uint64_t version = get_le(bytes.data() + 8, 4);
  if (version != kShardVersion) {
    throw fail(str("has format version ", version, "; this build reads version ", kShardVersion));
  }
  uint64_t dtype_code = get_le(bytes.data() + 12, 4);
  if (dtype_code != static_cast<uint32_t>(ShardDtype::UInt16) &&
      dtype_code != static_cast<uint32_t>(ShardDtype::UInt32)) {
    throw fail(str("has unknown dtype code ", dtype_code, " (allowed: 1 = uint16, 2 = uint32)"));
  }
  TokenShard shard;
  shard.dtype = static_cast<ShardDtype>(dtype_code);
  uint64_t count = get_le(bytes.data() + 16, 8);
  const char* name = reinterpret_cast<const char*>(bytes.data() + 24);
  size_t name_length = strnlen(name, kShardNameBytes);
  if (name_length == 0 || name_length == kShardNameBytes) {
    throw fail("has a corrupt header: the tokenizer name is empty or not NUL-terminated");
  }
  shard.tokenizer.assign(name, name_length);

  size_t width = shard_dtype_bytes(shard.dtype);
  uint64_t payload = bytes.size() - kShardHeaderBytes;
  if (count > payload / width) {
    throw fail(str("is truncated: the header says ", count, " tokens of ", width,
                   " bytes but only ", payload, " bytes follow it"));
  }
  if (payload != count * width) {
    throw fail(
        str("has ", payload - count * width, " unexpected bytes after its ", count, " tokens"));
  }
  shard.tokens.resize(count);
  const unsigned char* data = bytes.data() + kShardHeaderBytes;
  for (uint64_t i = 0; i < count; ++i) {
    uint64_t id = get_le(data + i * width, width);
    if (id > static_cast<uint64_t>(INT32_MAX)) {
      throw fail(str("holds token id ", id, " at position ", i, ", above the largest id ",
                     INT32_MAX, " strata supports"));
    }
    shard.tokens[i] = static_cast<int32_t>(id);
  }
  return shard;
}

}  // namespace strata
