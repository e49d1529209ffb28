// run_on_threads: the body runs once per thread, on distinct threads inside one parallel
// region, once on the caller for a single thread or when nested, and an exception thrown by
// one thread comes out of the call.
#include <gtest/gtest.h>

#include <atomic>
#include <mutex>
#include <set>
#include <stdexcept>
#include <thread>

#include "strata/kernels/thread_team.h"

namespace strata {
namespace {

TEST(ThreadTeam, BodyRunsOncePerThreadOnDistinctThreads) {
  for (int64_t threads : {1, 2, 3}) {
    std::mutex mutex;
    std::set<std::thread::id> seen;
    std::atomic<int64_t> runs{0};
    run_on_threads(threads, [&] {
      ++runs;
      std::lock_guard<std::mutex> lock(mutex);
      seen.insert(std::this_thread::get_id());
    });
    EXPECT_EQ(runs.load(), threads) << threads << " threads";
    EXPECT_EQ(static_cast<int64_t>(seen.size()), threads) << threads << " threads";
    EXPECT_EQ(seen.count(std::this_thread::get_id()), 1u) << "the caller is one of them";
  }
}

TEST(ThreadTeam, NestedRegionRunsOnItsCaller) {
  std::atomic<int64_t> inner_runs{0};
  run_on_threads(2, [&] { run_on_threads(2, [&] { ++inner_runs; }); });
  EXPECT_EQ(inner_runs.load(), 2) << "each of the 2 outer threads runs the inner body once";
}

TEST(ThreadTeam, ExceptionReachesTheCaller) {
  std::atomic<int64_t> member{0};
  EXPECT_THROW(run_on_threads(2,
                              [&] {
                                if (member++ == 1) throw std::runtime_error("second thread");
                              }),
               std::runtime_error);
  EXPECT_EQ(member.load(), 2);
}

}  // namespace
}  // namespace strata
