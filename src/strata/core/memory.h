// Measured memory and where it lives: strata's CPU allocator counts live tensor bytes and their
// peak, and puts large blocks on transparent huge pages; the process's peak resident set. The
// trainer reports peak activations as the peak of live tensor bytes during forward/backward
// above what was live before it.
#pragma once
#include <cstddef>
#include <cstdint>

namespace strata {

// Blocks of at least this many bytes are aligned to it and advised onto transparent huge pages
// (madvise MADV_HUGEPAGE). ATen takes a fresh multi-megabyte block for most activations and
// gradients of every step; on 4 KiB pages each is first-touched page by page and its products
// miss the TLB. On the 2-core AMD EPYC VM measured (d_model 768, one rank, fp32) that made
// steps 2.34 s instead of 2.03 s (docs/install.md, "Memory pages"). Effective where the
// kernel's transparent huge pages are in `madvise` or `always` mode; harmless in `never` and
// without transparent huge pages (the advice is then refused and ignored).
inline constexpr size_t kHugePageBytes = size_t{2} << 20;

// Installs strata's allocator as ATen's CPU allocator (idempotent): every command that runs a
// model does, first thing on each rank. Tensors allocated before the call are not counted when
// freed.
void install_cpu_allocator();
bool cpu_allocator_installed();
int64_t tracked_bytes_now();
int64_t tracked_bytes_peak();
void reset_tracked_peak();  // peak := now

int64_t rss_peak_bytes();  // getrusage maxrss

}  // namespace strata
