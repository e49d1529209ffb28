// Byte counters against the closed forms of the ring algorithms (see comm.h): per rank when
// the elements divide evenly, and summed over ranks for odd sizes.
#include <chrono>
#include <thread>

#include "dist_test_util.h"

namespace strata {
namespace {

using namespace dist_test;

int64_t bytes_of(const Comm& comm, CommKind kind) {
  return comm.counters().bytes[static_cast<size_t>(kind)];
}
int64_t calls_of(const Comm& comm, CommKind kind) {
  return comm.counters().calls[static_cast<size_t>(kind)];
}

// Sum over the ranks of the world (read before the counted op, not counted itself: the
// counters are reset after).
int64_t sum_over_ranks(Comm& world, int64_t value) {
  auto tensor = at::full({1}, value, at::kLong);
  world.all_reduce(tensor);
  return tensor.item<int64_t>();
}

TEST(Counters, MatchTheRingFormulas) {
  Comm world = test_world();
  const int64_t n = world.size(), r = world.rank();
  auto& counters = world.counters();

  // 60 float32 elements: divisible by every n in 1..5.
  const int64_t N = 60 * 4;
  counters.reset();
  auto tensor = at::ones({60});
  world.all_reduce(tensor);
  EXPECT_EQ(bytes_of(world, CommKind::AllReduce), 2 * (n - 1) * N / n);
  EXPECT_EQ(calls_of(world, CommKind::AllReduce), 1);

  counters.reset();
  auto scatter_out = at::zeros({60});
  auto scatter_in = at::ones({60 * n});
  world.reduce_scatter(scatter_out, scatter_in);
  EXPECT_EQ(bytes_of(world, CommKind::ReduceScatter), (n - 1) * (60 * n * 4) / n);

  counters.reset();
  auto gather_out = at::zeros({60 * n});
  world.all_gather(gather_out, tensor);
  EXPECT_EQ(bytes_of(world, CommKind::AllGather), (n - 1) * (60 * n * 4) / n);

  counters.reset();
  auto a2a_in = at::ones({5 * n}, at::kDouble), a2a_out = at::zeros({5 * n}, at::kDouble);
  world.all_to_all(a2a_out, a2a_in);
  EXPECT_EQ(bytes_of(world, CommKind::AllToAll), (n - 1) * 5 * 8);

  counters.reset();
  world.broadcast(tensor, 0);
  EXPECT_EQ(bytes_of(world, CommKind::Broadcast), (n - 1) * N / n);

  // all_to_all_v: rank r sends q+1 rows of 3 int64 to rank q; only other ranks count.
  std::vector<int64_t> send_counts(n), recv_counts(n);
  int64_t rows_out = 0, rows_in = 0, rows_to_others = 0;
  for (int64_t q = 0; q < n; ++q) {
    send_counts[q] = q + 1;
    recv_counts[q] = r + 1;
    rows_out += q + 1;
    rows_in += r + 1;
    if (q != r) rows_to_others += q + 1;
  }
  auto v_in = at::zeros({rows_out, 3}, at::kLong), v_out = at::zeros({rows_in, 3}, at::kLong);
  counters.reset();
  world.all_to_all_v(v_out, v_in, send_counts, recv_counts);
  EXPECT_EQ(bytes_of(world, CommKind::AllToAll), rows_to_others * 3 * 8);

  counters.reset();
  world.barrier();
  EXPECT_EQ(bytes_of(world, CommKind::Barrier), 0);
  EXPECT_EQ(calls_of(world, CommKind::Barrier), 1);

  // send counts N; recv counts a call and no bytes; to oneself nothing crosses.
  counters.reset();
  auto message = at::ones({9}, at::kShort), received = at::zeros({9}, at::kShort);
  Work sending = world.isend(message, (r + 1) % n, 0);
  world.recv(received, (r + n - 1) % n, 0);
  sending.wait();
  EXPECT_EQ(bytes_of(world, CommKind::SendRecv), n > 1 ? 9 * 2 : 0);
  EXPECT_EQ(calls_of(world, CommKind::SendRecv), 2);
  EXPECT_EQ(counters.total_bytes(), bytes_of(world, CommKind::SendRecv));
}

TEST(Counters, OddSizesSumToTheTotals) {
  Comm world = test_world();
  const int64_t n = world.size();
  for (int64_t elements : {1, 7, 13}) {
    SCOPED_TRACE(strata::str(elements, " elements"));
    const int64_t N = elements * 2;  // bfloat16: 2 bytes per element on the wire
    world.counters().reset();
    auto tensor = at::ones({elements}, at::kBFloat16);
    world.all_reduce(tensor);
    const int64_t all_reduce_bytes = bytes_of(world, CommKind::AllReduce);
    world.broadcast(tensor, static_cast<int>(n - 1));
    const int64_t broadcast_bytes = bytes_of(world, CommKind::Broadcast);
    EXPECT_EQ(sum_over_ranks(world, all_reduce_bytes), 2 * (n - 1) * N);
    EXPECT_EQ(sum_over_ranks(world, broadcast_bytes), (n - 1) * N);
    // Each rank is within one element per ring phase of the even share.
    EXPECT_LE(std::abs(all_reduce_bytes * n - 2 * (n - 1) * N), 2 * 2 * n);
  }
}

TEST(Counters, SharedWithSplitGroupsAndZeroForOneRank) {
  Comm world = test_world();
  const int r = world.rank();
  Comm alone = world.split(r, 0, "alone");  // a group of one
  Comm pairs = world.split(r / 2, r, "pairs");
  world.counters().reset();
  auto tensor = at::ones({10});
  alone.all_reduce(tensor);
  EXPECT_EQ(world.counters().total_bytes(), 0);
  EXPECT_EQ(calls_of(world, CommKind::AllReduce), 1);  // counted in the world's counters
  pairs.all_reduce(tensor);
  const int64_t n = pairs.size();
  EXPECT_EQ(bytes_of(world, CommKind::AllReduce), 2 * (n - 1) * 40 / n);
  EXPECT_EQ(&pairs.counters(), &world.counters());
  EXPECT_STREQ(comm_kind_name(CommKind::ReduceScatter), "reduce_scatter");
}

TEST(Counters, WaitTimeCountsTheBlockedSeconds) {
  Comm world = test_world();
  if (world.size() < 2) GTEST_SKIP() << "needs a peer to wait for";
  world.barrier();
  world.counters().reset();
  // Rank 0 arrives 0.3 s late: every other rank blocks in the all-reduce for about that long.
  if (world.rank() == 0) std::this_thread::sleep_for(std::chrono::milliseconds(300));
  auto tensor = at::ones({10});
  world.all_reduce(tensor);
  const auto& wait_s = world.counters().wait_s;
  const double all_reduce = wait_s[static_cast<size_t>(CommKind::AllReduce)];
  if (world.rank() != 0) {
    EXPECT_GE(all_reduce, 0.25);
  }
  EXPECT_LT(all_reduce, 30.0);
  EXPECT_EQ(world.counters().total_wait_s(), all_reduce) << "only the all-reduce waited";
  world.counters().reset();
  EXPECT_EQ(world.counters().total_wait_s(), 0.0);
}

}  // namespace
}  // namespace strata
