// CRC-32 (IEEE 802.3 polynomial, as in zlib, PNG and gzip) of checkpoint files: written into
// index.json at save, recomputed before a load trusts a file. Our own table-driven code, so the
// checkpoint format needs no compression library.
#pragma once
#include <cstddef>
#include <cstdint>

namespace strata {

// Extends `crc` (the CRC-32 of the bytes before) by `size` more bytes, zlib-style: start from
// 0, and the result of one call is the CRC-32 of everything fed so far, so a file can be
// checksummed in pieces. crc32_update(0, "123456789", 9) == 0xCBF43926.
uint32_t crc32_update(uint32_t crc, const void* data, size_t size);

inline uint32_t crc32(const void* data, size_t size) { return crc32_update(0, data, size); }

}  // namespace strata
