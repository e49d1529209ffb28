// A synthetic token stream for smoke tests and demos that need no files: random "motifs"
// (short fixed token sequences) chained with a preferred successor and sprinkled with noise.
// A small model learns it quickly (the loss falls well below ln(vocab_size)), and the same
// seed gives the same stream on every rank and every run.
#pragma once
#include <cstdint>
#include <vector>

namespace strata {

inline constexpr int64_t kSyntheticTokens = int64_t{1} << 20;

// num_tokens ids in [0, vocab_size), a pure function of (seed, vocab_size, num_tokens).
std::vector<int32_t> synthetic_tokens(uint64_t seed, int64_t vocab_size,
                                      int64_t num_tokens = kSyntheticTokens);

}  // namespace strata
