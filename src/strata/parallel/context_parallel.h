// Context parallelism: every sequence is split over the cp ranks, and attention — the one place
// where tokens meet — crosses them. Everything else in a block is per token and runs on the
// rank's own tokens unchanged.
//
// Load balance: the sequence of T tokens is cut into 2 * cp chunks of c = T / (2 * cp); rank r
// holds chunks r and 2 * cp - 1 - r, in that order, so under the causal mask every rank does
// the same work (a contiguous split gives the last rank 2 * cp - 1 times the first's). Positions
// (learned or rotary) are the tokens' original ones: context_positions().
//
// Attention of the rank's queries against every key at or before them, three ways
// (parallel.cp_comm; bytes per layer and microbatch in docs/parallelism.md):
//   ring        K/V of each rank travel around the cp ring with non-blocking send/receive while
//               the blocks already here are computed; partial outputs merge by their
//               log-sum-exp. Backward sends K/V around again, with the dK/dV accumulated for
//               them, which arrive home after the last hop.
//   all-gather  K/V gathered over cp (Llama 3), the rank's queries attend to them; backward
//               reduce-scatters dK/dV.
//   all-to-all  DeepSpeed-Ulysses: q, k, v re-sharded from tokens to heads, full-sequence
//               attention on cp-th of the heads, the output re-sharded back.
#pragma once
#include <ATen/ATen.h>

#include <cstdint>

#include "strata/core/config_enums.h"

namespace strata {

class Comm;
class Trace;

struct ContextParallel {
  Comm* comm = nullptr;  // the cp group; nullptr = no context parallelism
  ContextParallelComm exchange = ContextParallelComm::ring;
  // Records the ring's steps (cp_ring_compute: a step's blocks; cp_ring_wait: waiting for the
  // next hop, i.e. the transfer time not hidden by the compute). nullptr = not traced.
  Trace* trace = nullptr;
  // With packed documents, the ring adds here each (query chunk, key chunk) block of its
  // forward that it skipped because no query shares a document with a key. nullptr = not
  // counted.
  int64_t* skipped_blocks = nullptr;
};

// The global chunk index of each of rank `rank`'s two chunks: {rank, 2 * size - 1 - rank}.
std::array<int64_t, 2> context_chunks(int64_t rank, int64_t size);
// Positions of the seq_len / size tokens that rank holds, in its order (int64).
at::Tensor context_positions(int64_t seq_len, int64_t rank, int64_t size);
// Rank `rank`'s tokens of a whole sequence along `dim` (T tokens -> T / size).
at::Tensor context_shard(const at::Tensor& x, int64_t rank, int64_t size, int64_t dim = 1);
// The inverse over all ranks: every rank's tokens concatenated in rank order along `dim` (as
// an all-gather leaves them) -> the whole sequence in its own order.
at::Tensor context_unshard(const at::Tensor& x, int64_t size, int64_t dim = 1);

// softmax(q k^T * scale, causal over the original positions) v for this rank's queries.
// q (B, H, T_l, D), k and v (B, K, T_l, D), K dividing H (grouped-query attention): this rank's
// tokens, in its chunk order. Differentiable; the backward crosses the cp ranks as the forward
// did. Every rank of cp.comm calls it with the same shapes and exchange. documents: packed
// documents (B, T_l) int64 of this rank's tokens (the model's ForwardContext::documents), or
// undefined; with them a query sees only keys of its own document.
at::Tensor context_parallel_attention(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
                                      double scale, const ContextParallel& cp,
                                      const at::Tensor& documents = {});

}  // namespace strata
