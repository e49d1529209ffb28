// A parallel region through libgomp's GOMP_parallel, found at run time by cpu.h (see
// thread_team.h).
#include "strata/kernels/thread_team.h"

#include <ATen/Parallel.h>

#include <algorithm>
#include <atomic>
#include <exception>

#include "strata/kernels/cpu.h"

namespace strata {
namespace {

// GCC's OpenMP ABI: fn(data) on a team of num_threads threads (the caller included), flags 0
// for the default thread binding. Found by cpu.h: strata links libtorch, which brings libgomp
// in without re-exporting it.
using GompParallel = void (*)(void (*fn)(void*), void* data, unsigned num_threads, unsigned flags);

GompParallel gomp_parallel() { return reinterpret_cast<GompParallel>(cpu_info().gomp_parallel); }

struct Region {
  const std::function<void()>* body;
  std::atomic_flag failed = ATOMIC_FLAG_INIT;
  std::exception_ptr error;
};

// Each thread of the team: an exception must not leave the region (it would terminate).
void run_member(void* data) {
  auto* region = static_cast<Region*>(data);
  try {
    (*region->body)();
  } catch (...) {
    if (!region->failed.test_and_set()) region->error = std::current_exception();
  }
}

}  // namespace

void run_on_threads(int64_t threads, const std::function<void()>& body) {
  const GompParallel parallel = gomp_parallel();
  if (threads <= 1 || parallel == nullptr) return body();
  Region region;
  region.body = &body;
  parallel(&run_member, &region, static_cast<unsigned>(threads), 0);
  if (region.error) std::rethrow_exception(region.error);
}

int64_t TaskQueue::threads() const { return std::min<int64_t>(at::get_num_threads(), count_); }

}  // namespace strata
