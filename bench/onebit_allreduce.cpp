// Time of the 1-bit compressed all-reduce (data_parallel/onebit_allreduce.h) against the
// float32 ring all-reduce it replaces, per call, on the ranks mpirun starts: the encoding and
// decoding cost that decides whether 1-bit Adam pays on a given link (docs/performance.md).
// One JSON line from rank 0.
//
//   mpirun -np 2 build/bench/onebit_allreduce [elements (default 3200000)] [calls (default 20)]
#include <ATen/ATen.h>
#include <ATen/Parallel.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>

#include "strata/data_parallel/onebit_allreduce.h"
#include "strata/dist/comm.h"
#include "strata/dist/runtime.h"

int main(int argc, char** argv) {
  strata::init_mpi(&argc, &argv);
  const int64_t elements = argc > 1 ? std::atoll(argv[1]) : 3200000;
  const int calls = argc > 2 ? std::atoi(argv[2]) : 20;
  double onebit_s = 0, float_s = 0;
  int ranks = 0, rank = 0;
  {
    strata::Comm world = strata::Comm::world();
    ranks = world.size();
    rank = world.rank();
    at::set_num_threads(1);
    strata::OneBitAllReduce exchange(world, elements, at::kFloat);
    at::Tensor x = at::randn({elements});
    using Clock = std::chrono::steady_clock;
    auto time = [&](auto&& call) {
      call();  // warm
      world.barrier();
      const auto start = Clock::now();
      for (int i = 0; i < calls; ++i) call();
      world.barrier();
      return std::chrono::duration<double>(Clock::now() - start).count() / calls;
    };
    onebit_s = time([&] { exchange.all_reduce(x); });
    float_s = time([&] { world.all_reduce(x, strata::ReduceOp::Avg); });
  }
  if (rank == 0) {
    std::printf(
        "{\"ranks\": %d, \"elements\": %lld, \"onebit_ms\": %.3f, \"float32_all_reduce_ms\": "
        "%.3f}\n",
        ranks, static_cast<long long>(elements), onebit_s * 1e3, float_s * 1e3);
  }
  strata::finalize_mpi();
  return 0;
}
