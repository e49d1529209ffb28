// Two hashes every part of strata shares.
//
// SplitMix64's finalizer (Steele, Lea, Flood 2014): a bijection on 64-bit words whose output
// bits each depend on every input bit, so consecutive inputs give unrelated outputs. The one
// mixer behind parameter initialization seeds (model/parameter.h), the data sampler
// (data/sampler.h) and synthetic data.
#pragma once
#include <cstdint>
#include <cstdio>
#include <string>
#include <string_view>

namespace strata {

inline uint64_t splitmix64(uint64_t x) {
  x += 0x9e3779b97f4a7c15ull;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}

// FNV-1a, 64 bit, continuing from `hash`: stable across builds and hosts (std::hash is not),
// ample for cache keys, fingerprints and file-name labels.
constexpr uint64_t kFnv1aBasis = 0xcbf29ce484222325ull;
inline uint64_t fnv1a(std::string_view text, uint64_t hash = kFnv1aBasis) {
  for (unsigned char byte : text) hash = (hash ^ byte) * 0x100000001b3ull;
  return hash;
}

// A hash as 16 lower-case hex digits, for file names and fingerprints.
inline std::string hex64(uint64_t hash) {
  char hex[17];
  std::snprintf(hex, sizeof hex, "%016llx", static_cast<unsigned long long>(hash));
  return hex;
}

}  // namespace strata
