// Context-parallel attention on the real MPI transport, the whole world as the cp group: each
// exchange (ring, all-gather, all-to-all) gives every rank its tokens' rows of the output and
// of dq, dk, dv of attention over the whole sequence on one rank, for grouped-query ratios
// 1, 2, 4 and H (one kv head), chunks that are not a multiple of the kernel's tiles, float64
// and float32; with packed documents each exchange equals masked whole-sequence attention and
// the ring skips the blocks that share no document; the bytes each exchange sends equal the
// formulas of docs/parallelism.md; the ring keeps only its output, in the inputs' dtype, and
// its log-sum-exp for the backward; and the chunk assignment balances the causal work.
#include <gtest/gtest.h>

#include <ATen/CPUGeneratorImpl.h>

#include "strata/core/memory.h"
#include "strata/dist/comm.h"
#include "strata/kernels/attention.h"
#include "strata/parallel/context_parallel.h"
#include "test_support.h"

namespace strata {
namespace {

at::Tensor shared_randn(std::vector<int64_t> shape, uint64_t seed, at::ScalarType dtype) {
  auto generator = at::make_generator<at::CPUGeneratorImpl>(seed);
  return at::normal(0.0, 1.0, shape, generator, at::TensorOptions(at::kFloat)).to(dtype);
}

// (B, heads, T, D) -> this rank's tokens (B, heads, T / n, D).
at::Tensor shard_tokens(const at::Tensor& x, const Comm& cp) {
  return context_shard(x, cp.rank(), cp.size(), 2);
}

constexpr ContextParallelComm kExchanges[] = {
    ContextParallelComm::ring, ContextParallelComm::all_gather, ContextParallelComm::all_to_all};

struct Shapes {
  int64_t B = 2, H, K, T, D = 8;
};

struct Result {
  at::Tensor out, dq, dk, dv;
};

Result attend(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v, const at::Tensor& dout,
              double scale, Comm* cp, ContextParallelComm exchange) {
  at::Tensor ql = q.clone().set_requires_grad(true), kl = k.clone().set_requires_grad(true),
             vl = v.clone().set_requires_grad(true);
  at::Tensor out = cp ? context_parallel_attention(ql, kl, vl, scale, ContextParallel{cp, exchange})
                      : blockwise_attention(ql, kl, vl, scale);
  out.backward(dout);
  return {out.detach(), ql.grad(), kl.grad(), vl.grad()};
}

TEST(ContextParallel, EveryExchangeEqualsWholeSequenceAttention) {
  Comm cp = Comm::world(120);
  const int64_t n = cp.size();
  const int64_t H = 4 * n;  // all-to-all splits heads over cp
  for (at::ScalarType dtype : {at::kDouble, at::kFloat}) {
    const double tolerance = dtype == at::kDouble ? 1e-10 : 1e-5;
    // Chunks of 37 tokens (not a multiple of any tile), and of 1 token.
    for (int64_t chunk : {37, 1}) {
      for (int64_t K : {H, H / 2, H / 4, int64_t{1}}) {
        const Shapes s{2, H, K, 2 * n * chunk, 8};
        const double scale = 1.0 / std::sqrt(static_cast<double>(s.D));
        const at::Tensor q = shared_randn({s.B, H, s.T, s.D}, 1, dtype);
        const at::Tensor k = shared_randn({s.B, K, s.T, s.D}, 2, dtype);
        const at::Tensor v = shared_randn({s.B, K, s.T, s.D}, 3, dtype);
        const at::Tensor dout = shared_randn({s.B, H, s.T, s.D}, 4, dtype);
        const Result whole = attend(q, k, v, dout, scale, nullptr, ContextParallelComm::ring);
        for (ContextParallelComm exchange : kExchanges) {
          if (exchange == ContextParallelComm::all_to_all && K % n != 0 && n % K != 0) continue;
          const std::string what = std::string(name_of(exchange)) + " cp " + std::to_string(n) +
                                   " " + std::string(c10::toString(dtype)) + " T " +
                                   std::to_string(s.T) + " H " + std::to_string(H) + " K " +
                                   std::to_string(K);
          const Result mine = attend(shard_tokens(q, cp), shard_tokens(k, cp), shard_tokens(v, cp),
                                     shard_tokens(dout, cp), scale, &cp, exchange);
          EXPECT_EQ(mine.out.scalar_type(), dtype) << what;
          const std::pair<const char*, at::Tensor Result::*> parts[] = {
              {"out", &Result::out}, {"dq", &Result::dq}, {"dk", &Result::dk}, {"dv", &Result::dv}};
          for (const auto& [name, part] : parts) {
            EXPECT_EQ(testing::compare_tensors(mine.*part, shard_tokens(whole.*part, cp), tolerance,
                                               tolerance),
                      "")
                << what << " " << name;
          }
        }
      }
    }
  }
}

// Document ids (B, T) of two packed rows: the first cut into documents of a cycle of lengths
// (one of a single token), the second into two halves; each id is the offset where the
// token's document begins.
at::Tensor packed_documents(int64_t T) {
  const int64_t cycle[] = {40, 30, 45, 33, 1, 17};
  std::vector<int64_t> first, second;
  for (int64_t start = 0, i = 0; start < T; start += cycle[i++ % 6]) {
    for (int64_t t = start; t < std::min(T, start + cycle[i % 6]); ++t) first.push_back(start);
  }
  for (int64_t t = 0; t < T; ++t) second.push_back(t < T / 2 ? 0 : T / 2);
  return at::stack({at::tensor(first, at::kLong), at::tensor(second, at::kLong)});
}

// The (query chunk, key chunk) blocks the ring visits on this rank's queries (the key chunk
// no later) in which no query sees a key of its document, from the dense mask.
int64_t blocks_sharing_no_document(const at::Tensor& documents, int64_t c, const Comm& cp) {
  const int64_t n = cp.size();
  int64_t count = 0;
  for (int64_t query_chunk : context_chunks(cp.rank(), n)) {
    for (int64_t key_chunk = 0; key_chunk <= query_chunk; ++key_chunk) {
      const at::Tensor queries = documents.narrow(1, query_chunk * c, c).unsqueeze(2);
      const at::Tensor keys = documents.narrow(1, key_chunk * c, c).unsqueeze(1);
      at::Tensor same = queries == keys;                 // (B, c, c)
      if (key_chunk == query_chunk) same = same.tril();  // a key no later than its query
      if (!same.any().item<bool>()) ++count;
    }
  }
  return count;
}

// Packed documents: every exchange equals whole-sequence attention masked to each document
// (the kernel's own mask, checked against dense attention in tests/kernels), forward and
// backward; the ring skips exactly the blocks that share no document.
TEST(ContextParallel, DocumentMaskEqualsWholeSequenceAndRingSkipsBlocks) {
  Comm cp = Comm::world(120);
  const int64_t n = cp.size(), H = 4 * n, K = 2 * n, c = 37, T = 2 * n * c, D = 8;
  const double scale = 1.0 / std::sqrt(static_cast<double>(D));
  const at::Tensor documents = packed_documents(T);
  for (at::ScalarType dtype : {at::kDouble, at::kFloat}) {
    const double tolerance = dtype == at::kDouble ? 1e-10 : 1e-5;
    const at::Tensor q = shared_randn({2, H, T, D}, 1, dtype);
    const at::Tensor k = shared_randn({2, K, T, D}, 2, dtype);
    const at::Tensor v = shared_randn({2, K, T, D}, 3, dtype);
    const at::Tensor dout = shared_randn({2, H, T, D}, 4, dtype);
    Result whole;
    {
      at::Tensor ql = q.clone().set_requires_grad(true), kl = k.clone().set_requires_grad(true),
                 vl = v.clone().set_requires_grad(true);
      at::Tensor out = blockwise_attention(ql, kl, vl, scale, {}, {documents, documents});
      out.backward(dout);
      whole = {out.detach(), ql.grad(), kl.grad(), vl.grad()};
    }
    const at::Tensor my_documents = context_shard(documents, cp.rank(), n, 1);
    for (ContextParallelComm exchange : kExchanges) {
      const std::string what = std::string(name_of(exchange)) + " cp " + std::to_string(n) + " " +
                               std::string(c10::toString(dtype));
      int64_t skipped = 0;
      at::Tensor ql = shard_tokens(q, cp).set_requires_grad(true),
                 kl = shard_tokens(k, cp).set_requires_grad(true),
                 vl = shard_tokens(v, cp).set_requires_grad(true);
      at::Tensor out = context_parallel_attention(
          ql, kl, vl, scale, ContextParallel{&cp, exchange, nullptr, &skipped}, my_documents);
      out.backward(shard_tokens(dout, cp));
      const Result mine{out.detach(), ql.grad(), kl.grad(), vl.grad()};
      const std::pair<const char*, at::Tensor Result::*> parts[] = {
          {"out", &Result::out}, {"dq", &Result::dq}, {"dk", &Result::dk}, {"dv", &Result::dv}};
      for (const auto& [name, part] : parts) {
        EXPECT_EQ(testing::compare_tensors(mine.*part, shard_tokens(whole.*part, cp), tolerance,
                                           tolerance),
                  "")
            << what << " " << name;
      }
      const int64_t expected =
          exchange == ContextParallelComm::ring ? blocks_sharing_no_document(documents, c, cp) : 0;
      EXPECT_EQ(skipped, expected) << what;
    }
  }
  // The documents do leave blocks to skip somewhere in the ring.
  at::Tensor blocks = at::tensor({blocks_sharing_no_document(documents, c, cp)}, at::kLong);
  cp.all_reduce(blocks, ReduceOp::Sum);
  EXPECT_GT(blocks.item<int64_t>(), 0);
}

// Bytes one rank sends for one layer's forward and backward (docs/parallelism.md), with
// b sequences, T_l = T / n tokens per rank, H query and K kv heads per rank, D head_dim, e
// bytes per element; dK/dV travel in float32 (f = 4 bytes):
//   ring        forward (n-1) 2 b T_l K D e; backward (n-1) 2 b T_l K D e + n 2 b T_l K D f
//   all-gather  forward (n-1) 2 b T_l K D e (all-gather); backward the same (reduce-scatter)
//   all-to-all  forward (n-1)/n b T_l (2H + 2 max(K, n)) D e; backward the same
TEST(ContextParallel, BytesSentEqualTheFormulas) {
  Comm cp = Comm::world(120);
  const double n = static_cast<double>(cp.size());
  const int64_t H = 4 * cp.size(), B = 2, T_l = 2 * 16, D = 8;
  for (int64_t K : {H, int64_t{1}}) {
    const at::Tensor q = shared_randn({B, H, T_l, D}, 10 + cp.rank(), at::kFloat);
    const at::Tensor k = shared_randn({B, K, T_l, D}, 20 + cp.rank(), at::kFloat);
    const at::Tensor v = shared_randn({B, K, T_l, D}, 30 + cp.rank(), at::kFloat);
    const at::Tensor dout = shared_randn({B, H, T_l, D}, 40 + cp.rank(), at::kFloat);
    const double e = 4, kv_block = 2.0 * B * T_l * K * D;
    for (ContextParallelComm exchange : kExchanges) {
      const std::string what = std::string(name_of(exchange)) + " K " + std::to_string(K);
      auto sent = [&] {
        int64_t total = 0;
        for (int64_t bytes : cp.counters().bytes) total += bytes;
        return static_cast<double>(total);
      };
      cp.counters().reset();
      at::Tensor ql = q.clone().set_requires_grad(true), kl = k.clone().set_requires_grad(true),
                 vl = v.clone().set_requires_grad(true);
      at::Tensor out = context_parallel_attention(ql, kl, vl, 0.3, ContextParallel{&cp, exchange});
      const double forward = sent();
      out.backward(dout);
      const double backward = sent() - forward;
      double want_forward = 0, want_backward = 0;
      switch (exchange) {
        case ContextParallelComm::ring:
          want_forward = (n - 1) * kv_block * e;
          want_backward = (n - 1) * kv_block * e + n * kv_block * 4;
          break;
        case ContextParallelComm::all_gather:
          want_forward = want_backward = (n - 1) * kv_block * e;
          break;
        case ContextParallelComm::all_to_all:
          want_forward = want_backward =
              (n - 1) / n * B * T_l * (2.0 * H + 2.0 * std::max<double>(K, n)) * D * e;
          break;
      }
      EXPECT_EQ(forward, want_forward) << what << " forward";
      EXPECT_EQ(backward, want_backward) << what << " backward";
    }
  }
}

// What the ring keeps for its backward beyond q, k and v: the output it returned (in the
// inputs' dtype: the backward reads that one, not a float32 copy besides) and its float32
// log-sum-exp. A bf16 run holds 2 bytes per output element, as the kernel without cp does.
TEST(ContextParallel, RingKeepsOnlyItsOutputAndLogSumExp) {
  install_cpu_allocator();
  Comm cp = Comm::world(120);
  const int64_t H = 4, B = 2, T_l = 2 * 16, D = 8;
  for (at::ScalarType dtype : {at::kFloat, at::kBFloat16}) {
    const at::Tensor q =
        shared_randn({B, H, T_l, D}, 10 + cp.rank(), dtype).set_requires_grad(true);
    const at::Tensor k =
        shared_randn({B, H, T_l, D}, 20 + cp.rank(), dtype).set_requires_grad(true);
    const at::Tensor v =
        shared_randn({B, H, T_l, D}, 30 + cp.rank(), dtype).set_requires_grad(true);
    const int64_t before = tracked_bytes_now();
    at::Tensor out =
        context_parallel_attention(q, k, v, 0.3, ContextParallel{&cp, ContextParallelComm::ring});
    const int64_t held = tracked_bytes_now() - before;
    const int64_t output = out.numel() * out.element_size(), lse = B * H * T_l * 4;
    EXPECT_EQ(out.scalar_type(), dtype);
    EXPECT_LE(held, output + lse + 1024)
        << c10::toString(dtype) << ": output " << output << " bytes, log-sum-exp " << lse;
  }
}

// Causal work of a rank = the (query, key) pairs it scores = sum over its tokens of position + 1.
TEST(ContextParallel, ChunkAssignmentBalancesTheCausalWork) {
  const int64_t T = 48;
  for (int64_t n : {2, 3, 4, 6}) {
    std::vector<int64_t> balanced, contiguous;
    for (int64_t rank = 0; rank < n; ++rank) {
      balanced.push_back((context_positions(T, rank, n) + 1).sum().item<int64_t>());
      contiguous.push_back(
          (at::arange(rank * T / n, (rank + 1) * T / n) + 1).sum().item<int64_t>());
    }
    for (int64_t rank = 1; rank < n; ++rank) EXPECT_EQ(balanced[rank], balanced[0]) << n;
    // A contiguous split gives the last rank about 2n - 1 times the first's work.
    const double imbalance = static_cast<double>(contiguous.back()) / contiguous.front();
    EXPECT_NEAR(imbalance, 2.0 * n - 1, 0.2 * n) << n;
  }
  EXPECT_TRUE(at::equal(context_positions(8, 1, 2), at::tensor({2, 3, 4, 5}, at::kLong)));
  EXPECT_TRUE(at::equal(context_positions(8, 0, 2), at::tensor({0, 1, 6, 7}, at::kLong)));
}

}  // namespace
}  // namespace strata
