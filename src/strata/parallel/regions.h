// Tensor-parallel regions: the only places where a layer's forward or backward crosses ranks.
// Each is an autograd function named for what it sends (Shoeybi et al. 2019, "f" and "g";
// Korthikanti et al. 2022 for the sequence-parallel pair):
//
//   copy_to_tp_region          forward: identity        backward: all-reduce (sum) over tp
//   reduce_from_tp_region      forward: all-reduce      backward: identity
//   gather_from_sequence       forward: all-gather      backward: reduce-scatter   (dim 1 = tokens)
//   reduce_scatter_to_sequence forward: reduce-scatter  backward: all-gather       (dim 1 = tokens)
//   split_to_sequence          forward: keep own chunk  backward: all-gather       (dim 1 = tokens)
//   gather_sequence_to_replica forward: all-gather      backward: keep own chunk   (dim 1 = tokens)
//
// gather_sequence_to_replica is split_to_sequence's mirror: the computation after it is
// replicated over tp (the mixture-of-experts layer), so every rank already holds the whole
// gradient and keeps its own tokens' part (gather_from_sequence would sum tp copies).
//
// The sequence ops act on (B, T, C) activations along T, split in tp equal contiguous chunks.
// With a tp group of size 1 every region is the identity.
#pragma once
#include <ATen/ATen.h>

namespace strata {

class Comm;

at::Tensor copy_to_tp_region(const at::Tensor& x, Comm& tp);
at::Tensor reduce_from_tp_region(const at::Tensor& x, Comm& tp);
at::Tensor gather_from_sequence(const at::Tensor& x, Comm& tp);
at::Tensor reduce_scatter_to_sequence(const at::Tensor& x, Comm& tp);
at::Tensor split_to_sequence(const at::Tensor& x, Comm& tp);
at::Tensor gather_sequence_to_replica(const at::Tensor& x, Comm& tp);

// Vocab-parallel cross-entropy (Megatron): logits (N, V_local) hold this rank's contiguous
// vocabulary range [vocab_start, vocab_start + V_local); entries at global index >= vocab_size
// are padding and never count. Returns the loss summed over the N rows whose target is not
// negative (a negative target carries no loss), divided by N; no rank ever holds the full
// V-wide logits: only per-row max, sum of exponentials and the target logit cross ranks.
at::Tensor vocab_parallel_cross_entropy(const at::Tensor& logits, const at::Tensor& targets,
                                        int64_t vocab_start, int64_t vocab_size, Comm& tp);

}  // namespace strata
