// CRC-32, reflected IEEE polynomial 0xEDB88320, "slicing by 8": eight 256-entry tables let the
// loop consume 8 bytes per step instead of 1 with independent look-ups, which matters because
// loading re-reads every checkpoint byte once to verify it.
#include "strata/ckpt/crc32.h"

#include <array>

namespace strata {
namespace {

using Tables = std::array<std::array<uint32_t, 256>, 8>;

// tables[0] is the classic byte table; tables[k][b] is the CRC of byte b followed by k zero
// bytes, so eight table look-ups advance the register over eight input bytes at once.
Tables make_tables() {
  Tables tables{};
  for (uint32_t byte = 0; byte < 256; ++byte) {
    uint32_t crc = byte;
    for (int bit = 0; bit < 8; ++bit) crc = (crc >> 1) ^ ((crc & 1u) ? 0xEDB88320u : 0u);
    tables[0][byte] = crc;
  }
  for (uint32_t byte = 0; byte < 256; ++byte) {
    for (size_t k = 1; k < 8; ++k) {
      uint32_t previous = tables[k - 1][byte];
      tables[k][byte] = (previous >> 8) ^ tables[0][previous & 0xFFu];
    }
  }
  return tables;
}

const Tables& tables() {
  static const Tables instance = make_tables();
  return instance;
}

}  // namespace

uint32_t crc32_update(uint32_t crc, const void* data, size_t size) {
  const Tables& t = tables();
  const auto* bytes = static_cast<const unsigned char*>(data);
  uint32_t reg = ~crc;
  while (size >= 8) {
    // Little-endian assembly of the first four bytes, independent of host byte order.
    uint32_t low = reg ^ (uint32_t(bytes[0]) | uint32_t(bytes[1]) << 8 | uint32_t(bytes[2]) << 16 |
                          uint32_t(bytes[3]) << 24);
    reg = t[7][low & 0xFFu] ^ t[6][(low >> 8) & 0xFFu] ^ t[5][(low >> 16) & 0xFFu] ^
          t[4][low >> 24] ^ t[3][bytes[4]] ^ t[2][bytes[5]] ^ t[1][bytes[6]] ^ t[0][bytes[7]];
    bytes += 8;
    size -= 8;
  }
  while (size-- > 0) reg = (reg >> 8) ^ t[0][(reg ^ *bytes++) & 0xFFu];
  return ~reg;
}

}  // namespace strata
