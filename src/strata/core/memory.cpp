// strata's CPU allocator: each block is allocated with a header in front (kHeader bytes,
// keeping the default 64-byte alignment) that records its size, so the deleter can subtract it;
// the data pointer is its own context, as c10's raw_allocate/raw_deallocate require (oneDNN's
// bfloat16 kernels allocate that way). Blocks from kHugePageBytes up start on a huge-page
// boundary and are advised onto huge pages, as glibc's glibc.malloc.hugetlb=1 does for its
// large chunks (which the launcher sets for the ranks it starts, covering Open MPI's buffers
// too; a single process cannot set it for itself, glibc reads it at start-up).
#include "strata/core/memory.h"

#include <c10/core/CPUAllocator.h>
#include <c10/util/Exception.h>
#include <sys/mman.h>
#include <sys/resource.h>

#include <atomic>
#include <cstdint>
#include <cstdlib>

namespace strata {
namespace {

std::atomic<int64_t> live_bytes{0};
std::atomic<int64_t> peak_bytes{0};
std::atomic<bool> installed{false};

constexpr size_t kHeader = 64;

void* allocate_block(size_t bytes) {
  const bool huge = bytes >= kHugePageBytes;
  void* block = nullptr;
  TORCH_CHECK(posix_memalign(&block, huge ? kHugePageBytes : kHeader, bytes) == 0,
              "strata's CPU allocator: not enough memory: tried to allocate ", bytes, " bytes");
  // Whole huge pages only: the tail past the last boundary stays on small pages. Advice the
  // kernel cannot take (no transparent huge pages) changes nothing, so its result is not read.
  if (huge) madvise(block, bytes & ~(kHugePageBytes - 1), MADV_HUGEPAGE);
  return block;
}

void delete_counted(void* data) {
  if (data == nullptr) return;
  char* block = static_cast<char*>(data) - kHeader;
  live_bytes.fetch_sub(*reinterpret_cast<int64_t*>(block), std::memory_order_relaxed);
  std::free(block);
}

class StrataAllocator final : public c10::Allocator {
 public:
  c10::DataPtr allocate(size_t bytes) const override {
    TORCH_CHECK(bytes <= SIZE_MAX - kHeader, "strata's CPU allocator: ", bytes,
                " bytes is more than can be allocated");
    char* block = static_cast<char*>(allocate_block(bytes + kHeader));
    *reinterpret_cast<int64_t*>(block) = static_cast<int64_t>(bytes);
    void* data = block + kHeader;
    const int64_t now =
        live_bytes.fetch_add(static_cast<int64_t>(bytes), std::memory_order_relaxed) +
        static_cast<int64_t>(bytes);
    int64_t peak = peak_bytes.load(std::memory_order_relaxed);
    while (now > peak && !peak_bytes.compare_exchange_weak(peak, now)) {
    }
    return {data, data, &delete_counted, c10::Device(c10::DeviceType::CPU)};
  }
  c10::DeleterFnPtr raw_deleter() const override { return &delete_counted; }
};

}  // namespace

void install_cpu_allocator() {
  bool expected = false;
  if (!installed.compare_exchange_strong(expected, true)) return;
  // Never destroyed: c10 keeps the pointer, and tensors may be freed during static destruction.
  static auto* allocator = new StrataAllocator();
  c10::SetCPUAllocator(allocator, /*priority=*/100);
}

bool cpu_allocator_installed() { return installed.load(); }
int64_t tracked_bytes_now() { return live_bytes.load(std::memory_order_relaxed); }
int64_t tracked_bytes_peak() { return peak_bytes.load(std::memory_order_relaxed); }
void reset_tracked_peak() { peak_bytes.store(live_bytes.load()); }

int64_t rss_peak_bytes() {
  struct rusage usage {};
  getrusage(RUSAGE_SELF, &usage);
  return static_cast<int64_t>(usage.ru_maxrss) * 1024;
}

}  // namespace strata
