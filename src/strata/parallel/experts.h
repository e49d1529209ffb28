// Expert-parallel communication: the autograd op that moves token rows between the ranks of
// the ep group (Lepikhin et al. 2020, GShard; Fedus et al. 2021, Switch Transformer).
//
//   all_to_all_tokens   forward: all-to-all-v of rows   backward: the reverse all-to-all-v
//
// Row counts vary per step, so the caller exchanges them first (exchange_expert_counts)
// and both directions then move exactly the rows that exist.
#pragma once
#include <ATen/ATen.h>

#include <cstdint>
#include <vector>

namespace strata {

class Comm;

// rows (S, C): send_counts[j] consecutive rows go to ep rank j; returns (sum(recv_counts), C)
// with recv_counts[i] rows from rank i, in rank order. The backward sends the gradient rows
// back the same way with the counts swapped. With an ep group of size 1 it is the identity.
at::Tensor all_to_all_tokens(const at::Tensor& rows, const std::vector<int64_t>& send_counts,
                             const std::vector<int64_t>& recv_counts, Comm& ep);

// counts (ep * experts_per_rank) int64: rows this rank sends to each global expert, experts
// in order (expert e lives on ep rank e / experts_per_rank). Returns (ep, experts_per_rank):
// row i holds the rows rank i sends to each of this rank's experts. One all-to-all.
at::Tensor exchange_expert_counts(const at::Tensor& counts, Comm& ep);

}  // namespace strata
