// Every collective on the world of this run (1..5 ranks), for every dtype and for sizes 0,
// 1, odd and large, against exact expected values built from closed forms.
#include "dist_test_util.h"

namespace strata {
namespace {

using namespace dist_test;

std::string describe(at::ScalarType dtype, int64_t count) {
  return strata::str(dtype, " x ", count);
}

TEST(Collectives, AllReduceSumAndAvg) {
  Comm world = test_world();
  const int n = world.size(), r = world.rank();
  for (at::ScalarType dtype : all_dtypes()) {
    for (int64_t count : test_sizes()) {
      SCOPED_TRACE(describe(dtype, count));
      // Rank r holds (r+1) * (i%5+1): the sum is n(n+1)/2 * (i%5+1) <= 75, exact everywhere.
      if (dtype == at::kBool) {
        auto flags = tensor_of(count, dtype, [&](int64_t i) { return (i + r) % 3 == 0; });
        world.all_reduce(flags, ReduceOp::Sum);  // "or"
        EXPECT_TENSOR_EQ(flags, tensor_of(count, dtype, [&](int64_t i) {
                           for (int q = 0; q < n; ++q)
                             if ((i + q) % 3 == 0) return true;
                           return false;
                         }));
        continue;
      }
      auto tensor = tensor_of(count, dtype, [&](int64_t i) { return (r + 1) * (i % 5 + 1); });
      world.all_reduce(tensor);
      EXPECT_EQ(tensor.scalar_type(), dtype);
      EXPECT_TENSOR_EQ(tensor, tensor_of(count, dtype,
                                         [&](int64_t i) { return n * (n + 1) / 2 * (i % 5 + 1); }));
      if (!at::isFloatingType(dtype)) continue;
      auto mean = tensor_of(count, dtype, [&](int64_t i) { return (r + 1) * (i % 5 + 1); });
      world.all_reduce(mean, ReduceOp::Avg);
      EXPECT_TENSOR_EQ(mean, tensor_of(count, at::kDouble, [&](int64_t i) {
                               return (n + 1) / 2.0 * (i % 5 + 1);
                             }).to(dtype));
    }
  }
}

// bfloat16 and float16 reduce in float and round back once per addition, as ATen's own
// add does: with two ranks the result is exactly a + b computed by ATen.
TEST(Collectives, SixteenBitSumsRoundLikeATen) {
  Comm world = test_world();
  const int n = world.size(), r = world.rank();
  for (at::ScalarType dtype : {at::kBFloat16, at::kHalf}) {
    for (int64_t count : {int64_t{5}, int64_t{10000}}) {  // scalar and vectorized paths
      SCOPED_TRACE(describe(dtype, count));
      auto values_of = [&](int64_t rank) {
        return at::randn({count}, at::TensorOptions().dtype(at::kFloat)).mul_(rank + 1).to(dtype);
      };
      std::vector<at::Tensor> all;
      for (int q = 0; q < n; ++q) {
        at::manual_seed(1000 + q);
        all.push_back(values_of(q));
      }
      auto tensor = all[r].clone();
      world.all_reduce(tensor);
      if (n == 1) {
        EXPECT_TENSOR_EQ(tensor, all[0]);
      } else if (n == 2) {
        EXPECT_TENSOR_EQ(tensor, all[0] + all[1]);
      } else {  // the order of additions is MPI's: one rounding per addition
        auto exact = at::stack(all).to(at::kDouble).sum(0);
        const double epsilon = dtype == at::kBFloat16 ? 1.0 / 128 : 1.0 / 1024;
        const std::string difference = strata::testing::compare_tensors(
            tensor, exact, n * epsilon, n * epsilon * at::stack(all).abs().max().item<double>());
        EXPECT_TRUE(difference.empty()) << difference;
      }
    }
  }
}

TEST(Collectives, AllReduceMaxAndMin) {
  Comm world = test_world();
  const int n = world.size(), r = world.rank();
  auto value = [](int64_t rank, int64_t i) { return (rank * 3 + i) % 7; };
  for (at::ScalarType dtype : all_dtypes()) {
    for (int64_t count : test_sizes()) {
      SCOPED_TRACE(describe(dtype, count));
      auto local =
          tensor_of(count, dtype, [&](int64_t i) { return small_value(value(r, i), dtype); });
      auto maximum = local.clone(), minimum = local.clone();
      world.all_reduce(maximum, ReduceOp::Max);
      world.all_reduce(minimum, ReduceOp::Min);
      auto extreme = [&](bool want_max) {
        return tensor_of(count, dtype, [&](int64_t i) {
          int64_t best = small_value(value(0, i), dtype);
          for (int q = 1; q < n; ++q) {
            const int64_t v = small_value(value(q, i), dtype);
            best = want_max ? std::max(best, v) : std::min(best, v);
          }
          return best;
        });
      };
      EXPECT_TENSOR_EQ(maximum, extreme(true));
      EXPECT_TENSOR_EQ(minimum, extreme(false));
    }
  }
}

TEST(Collectives, ReduceScatter) {
  Comm world = test_world();
  const int n = world.size(), r = world.rank();
  for (at::ScalarType dtype : all_dtypes()) {
    if (dtype == at::kBool) continue;
    for (int64_t chunk : test_sizes()) {
      SCOPED_TRACE(describe(dtype, chunk));
      // Input element k on rank q: (q+1) * (k%5+1); output i on rank r sums chunk r.
      auto input = tensor_of(n * chunk, dtype, [&](int64_t k) { return (r + 1) * (k % 5 + 1); });
      auto output = at::full({chunk}, 99, dtype);
      world.reduce_scatter(output, input);
      EXPECT_TENSOR_EQ(output, tensor_of(chunk, dtype, [&](int64_t i) {
                         return n * (n + 1) / 2 * ((r * chunk + i) % 5 + 1);
                       }));
      if (!at::isFloatingType(dtype)) continue;
      world.reduce_scatter(output, input, ReduceOp::Avg);
      EXPECT_TENSOR_EQ(output, tensor_of(chunk, at::kDouble, [&](int64_t i) {
                                 return (n + 1) / 2.0 * ((r * chunk + i) % 5 + 1);
                               }).to(dtype));
      world.reduce_scatter(output, input, ReduceOp::Max);
      EXPECT_TENSOR_EQ(output, tensor_of(chunk, dtype,
                                         [&](int64_t i) { return n * ((r * chunk + i) % 5 + 1); }));
    }
  }
}

TEST(Collectives, AllGatherAndInPlace) {
  Comm world = test_world();
  const int n = world.size(), r = world.rank();
  auto value = [](int64_t rank, int64_t i, at::ScalarType dtype) {
    return small_value(rank * 7 + i, dtype);
  };
  for (at::ScalarType dtype : all_dtypes()) {
    for (int64_t chunk : test_sizes()) {
      SCOPED_TRACE(describe(dtype, chunk));
      auto input = tensor_of(chunk, dtype, [&](int64_t i) { return value(r, i, dtype); });
      auto expected = tensor_of(n * chunk, dtype, [&](int64_t k) {
        return value(k / std::max<int64_t>(chunk, 1), k % std::max<int64_t>(chunk, 1), dtype);
      });
      auto output = at::zeros({n * chunk}, dtype);
      world.all_gather(output, input);
      EXPECT_TENSOR_EQ(output, expected);
      // In place: the input is this rank's slice of the output.
      auto gathered = at::zeros({n * chunk}, dtype);
      gathered.narrow(0, r * chunk, chunk).copy_(input);
      auto mine = gathered.narrow(0, r * chunk, chunk);
      world.all_gather(gathered, mine);
      EXPECT_TENSOR_EQ(gathered, expected);
    }
  }
  // Rows: a (2, 3) input per rank gathers into (2n, 3).
  auto rows = at::arange(6, at::kLong).view({2, 3}) + 100 * r;
  auto all_rows = at::empty({2 * n, 3}, at::kLong);
  world.all_gather(all_rows, rows);
  for (int q = 0; q < n; ++q) {
    EXPECT_TENSOR_EQ(all_rows.narrow(0, 2 * q, 2), at::arange(6, at::kLong).view({2, 3}) + 100 * q);
  }
}

TEST(Collectives, AllToAll) {
  Comm world = test_world();
  const int n = world.size(), r = world.rank();
  // Element i of the chunk rank `from` sends to rank `to`.
  auto value = [](int64_t from, int64_t to, int64_t i, at::ScalarType dtype) {
    return small_value(from * 5 + to * 3 + i, dtype);
  };
  for (at::ScalarType dtype : all_dtypes()) {
    for (int64_t chunk : test_sizes()) {
      SCOPED_TRACE(describe(dtype, chunk));
      const int64_t c = std::max<int64_t>(chunk, 1);
      auto input =
          tensor_of(n * chunk, dtype, [&](int64_t k) { return value(r, k / c, k % c, dtype); });
      auto output = at::zeros({n * chunk}, dtype);
      world.all_to_all(output, input);
      EXPECT_TENSOR_EQ(output, tensor_of(n * chunk, dtype,
                                         [&](int64_t k) { return value(k / c, r, k % c, dtype); }));
    }
  }
}

TEST(Collectives, AllToAllVWithZeroCounts) {
  Comm world = test_world();
  const int n = world.size(), r = world.rank();
  const int64_t width = 3;
  // Rank `from` sends (from + to) % 3 rows to rank `to`: many zero counts, some whole ranks
  // receive nothing from themselves. Row k of that block holds value(from, to, k, column).
  auto rows_between = [](int64_t from, int64_t to) { return (from + to) % 3; };
  auto value = [](int64_t from, int64_t to, int64_t k, int64_t column) {
    return (from * 11 + to * 5 + k * 3 + column) % 60;
  };
  for (at::ScalarType dtype : {at::kFloat, at::kBFloat16, at::kLong, at::kByte}) {
    SCOPED_TRACE(strata::str(dtype));
    std::vector<int64_t> send_counts(n), recv_counts(n);
    std::vector<at::Tensor> send_blocks, recv_blocks;
    for (int q = 0; q < n; ++q) {
      send_counts[q] = rows_between(r, q);
      recv_counts[q] = rows_between(q, r);
      send_blocks.push_back(tensor_of(send_counts[q] * width, dtype, [&](int64_t e) {
                              return value(r, q, e / width, e % width);
                            }).view({send_counts[q], width}));
      recv_blocks.push_back(tensor_of(recv_counts[q] * width, dtype, [&](int64_t e) {
                              return value(q, r, e / width, e % width);
                            }).view({recv_counts[q], width}));
    }
    auto input = at::cat(send_blocks), expected = at::cat(recv_blocks);
    auto output = at::full_like(expected, 77);
    world.all_to_all_v(output, input, send_counts, recv_counts);
    EXPECT_TENSOR_EQ(output, expected);
  }
  // Nothing at all to exchange.
  auto empty_in = at::zeros({0, width}), empty_out = at::zeros({0, width});
  world.all_to_all_v(empty_out, empty_in, std::vector<int64_t>(n, 0), std::vector<int64_t>(n, 0));
  // 1-D rows of single elements.
  std::vector<int64_t> ones(n, 1);
  auto input = at::arange(n, at::kLong) + 10 * r;  // element q goes to rank q
  auto output = at::zeros({n}, at::kLong);
  world.all_to_all_v(output, input, ones, ones);
  EXPECT_TENSOR_EQ(output, at::arange(n, at::kLong) * 10 + r);
}

TEST(Collectives, BroadcastFromEveryRoot) {
  Comm world = test_world();
  const int n = world.size(), r = world.rank();
  for (int root = 0; root < n; ++root) {
    // Every dtype from root 0; a few from the other roots (each broadcast costs a round trip).
    const std::vector<at::ScalarType> dtypes =
        root == 0 ? all_dtypes()
                  : std::vector<at::ScalarType>{at::kFloat, at::kBFloat16, at::kLong, at::kBool};
    for (at::ScalarType dtype : dtypes) {
      for (int64_t count : test_sizes()) {
        SCOPED_TRACE(strata::str("root ", root, " ", describe(dtype, count)));
        auto expected =
            tensor_of(count, dtype, [&](int64_t i) { return small_value(root + i, dtype); });
        auto tensor = r == root ? expected.clone() : at::zeros({count}, dtype);
        world.broadcast(tensor, root);
        EXPECT_TENSOR_EQ(tensor, expected);
      }
    }
  }
}

TEST(Collectives, BarrierAndSplitGroupsWork) {
  Comm world = test_world();
  world.barrier();
  world.barrier(CommOptions{30.0});
  // Odd and even world ranks: each group sums its own ranks.
  const int r = world.rank();
  Comm parity = world.split(r % 2, r, "parity");
  ASSERT_TRUE(parity.valid());
  EXPECT_EQ(parity.name(), "parity");
  EXPECT_EQ(parity.rank(), r / 2);
  EXPECT_EQ(parity.world_rank_of(parity.rank()), r);
  auto sum = at::full({1}, r, at::kLong);
  parity.all_reduce(sum);
  int64_t expected = 0;
  for (int q = r % 2; q < world.size(); q += 2) expected += q;
  EXPECT_EQ(sum.item<int64_t>(), expected);
  // Reversed key order reverses the group ranks; a negative color leaves a rank out.
  Comm reversed = world.split(0, world.size() - r, "reversed");
  EXPECT_EQ(reversed.rank(), world.size() - 1 - r);
  Comm only_zero = world.split(r == 0 ? 0 : -1, 0, "only_zero");
  EXPECT_EQ(only_zero.valid(), r == 0);
  if (only_zero.valid()) {
    EXPECT_EQ(only_zero.size(), 1);
  }
}

}  // namespace
}  // namespace strata
