// SplitMix64's finalizer (Steele, Lea, Flood 2014): a bijection on 64-bit words whose output
// bits each depend on every input bit, so consecutive inputs give unrelated outputs. The one
// mixer behind parameter initialization seeds (model/parameter.h), the data sampler
// (data/sampler.h) and synthetic data.
#pragma once
#include <cstdint>

namespace strata {

inline uint64_t splitmix64(uint64_t x) {
  x += 0x9e3779b97f4a7c15ull;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}

}  // namespace strata
