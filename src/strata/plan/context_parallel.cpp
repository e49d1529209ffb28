// The context-parallel exchanges of one layer and microbatch, priced per rank. Notation: b
// micro_batch, s seq, n = cp, e activation element bytes, g = max(4, e) the bytes of an
// accumulated gradient element (float32, float64 in fp64 runs), D head_dim, H_t query heads and
// K_t key/value heads of a tp rank. A rank holds T_l = s / n tokens.
//
// Ring (parallel/context_parallel.cpp, RingAttention): the rank's K/V block, 2 b T_l K_t D e
// bytes, travels around the ring. Forward: n steps, each computing the blocks of the K/V here
// while the next hop moves (n - 1 hops). Backward: n steps again; from step 1 on the dK/dV
// accumulated for the block (2 b T_l K_t D g bytes) follow it, one hop behind, and the last of
// the n dK/dV hops carries each block's gradients home after the last step's compute, so the
// backward waits for it whole. A step's transfers hide behind its attention blocks: with the
// sequence in 2n chunks (rank r holding chunks r and 2n - 1 - r) every step computes the same
// share of the rank's causal attention, 1 / n of it, forward and backward (the blockwise
// kernel's tiles, as the cost model charges them). A step's exposed time is max(0, its
// transfer time - its block compute).
//
// All-gather (Llama 3): the K/V of the whole sequence gathered over cp, 2 b s K_t D e bytes of
// which a rank sends (n - 1) / n; backward reduce-scatters their gradients, the same bytes.
// Nothing overlaps them. The gathered K/V stay saved for the backward.
//
// All-to-all (DeepSpeed-Ulysses): q, k and v re-sharded from tokens to heads, the output back:
// four all-to-alls of b T_l D e bytes times H_t (q, the output) or max(K_t, n) (k and v; fewer
// kv heads than ranks are repeated to n), of which a rank sends (n - 1) / n; backward the same
// four. Nothing overlaps them.
#include "strata/plan/context_parallel.h"

#include <algorithm>

#include "strata/core/error.h"
#include "strata/plan/collectives.h"

namespace strata {
namespace {

ContextParallelExchange ring_exchange(const NetworkProfile& network, bool crosses_nodes, double n,
                                      double block_bytes, double gradient_block_bytes,
                                      double core_forward_seconds, double core_input_grad_seconds) {
  const double kv_hop = p2p_seconds(network, crosses_nodes, block_bytes);
  const double gradient_hop = p2p_seconds(network, crosses_nodes, gradient_block_bytes);
  const double forward_block = core_forward_seconds / n;
  const double backward_block = core_input_grad_seconds / n;
  auto exposed = [](double transfer, double compute) { return std::max(0.0, transfer - compute); };
  ContextParallelExchange ring;
  ring.forward_bytes = (n - 1) * block_bytes;
  ring.backward_bytes = (n - 1) * block_bytes + n * gradient_block_bytes;
  ring.forward_seconds = (n - 1) * exposed(kv_hop, forward_block);
  // Step 0 moves K/V only, steps 1 .. n - 2 K/V and the previous step's dK/dV on the same link,
  // step n - 1 dK/dV only; the last dK/dV hop comes after all compute.
  ring.backward_seconds = exposed(kv_hop, backward_block) +
                          (n - 2) * exposed(kv_hop + gradient_hop, backward_block) +
                          exposed(gradient_hop, backward_block) + gradient_hop;
  return ring;
}

}  // namespace

int64_t kv_heads_per_tp_rank(const TransformerSpec& spec, int64_t tp) {
  return spec.n_kv_heads % tp == 0 ? spec.n_kv_heads / tp : spec.n_heads / tp;
}

ContextParallelExchange context_parallel_exchange(const TransformerSpec& spec,
                                                  const PlanLayout& layout,
                                                  const ClusterProfile& cluster,
                                                  double element_bytes, double core_forward_seconds,
                                                  double core_input_grad_seconds) {
  ContextParallelExchange out;
  if (layout.cp == 1) return out;
  STRATA_CHECK(layout.cp > 1 && layout.tp >= 1 && spec.n_heads % layout.tp == 0, "cp ", layout.cp,
               " tp ", layout.tp, " heads ", spec.n_heads);
  const NetworkProfile& network = cluster.network;
  const GroupSpan cp_group = group_span(layout.tp, layout.cp, cluster.devices_per_node);
  const double n = static_cast<double>(layout.cp), e = element_bytes;
  const double gradient_element = std::max(4.0, e);
  const double D = static_cast<double>(spec.head_dim());
  const double query_heads = static_cast<double>(spec.n_heads / layout.tp);
  const double kv_heads = static_cast<double>(kv_heads_per_tp_rank(spec, layout.tp));
  // b * T_l: the (sequence, token) rows a rank holds.
  const double rows = static_cast<double>(layout.micro_batch * spec.seq_len) / n;
  const double kv_block = 2 * rows * kv_heads * D;  // elements of the rank's K and V

  switch (layout.cp_comm) {
    case ContextParallelComm::ring:
      out =
          ring_exchange(network, cp_group.crosses_nodes(), n, e * kv_block,
                        gradient_element * kv_block, core_forward_seconds, core_input_grad_seconds);
      // Selective recomputation drops the core's work, and with it the K/V of the other ranks:
      // the ring runs again. Full recomputation repeats the whole forward.
      if (layout.recompute != Recompute::none) {
        out.recompute_bytes = out.forward_bytes;
        out.recompute_seconds = out.forward_seconds;
      }
      return out;
    case ContextParallelComm::all_gather: {
      const double gathered = n * e * kv_block;  // the K/V of the whole sequence
      out.forward_bytes = (n - 1) / n * gathered;
      out.backward_bytes = out.forward_bytes;
      out.forward_seconds = all_gather_seconds(network, cp_group, gathered);
      out.backward_seconds = reduce_scatter_seconds(network, cp_group, gathered);
      out.activation_bytes = gathered;
      break;
    }
    case ContextParallelComm::all_to_all: {
      const double q_or_out = rows * query_heads * D * e;
      const double k_or_v = rows * std::max(kv_heads, n) * D * e;
      out.forward_bytes = (n - 1) / n * (2 * q_or_out + 2 * k_or_v);
      out.backward_bytes = out.forward_bytes;
      out.forward_seconds = 2 * all_to_all_seconds(network, cp_group, q_or_out) +
                            2 * all_to_all_seconds(network, cp_group, k_or_v);
      out.backward_seconds = out.forward_seconds;
      break;
    }
  }
  // Gathered or re-sharded inputs of the core are kept, so only full recomputation (which
  // keeps the layer input alone) exchanges them again.
  if (layout.recompute == Recompute::full) {
    out.recompute_bytes = out.forward_bytes;
    out.recompute_seconds = out.forward_seconds;
  }
  return out;
}

}  // namespace strata
