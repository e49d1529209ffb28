// What a step's compressed exchanges sent, beside what the uncompressed exchanges they stand
// for would have sent, per collective kind: the comm_bytes_uncompressed metric is the step's
// comm_bytes - sent + uncompressed (docs/metrics.md).
#pragma once
#include <array>
#include <cstdint>

#include "strata/dist/comm.h"

namespace strata {

struct CompressedTraffic {
  using PerKind = std::array<int64_t, static_cast<size_t>(CommKind::Count)>;
  PerKind sent{}, uncompressed{};

  void reset() {
    sent.fill(0);
    uncompressed.fill(0);
  }
  // Runs `post`, which posts collectives on `group`, and records the bytes the group's
  // counters charged meanwhile as sent compressed.
  template <typename Post>
  void count_sent(Comm& group, Post&& post) {
    const PerKind before = group.counters().bytes;
    post();
    const PerKind& after = group.counters().bytes;
    for (size_t kind = 0; kind < before.size(); ++kind) sent[kind] += after[kind] - before[kind];
  }
  void add_uncompressed(CommKind kind, int64_t bytes) {
    uncompressed[static_cast<size_t>(kind)] += bytes;
  }
  // `counted` (the counters' bytes) with the compressed exchanges replaced by the uncompressed.
  PerKind without_compression(const PerKind& counted) const {
    PerKind out = counted;
    for (size_t kind = 0; kind < out.size(); ++kind) out[kind] += uncompressed[kind] - sent[kind];
    return out;
  }
};

}  // namespace strata
