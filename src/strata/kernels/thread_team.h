// Runs a function on several threads at once as one OpenMP parallel region, for the attention
// kernel's tasks. at::parallel_for cannot do it here: it is a header template that forks
// threads only where the including file is compiled with -fopenmp, and strata is not (it
// then runs the whole range on the calling thread). This calls libgomp's entry point for a
// parallel region directly, the one `#pragma omp parallel` compiles to, from the libgomp that
// libtorch loads, so the threads are ATen's own OpenMP threads; and since they run inside a
// region, oneDNN and ATen called from them stay on their thread instead of forking again.
#pragma once
#include <algorithm>
#include <atomic>
#include <cstdint>
#include <functional>

namespace strata {

// Runs body on `threads` threads (the caller is one of them) and returns when all are done;
// an exception from any of them is rethrown here (the first, if several throw). Runs body
// once on the caller instead when threads <= 1, inside a parallel region already (OpenMP
// does not nest by default), or without libgomp in the process.
void run_on_threads(int64_t threads, const std::function<void()>& body);

// Task indices [0, count) for the threads of run_on_threads, each taking the next one when it
// is done with its last, rather than fixed equal ranges: tasks differ in cost, and on a
// shared machine another process may slow one thread down; either way the others take up
// the slack and no thread sits idle at the end while another works through its range.
class TaskQueue {
 public:
  explicit TaskQueue(int64_t count) : count_(count) {}
  // Sets task to the next one; false once all have been handed out.
  bool take(int64_t& task) {
    task = next_.fetch_add(1, std::memory_order_relaxed);
    return task < count_;
  }
  // How many threads to start: one per ATen thread, at most one per task.
  int64_t threads() const;

 private:
  const int64_t count_;
  std::atomic<int64_t> next_{0};
};

// f(chunk, first, count) for each chunk of `size` indices covering [0, n) (the last one may be
// shorter), the chunks taken from a TaskQueue on run_on_threads' threads: elementwise kernels
// over a tensor, or rows in blocks.
template <typename F>
void for_each_chunk(int64_t n, int64_t size, F&& f) {
  TaskQueue chunks((n + size - 1) / size);
  run_on_threads(chunks.threads(), [&] {
    for (int64_t chunk; chunks.take(chunk);) {
      const int64_t first = chunk * size;
      f(chunk, first, std::min(size, n - first));
    }
  });
}

}  // namespace strata
