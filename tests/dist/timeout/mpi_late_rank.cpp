// Timeouts: rank 1 of a named group enters 3 s late. The others, with timeout_s = 0.5, must
// get CommErrors naming the op, the group and the late rank (blocking barrier and
// all_reduce, a non-blocking all_reduce's Work, and a recv); then the late rank's entries
// complete the abandoned operations, whose buffers were kept alive, and everyone finishes.
#include <chrono>
#include <thread>

#include "../dist_test_util.h"

namespace strata {
namespace {

TEST(Timeout, LateRankIsNamedAndTheGroupRecovers) {
  Comm world = Comm::world(60.0);
  ASSERT_GE(world.size(), 2) << "run with at least 2 ranks";
  // A group whose ranks differ from the world's: world rank w is group rank (w+1) % n, so
  // the late group rank 1 is world rank 0.
  const int n = world.size();
  Comm group = world.split(0, (world.rank() + 1) % n, "late_test");
  const int late = 1, late_world = 0, r = group.rank();
  const CommOptions quick{0.5};
  auto contribution = at::full({5}, r + 1, at::kLong);
  auto buried_average = at::full({3}, 2.0 * (r + 1));
  const int64_t total = n * (n + 1) / 2;

  if (r == late) {
    std::this_thread::sleep_for(std::chrono::seconds(3));
    group.barrier();
    group.all_reduce(contribution);  // the others' buffers must still hold their values
    EXPECT_EQ(contribution[0].item<int64_t>(), total);
    Work average = group.iall_reduce(buried_average, ReduceOp::Avg);
    average.wait();
    EXPECT_DOUBLE_EQ(buried_average[0].item<double>(), n + 1.0);
    group.send(at::full({3}, 42, at::kInt), 0, 9);  // completes rank 0's abandoned recv
  } else {
    const auto start = std::chrono::steady_clock::now();
    const std::string where = strata::str("on rank ", r, " (world rank ", world.rank(), ")");
    const std::string missing =
        strata::str("ranks that had not arrived: [1] (world ranks [", late_world, "])");

    std::string error = testing::message_of<CommError>([&] { group.barrier(quick); });
    EXPECT_CONTAINS(error, "barrier on group 'late_test' timed out after 0.5 s " + where);
    EXPECT_CONTAINS(error, missing);

    error = testing::message_of<CommError>(
        [&] { group.all_reduce(contribution, ReduceOp::Sum, quick); });
    EXPECT_CONTAINS(
        error, "all_reduce on group 'late_test' timed out after 0.5 s " + where + "; " + missing);

    Work average = group.iall_reduce(buried_average, ReduceOp::Avg, quick);
    error = testing::message_of<CommError>([&] { average.wait(); });
    EXPECT_CONTAINS(error, "all_reduce on group 'late_test' timed out");
    EXPECT_CONTAINS(error, missing);
    EXPECT_EQ(testing::message_of<CommError>([&] { average.wait(); }),
              error);  // a failed Work stays failed

    if (r == 0) {
      auto incoming = at::zeros({3}, at::kInt);
      error =
          testing::message_of<CommError>([&] { group.recv(incoming, late, 9, CommOptions{0.3}); });
      EXPECT_CONTAINS(error, strata::str("recv from rank 1 (world rank ", late_world,
                                         ") (tag 9) on group 'late_test' timed out after 0.3 s ",
                                         where, "; the peer had not sent a matching message"));
    }
    const double elapsed =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    EXPECT_LT(elapsed, 2.9) << "the timeouts took longer than the late rank's delay";
    EXPECT_GE(group.abandoned_in_flight(), 3);
  }

  // Everyone, with the default timeout: the group is in step again.
  group.barrier();
  auto check = at::ones({1}, at::kLong);
  group.all_reduce(check);
  EXPECT_EQ(check.item<int64_t>(), n);

  // The abandoned operations complete once the late rank entered them.
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
  while (group.abandoned_in_flight() > 0 && std::chrono::steady_clock::now() < deadline) {
  }
  EXPECT_EQ(group.abandoned_in_flight(), 0);
  EXPECT_EQ(contribution[0].item<int64_t>(), total);  // finished in place, late
  world.barrier();
}

}  // namespace
}  // namespace strata
