// CRC-32 against published check values and against a bit-at-a-time reference, fed whole and
// in pieces of every alignment (the 8-byte loop and the byte tail must agree).
#include <gtest/gtest.h>

#include <random>
#include <string>
#include <vector>

#include "strata/ckpt/crc32.h"

namespace strata {
namespace {

// The definition, one bit at a time: reflected polynomial 0xEDB88320, init and final xor ~0.
uint32_t reference_crc32(const std::vector<unsigned char>& bytes) {
  uint32_t reg = 0xFFFFFFFFu;
  for (unsigned char byte : bytes) {
    reg ^= byte;
    for (int bit = 0; bit < 8; ++bit) reg = (reg >> 1) ^ ((reg & 1u) ? 0xEDB88320u : 0u);
  }
  return ~reg;
}

uint32_t crc_of(const std::string& text) { return crc32(text.data(), text.size()); }

TEST(Crc32, KnownVectors) {
  EXPECT_EQ(crc_of("123456789"), 0xCBF43926u);
  EXPECT_EQ(crc_of(""), 0x00000000u);
  EXPECT_EQ(crc_of("a"), 0xE8B7BE43u);
  EXPECT_EQ(crc_of("The quick brown fox jumps over the lazy dog"), 0x414FA339u);
  EXPECT_EQ(crc_of(std::string(32, '\0')), 0x190A55ADu);
}

TEST(Crc32, MatchesBitwiseReferenceWholeAndInPieces) {
  std::mt19937 generator(7);
  for (size_t size : {1u, 7u, 8u, 9u, 15u, 16u, 17u, 63u, 64u, 1000u, 4099u}) {
    std::vector<unsigned char> bytes(size);
    for (auto& byte : bytes) byte = static_cast<unsigned char>(generator());
    const uint32_t expected = reference_crc32(bytes);
    EXPECT_EQ(crc32(bytes.data(), size), expected) << "size " << size;
    for (size_t split = 0; split <= size; split += 1 + size / 7) {
      uint32_t crc = crc32_update(0, bytes.data(), split);
      crc = crc32_update(crc, bytes.data() + split, size - split);
      EXPECT_EQ(crc, expected) << "size " << size << " split at " << split;
    }
  }
}

}  // namespace
}  // namespace strata
