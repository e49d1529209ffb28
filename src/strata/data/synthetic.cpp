// The synthetic motif stream.
#include "strata/data/synthetic.h"

#include "strata/core/error.h"
#include "strata/core/hash.h"

namespace strata {

namespace {

// A counter-based generator: draw i is splitmix64(seed + i), so the stream is the same on
// every platform (std::mt19937's distributions are not portable across standard libraries).
class StreamRandom {
 public:
  explicit StreamRandom(uint64_t seed) : state_(splitmix64(seed ^ 0x5354524154415359ull)) {}
  uint64_t next() { return splitmix64(state_++); }
  int64_t below(int64_t bound) {
    return static_cast<int64_t>(next() % static_cast<uint64_t>(bound));
  }

 private:
  uint64_t state_;
};

constexpr int64_t kMotifs = 32;
constexpr int64_t kMinMotifLength = 8;
constexpr int64_t kMaxMotifLength = 24;
constexpr int64_t kSuccessorOdds = 4;  // 3 in 4 motifs are followed by their successor
constexpr int64_t kNoiseOdds = 20;     // 1 in 20 tokens is replaced by a random one

}  // namespace

std::vector<int32_t> synthetic_tokens(uint64_t seed, int64_t vocab_size, int64_t num_tokens) {
  STRATA_CHECK(vocab_size >= 1 && vocab_size <= INT32_MAX, "vocab_size ", vocab_size);
  STRATA_CHECK(num_tokens >= 0, "num_tokens ", num_tokens);
  StreamRandom random(seed);
  std::vector<std::vector<int32_t>> motifs(kMotifs);
  std::vector<int64_t> successor(kMotifs);
  for (int64_t m = 0; m < kMotifs; ++m) {
    motifs[m].resize(kMinMotifLength + random.below(kMaxMotifLength - kMinMotifLength + 1));
    for (auto& token : motifs[m]) token = static_cast<int32_t>(random.below(vocab_size));
    successor[m] = random.below(kMotifs);
  }

  std::vector<int32_t> tokens;
  tokens.reserve(num_tokens);
  int64_t motif = random.below(kMotifs);
  while (static_cast<int64_t>(tokens.size()) < num_tokens) {
    for (int32_t token : motifs[motif]) {
      if (static_cast<int64_t>(tokens.size()) == num_tokens) break;
      bool noisy = random.below(kNoiseOdds) == 0;
      tokens.push_back(noisy ? static_cast<int32_t>(random.below(vocab_size)) : token);
    }
    motif = random.below(kSuccessorOdds) != 0 ? successor[motif] : random.below(kMotifs);
  }
  return tokens;
}

}  // namespace strata
