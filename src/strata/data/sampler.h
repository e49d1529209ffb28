// The sampler: where each row of a global batch starts, as a pure function of
// (seed, split, step, row). Because it never looks at the layout, any division of the rows
// among ranks yields the same global batch, and a resumed run sees the same data.
#pragma once
#include <cstdint>

#include "strata/core/hash.h"
#include "strata/data/dataset.h"

namespace strata {

// Start of row `row` of step `step` in `split`: a position in [0, num_starts), where
// num_starts = split tokens - seq_len (every window of seq_len + 1 tokens can be drawn).
// Each field is folded in with its own splitmix64 round, so (step 1, row 2) and
// (step 2, row 1) are unrelated.
inline int64_t row_start(uint64_t seed, Split split, int64_t step, int64_t row,
                         int64_t num_starts) {
  uint64_t hash = splitmix64(seed);
  hash = splitmix64(hash ^ (split == Split::Train ? 0u : 1u));
  hash = splitmix64(hash ^ static_cast<uint64_t>(step));
  hash = splitmix64(hash ^ static_cast<uint64_t>(row));
  // The modulo bias is below num_starts / 2^64: negligible for any corpus.
  return static_cast<int64_t>(hash % static_cast<uint64_t>(num_starts));
}

}  // namespace strata
