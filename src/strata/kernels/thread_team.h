// Runs a function on several threads at once as one OpenMP parallel region, for the attention
// kernel's tasks. at::parallel_for cannot do it here: it is a header template that forks
// threads only where the including file is compiled with -fopenmp, and strata is not (it
// then runs the whole range on the calling thread). This calls libgomp's entry point for a
// parallel region directly, the one `#pragma omp parallel` compiles to, from the libgomp that
// libtorch loads, so the threads are ATen's own OpenMP threads; and since they run inside a
// region, oneDNN and ATen called from them stay on their thread instead of forking again.
#pragma once
#include <cstdint>
#include <functional>

namespace strata {

// Runs body on `threads` threads (the caller is one of them) and returns when all are done;
// an exception from any of them is rethrown here (the first, if several throw). Runs body
// once on the caller instead when threads <= 1, inside a parallel region already (OpenMP
// does not nest by default), or without libgomp in the process.
void run_on_threads(int64_t threads, const std::function<void()>& body);

}  // namespace strata
