// Counting CPU allocator: wraps ATen's default CPU allocator; each allocation carries a small
// context recording its size so the deleter can subtract it.
#include "strata/core/memory.h"

#include <c10/core/CPUAllocator.h>
#include <sys/resource.h>

#include <atomic>

namespace strata {
namespace {

std::atomic<int64_t> live_bytes{0};
std::atomic<int64_t> peak_bytes{0};
std::atomic<bool> installed{false};

struct Allocation {
  c10::DataPtr inner;
  int64_t bytes;
};

void delete_allocation(void* context) {
  auto* allocation = static_cast<Allocation*>(context);
  live_bytes.fetch_sub(allocation->bytes, std::memory_order_relaxed);
  delete allocation;  // frees the inner DataPtr through the default allocator's deleter
}

class CountingAllocator final : public c10::Allocator {
 public:
  explicit CountingAllocator(c10::Allocator* inner) : inner_(inner) {}

  c10::DataPtr allocate(size_t bytes) const override {
    c10::DataPtr inner = inner_->allocate(bytes);
    void* data = inner.get();
    auto device = inner.device();
    auto* allocation = new Allocation{std::move(inner), static_cast<int64_t>(bytes)};
    int64_t now =
        live_bytes.fetch_add(allocation->bytes, std::memory_order_relaxed) + allocation->bytes;
    int64_t peak = peak_bytes.load(std::memory_order_relaxed);
    while (now > peak && !peak_bytes.compare_exchange_weak(peak, now)) {
    }
    return {data, allocation, &delete_allocation, device};
  }

 private:
  c10::Allocator* inner_;
};

}  // namespace

void install_memory_tracker() {
  bool expected = false;
  if (!installed.compare_exchange_strong(expected, true)) return;
  static CountingAllocator allocator(c10::GetDefaultCPUAllocator());
  c10::SetCPUAllocator(&allocator, /*priority=*/100);
}

bool memory_tracker_installed() { return installed.load(); }
int64_t tracked_bytes_now() { return live_bytes.load(std::memory_order_relaxed); }
int64_t tracked_bytes_peak() { return peak_bytes.load(std::memory_order_relaxed); }
void reset_tracked_peak() { peak_bytes.store(live_bytes.load()); }

int64_t rss_peak_bytes() {
  struct rusage usage {};
  getrusage(RUSAGE_SELF, &usage);
  return static_cast<int64_t>(usage.ru_maxrss) * 1024;
}

}  // namespace strata
