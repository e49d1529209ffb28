// main() for multi-rank GoogleTest binaries: initializes MPI, lets only rank 0 print the
// usual report (other ranks print only their failures), and returns non-zero on any failure
// so mpirun reports it.
#include <gtest/gtest.h>

#include "strata/dist/comm.h"
#include "strata/dist/runtime.h"

namespace {

// Prints only failed assertions, prefixed with the rank.
class FailurePrinter : public ::testing::EmptyTestEventListener {
 public:
  explicit FailurePrinter(int rank) : rank_(rank) {}
  void OnTestPartResult(const ::testing::TestPartResult& result) override {
    if (result.failed()) {
      fprintf(stderr, "[rank %d] %s:%d: Failure\n%s\n", rank_, result.file_name(),
              result.line_number(), result.summary());
    }
  }

 private:
  int rank_;
};

}  // namespace

int main(int argc, char** argv) {
  ::testing::InitGoogleTest(&argc, argv);
  strata::init_mpi(&argc, &argv);
  int rank = 0;
  {
    auto world = strata::Comm::world(120.0);
    rank = world.rank();
  }
  if (rank != 0) {
    auto& listeners = ::testing::UnitTest::GetInstance()->listeners();
    delete listeners.Release(listeners.default_result_printer());
    listeners.Append(new FailurePrinter(rank));
  }
  int result = RUN_ALL_TESTS();
  strata::finalize_mpi();
  return result;
}
