// Token shard writing and validated reading. Bytes are assembled with shifts rather than
// memcpy of host integers, so the files are little-endian on any host.
#include "strata/data/token_shard.h"

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>

#include "strata/core/atomic_file.h"
#include "strata/core/error.h"
#include "strata/core/hash.h"

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

std::string shard_tokenizer_label(const std::string& name) {
  if (name.size() < kShardNameBytes) return name;
  return "#" + hex64(fnv1a(name));
}

void write_token_shard(const std::string& path, const ShardContents& contents,
                       const std::string& tokenizer_name, int64_t vocab_size) {
  const std::string tokenizer = shard_tokenizer_label(tokenizer_name);
  STRATA_CHECK(!tokenizer.empty(), "empty tokenizer name");
  ShardDtype dtype = shard_dtype_for_vocab(vocab_size);
  size_t width = shard_dtype_bytes(dtype);
  const size_t count = contents.count;
  const size_t starts = contents.document_start_count;
  const bool masked = contents.loss_mask != nullptr;

  std::vector<unsigned char> bytes(
      kShardHeaderBytes + count * width + 8 + starts * 8 + (masked ? count : 0), 0);
  std::memcpy(bytes.data(), kShardMagic, sizeof(kShardMagic));
  put_le(bytes.data() + 8, kShardVersion, 4);
  put_le(bytes.data() + 12, static_cast<uint32_t>(dtype), 4);
  put_le(bytes.data() + 16, count, 8);
  std::memcpy(bytes.data() + 24, tokenizer.data(), tokenizer.size());
  put_le(bytes.data() + 56, masked ? kShardFlagLossMask : 0, 4);
  unsigned char* out = bytes.data() + kShardHeaderBytes;
  for (size_t i = 0; i < count; ++i) {
    STRATA_CHECK(contents.tokens[i] >= 0 && contents.tokens[i] < vocab_size, "token ",
                 contents.tokens[i], " at ", i, " outside vocab of ", vocab_size);
    put_le(out + i * width, static_cast<uint32_t>(contents.tokens[i]), width);
  }
  out += count * width;
  put_le(out, starts, 8);
  out += 8;
  for (size_t i = 0; i < starts; ++i) {
    const int64_t start = contents.document_starts[i];
    STRATA_CHECK(start >= 0 && static_cast<size_t>(start) < count &&
                     (i == 0 || start > contents.document_starts[i - 1]),
                 "document start ", start, " at ", i, " of a shard of ", count, " tokens");
    put_le(out + i * 8, static_cast<uint64_t>(start), 8);
  }
  out += starts * 8;
  if (masked) std::memcpy(out, contents.loss_mask, count);

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
  if (version != 1 && version != kShardVersion) {
    throw fail(
        str("has format version ", version, "; this build reads versions 1 and ", kShardVersion));
  }
  uint64_t dtype_code = get_le(bytes.data() + 12, 4);
  if (dtype_code != static_cast<uint32_t>(ShardDtype::UInt16) &&
      dtype_code != static_cast<uint32_t>(ShardDtype::UInt32)) {
    throw fail(str("has unknown dtype code ", dtype_code, " (allowed: 1 = uint16, 2 = uint32)"));
  }
  TokenShard shard;
  shard.version = static_cast<uint32_t>(version);
  shard.dtype = static_cast<ShardDtype>(dtype_code);
  uint64_t count = get_le(bytes.data() + 16, 8);
  const char* name = reinterpret_cast<const char*>(bytes.data() + 24);
  size_t name_length = strnlen(name, kShardNameBytes);
  if (name_length == 0 || name_length == kShardNameBytes) {
    throw fail("has a corrupt header: the tokenizer name is empty or not NUL-terminated");
  }
  shard.tokenizer.assign(name, name_length);
  const uint64_t flags = version == 1 ? 0 : get_le(bytes.data() + 56, 4);
  if ((flags & ~uint64_t{kShardFlagLossMask}) != 0) {
    throw fail(str("has unknown header flags ", flags, " (allowed: 1 = loss mask)"));
  }

  size_t width = shard_dtype_bytes(shard.dtype);
  const unsigned char* data = bytes.data() + kShardHeaderBytes;
  uint64_t payload = bytes.size() - kShardHeaderBytes;
  if (count > payload / width) {
    throw fail(str("is truncated: the header says ", count, " tokens of ", width,
                   " bytes but only ", payload, " bytes follow it"));
  }
  // Version 2 follows the ids with the document starts (a count, then the offsets) and,
  // when flagged, one mask byte per token.
  uint64_t start_count = 0;
  uint64_t expected = count * width;
  if (version >= 2) {
    if (payload < expected + 8) throw fail("is truncated: its document index is missing");
    start_count = get_le(data + expected, 8);
    if (start_count > count || start_count > (payload - expected - 8) / 8) {
      throw fail(str("is truncated: its index lists ", start_count, " document starts but only ",
                     payload - expected - 8, " bytes follow the ids"));
    }
    expected += 8 + start_count * 8 + ((flags & kShardFlagLossMask) != 0 ? count : 0);
  }
  if (payload < expected) {
    throw fail(str("is truncated: ", payload, " bytes follow the header, ", expected, " expected"));
  }
  if (payload != expected) {
    throw fail(str("has ", payload - expected, " unexpected bytes after its contents"));
  }
  shard.tokens.resize(count);
  for (uint64_t i = 0; i < count; ++i) {
    uint64_t id = get_le(data + i * width, width);
    if (id > static_cast<uint64_t>(INT32_MAX)) {
      throw fail(str("holds token id ", id, " at position ", i, ", above the largest id ",
                     INT32_MAX, " strata supports"));
    }
    shard.tokens[i] = static_cast<int32_t>(id);
  }
  if (version < 2) return shard;
  const unsigned char* index = data + count * width + 8;
  shard.document_starts.resize(start_count);
  for (uint64_t i = 0; i < start_count; ++i) {
    const uint64_t start = get_le(index + i * 8, 8);
    if (start >= count || (i > 0 && start <= static_cast<uint64_t>(shard.document_starts[i - 1]))) {
      throw fail(str("has document start ", start, " at index ", i,
                     ": starts must ascend and lie inside its ", count, " tokens"));
    }
    shard.document_starts[i] = static_cast<int64_t>(start);
  }
  if ((flags & kShardFlagLossMask) != 0) {
    const unsigned char* mask = index + start_count * 8;
    shard.loss_mask.assign(mask, mask + count);
    for (uint64_t i = 0; i < count; ++i) {
      if (mask[i] > 1) {
        throw fail(
            str("has loss mask entry ", int{mask[i]}, " at position ", i, "; entries are 0 or 1"));
      }
    }
  }
  return shard;
}

}  // namespace strata
