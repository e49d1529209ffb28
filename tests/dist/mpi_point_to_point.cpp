// Point-to-point (ring and pairs, blocking and not), non-blocking collectives completing
// together, Work semantics, and argument errors that must be raised before anything is sent.
#include "dist_test_util.h"

namespace strata {
namespace {

using namespace dist_test;

TEST(PointToPoint, RingWithIsendAndRecv) {
  Comm world = test_world();
  const int n = world.size(), r = world.rank();
  const int next = (r + 1) % n, previous = (r + n - 1) % n;
  for (at::ScalarType dtype : all_dtypes()) {
    for (int64_t count : test_sizes()) {
      SCOPED_TRACE(strata::str(dtype, " x ", count));
      auto outgoing =
          tensor_of(count, dtype, [&](int64_t i) { return small_value(r * 3 + i, dtype); });
      auto incoming = at::zeros({count}, dtype);
      Work sending = world.isend(outgoing, next, 5);
      world.recv(incoming, previous, 5);
      sending.wait();
      EXPECT_TENSOR_EQ(incoming, tensor_of(count, dtype, [&](int64_t i) {
                         return small_value(previous * 3 + i, dtype);
                       }));
    }
  }
}

TEST(PointToPoint, BlockingPairsAndTags) {
  Comm world = test_world();
  const int r = world.rank(), partner = r ^ 1;
  if (partner >= world.size()) GTEST_SKIP() << "rank " << r << " has no partner";
  // Two messages with different tags, received in the opposite order.
  auto first = at::full({3}, 10 + r, at::kInt), second = at::full({2}, 20 + r, at::kDouble);
  auto got_first = at::zeros({3}, at::kInt), got_second = at::zeros({2}, at::kDouble);
  if (r < partner) {
    world.send(first, partner, 1);
    world.send(second, partner, 2);
    world.recv(got_first, partner, 1);
    world.recv(got_second, partner, 2);
  } else {
    Work a = world.irecv(got_second, partner, 2);
    Work b = world.irecv(got_first, partner, 1);
    a.wait();
    b.wait();
    world.send(first, partner, 1);
    world.send(second, partner, 2);
  }
  EXPECT_TENSOR_EQ(got_first, at::full({3}, 10 + partner, at::kInt));
  EXPECT_TENSOR_EQ(got_second, at::full({2}, 20 + partner, at::kDouble));
}

TEST(PointToPoint, ReceivingFewerElementsThanExpectedIsACommError) {
  Comm world = test_world();
  if (world.size() < 2) GTEST_SKIP();
  if (world.rank() == 0) world.send(at::ones({3}), 1, 4);
  if (world.rank() == 1) {
    auto buffer = at::zeros({5});
    EXPECT_CONTAINS(testing::message_of<CommError>([&] { world.recv(buffer, 0, 4); }),
                    "recv from rank 0 (world rank 0) (tag 4) on group 'world' on rank 1 (world "
                    "rank 1): expected 5 elements, received 3");
  }
  world.barrier();
}

TEST(PointToPoint, MpiErrorsBecomeCommErrorsNamingThePeer) {
  Comm world = test_world();
  if (world.size() < 2) GTEST_SKIP();
  if (world.rank() == 0) world.send(at::ones({5}), 1, 3);
  if (world.rank() == 1) {
    auto too_small = at::zeros({3});
    const std::string error = testing::message_of<CommError>([&] { world.recv(too_small, 0, 3); });
    EXPECT_CONTAINS(error,
                    "recv from rank 0 (world rank 0) (tag 3) on group 'world' failed on "
                    "rank 1 (world rank 1): MPI_ERR_TRUNCATE");
  }
  world.barrier();
}

TEST(NonBlocking, CollectivesInFlightTogether) {
  Comm world = test_world();
  const int n = world.size(), r = world.rank();
  auto summed = at::full({17}, r + 1, at::kFloat);
  auto averaged = at::full({4}, 2.0 * (r + 1), at::kBFloat16);
  auto scatter_in = at::arange(3 * n, at::kLong) * (r + 1), scatter_out = at::zeros({3}, at::kLong);
  auto gather_in = at::full({2}, r, at::kInt), gather_out = at::zeros({2 * n}, at::kInt);
  std::vector<Work> works;
  works.push_back(world.iall_reduce(summed));
  works.push_back(world.iall_reduce(averaged, ReduceOp::Avg));
  works.push_back(world.ireduce_scatter(scatter_out, scatter_in));
  works.push_back(world.iall_gather(gather_out, gather_in));
  // Poll one to completion, wait for the rest (in reverse order).
  while (!works.front().is_completed()) {
  }
  for (auto work = works.rbegin(); work != works.rend(); ++work) work->wait();
  for (Work& work : works) work.wait();  // waiting again returns at once

  EXPECT_TENSOR_EQ(summed, at::full({17}, n * (n + 1) / 2, at::kFloat));
  EXPECT_TENSOR_EQ(averaged, at::full({4}, n + 1.0, at::kBFloat16));
  EXPECT_TENSOR_EQ(scatter_out, (at::arange(3, at::kLong) + 3 * r) * (n * (n + 1) / 2));
  EXPECT_TENSOR_EQ(gather_out, at::arange(n, at::kInt).repeat_interleave(2));
}

TEST(NonBlocking, WorkHandles) {
  Comm world = test_world();
  Work empty;
  EXPECT_FALSE(empty.valid());
  EXPECT_THROW(empty.wait(), InternalError);
  auto tensor = at::ones({2});
  Work work = world.iall_reduce(tensor);
  EXPECT_TRUE(work.valid());
  Work moved = std::move(work);
  EXPECT_FALSE(work.valid());  // NOLINT(bugprone-use-after-move): checking the moved-from state
  moved.wait();
  EXPECT_TRUE(moved.is_completed());
  EXPECT_EQ(tensor[0].item<float>(), world.size());
}

TEST(Validation, BadArgumentsAreUserErrorsAndSendNothing) {
  Comm world = test_world();
  const int n = world.size();
  auto matrix = at::zeros({2, 3});
  auto transposed = matrix.t();
  EXPECT_CONTAINS(testing::user_error([&] { world.all_reduce(transposed); }),
                  "all_reduce on group 'world': the tensor must be contiguous (sizes [3, 2], "
                  "strides [1, 3]); pass .contiguous()");
  at::Tensor undefined;
  EXPECT_CONTAINS(testing::user_error([&] { world.broadcast(undefined, 0); }),
                  "tensor is undefined");
  auto complex = at::zeros({2}, at::kComplexFloat);
  EXPECT_CONTAINS(testing::user_error([&] { world.all_reduce(complex); }),
                  "has dtype ComplexFloat");
  auto ints = at::ones({4}, at::kInt);
  EXPECT_CONTAINS(testing::user_error([&] { world.all_reduce(ints, ReduceOp::Avg); }),
                  "Avg is not supported on dtype Int (Avg needs a floating-point dtype; use Sum)");
  auto flags = at::ones({4}, at::kBool);
  EXPECT_THROW(world.all_reduce(flags, ReduceOp::Avg), UserError);

  auto output = at::zeros({3}), input = at::zeros({3 * n + 1});
  EXPECT_CONTAINS(
      testing::user_error([&] { world.reduce_scatter(output, input); }),
      strata::str("reduce_scatter on group 'world': input has ", 3 * n + 1,
                  " elements; it must hold ", n, " chunks of output's 3 elements (", 3 * n, ")"));
  auto doubles = at::zeros({3 * n}, at::kDouble);
  EXPECT_CONTAINS(testing::user_error([&] { world.reduce_scatter(output, doubles); }),
                  "output dtype Float differs from input dtype Double");
  auto gathered = at::zeros({3 * n + 2});
  EXPECT_CONTAINS(testing::user_error([&] { world.all_gather(gathered, output); }),
                  strata::str("all_gather on group 'world': output has ", 3 * n + 2, " elements"));
  auto shared = at::zeros({2 * n});
  auto overlapping = shared.narrow(0, 0, 2 * n);
  EXPECT_CONTAINS(testing::user_error([&] { world.all_to_all(shared, overlapping); }),
                  "share memory");
  auto odd = at::zeros({n + 1});
  auto odd_out = at::zeros({n + 1});
  if (n > 1) {
    EXPECT_THROW(world.all_to_all(odd_out, odd), UserError);
  }

  auto rows_in = at::zeros({2, 4}), rows_out = at::zeros({2, 4});
  std::vector<int64_t> short_counts(n + 1, 0);
  EXPECT_CONTAINS(testing::user_error(
                      [&] { world.all_to_all_v(rows_out, rows_in, short_counts, short_counts); }),
                  strata::str("send_counts has ", n + 1, " entries; the group has ", n, " ranks"));
  std::vector<int64_t> counts(n, 0);
  counts[0] = 1;
  EXPECT_CONTAINS(
      testing::user_error([&] { world.all_to_all_v(rows_out, rows_in, counts, counts); }),
      "send_counts sum to 1 rows but the input has 2");
  auto wide_out = at::zeros({2, 5});
  EXPECT_CONTAINS(
      testing::user_error([&] { world.all_to_all_v(wide_out, rows_in, counts, counts); }),
      "input rows [4] and output rows [5] differ");

  auto tensor = at::zeros({2});
  EXPECT_CONTAINS(
      testing::user_error([&] { world.broadcast(tensor, n); }),
      strata::str("broadcast on group 'world': root ", n, " is not a rank of this group of ", n));
  EXPECT_CONTAINS(testing::user_error([&] { world.send(tensor, -1); }), "peer -1 is not a rank");
  EXPECT_CONTAINS(testing::user_error([&] { world.recv(tensor, 0, -3); }),
                  "tag -3 is outside [0, ");
  EXPECT_CONTAINS(testing::user_error([&] { world.barrier(CommOptions{0.0}); }),
                  "barrier on group 'world': timeout_s (0) must be > 0");
  EXPECT_THROW(world.set_default_timeout_s(-1), UserError);

  // None of the above entered a collective: the group is still in step.
  auto check = at::ones({1}, at::kLong);
  world.all_reduce(check);
  EXPECT_EQ(check.item<int64_t>(), n);
}

TEST(Validation, EmptyCommIsABug) {
  Comm empty;
  EXPECT_FALSE(empty.valid());
  EXPECT_THROW(empty.rank(), InternalError);
  Comm world = test_world();
  Comm moved = std::move(world);
  EXPECT_TRUE(moved.valid());
  EXPECT_FALSE(world.valid());  // NOLINT(bugprone-use-after-move)
}

}  // namespace
}  // namespace strata
