// Measured memory: a CPU allocator wrapper that counts live tensor bytes and their peak, and
// the process's peak resident set. The trainer reports peak activations as the peak of live
// tensor bytes during forward/backward above what was live before it.
#pragma once
#include <cstdint>

namespace strata {

// Installs the counting allocator as ATen's CPU allocator (idempotent). Tensors allocated
// before the call are not counted when freed.
void install_memory_tracker();
bool memory_tracker_installed();
int64_t tracked_bytes_now();
int64_t tracked_bytes_peak();
void reset_tracked_peak();  // peak := now

int64_t rss_peak_bytes();  // getrusage maxrss

}  // namespace strata
