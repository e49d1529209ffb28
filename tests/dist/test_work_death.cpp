// Dropping a Work that is still in flight is a bug that must fail loudly, naming the op.
// A death test: the child re-executes this binary and initializes MPI as a singleton.
#include <gtest/gtest.h>

#include "strata/dist/comm.h"
#include "strata/dist/runtime.h"

namespace strata {
namespace {

TEST(WorkDeathTest, DroppingAnInFlightWorkAborts) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");  // never fork a process that runs MPI
  EXPECT_DEATH(
      {
        init_mpi(nullptr, nullptr);
        Comm world = Comm::world(10.0);
        at::Tensor buffer = at::zeros({4});
        Work work = world.irecv(buffer, 0, 7);  // nobody sends: it stays in flight
      },
      "bug: the Work of recv on group 'world' on rank 0 \\(world rank 0\\) was destroyed while "
      "still in flight");
}

}  // namespace
}  // namespace strata
