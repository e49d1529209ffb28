// Autograd functions for the tensor-parallel regions (the Comm travels through the autograd
// context: parallel/autograd_comm.h).
#include "strata/parallel/regions.h"

#include <torch/csrc/autograd/custom_function.h>

#include "strata/core/error.h"
#include "strata/dist/comm.h"
#include "strata/parallel/autograd_comm.h"

namespace strata {
namespace {

using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

at::Tensor all_reduced(const at::Tensor& x, Comm& comm) {
  at::Tensor out = x.contiguous().clone();
  comm.all_reduce(out, ReduceOp::Sum);
  return out;
}

// The collectives move whole chunks of memory, rank after rank, while a rank's tokens are a
// slice of dim 1 of (B, T, ...): contiguous in memory only when B is 1. With B > 1 each
// direction makes one copy, between (B, T, ...) and the (size, B, T / size, ...) layout the
// collective wants, and hands back a contiguous tensor.

// (B, T, ...) -> (B, T * size, ...): chunks from every rank, in rank order, along T.
at::Tensor all_gathered_along_tokens(const at::Tensor& x, Comm& comm) {
  const at::Tensor chunk = x.contiguous();
  auto shape = chunk.sizes().vec();
  shape.insert(shape.begin(), comm.size());
  at::Tensor ranks_first = at::empty(shape, x.options());  // (size, B, T, ...)
  comm.all_gather(ranks_first, chunk);
  auto gathered = chunk.sizes().vec();
  gathered[1] *= comm.size();
  return x.size(0) == 1 ? ranks_first.view(gathered)
                        : ranks_first.transpose(0, 1).reshape(gathered);
}

// (B, T, ...) -> (B, T / size, ...): this rank's chunk of the sum over ranks.
at::Tensor reduce_scattered_along_tokens(const at::Tensor& x, Comm& comm) {
  STRATA_CHECK(x.size(1) % comm.size() == 0, "tokens (", x.size(1), ") not divisible by tp (",
               comm.size(), ")");
  auto split = x.sizes().vec();  // (B, size, T / size, ...)
  split[1] /= comm.size();
  split.insert(split.begin() + 1, comm.size());
  const at::Tensor ranks_first =
      x.size(0) == 1 ? x.contiguous() : x.reshape(split).transpose(0, 1).contiguous();
  auto shape = x.sizes().vec();
  shape[1] /= comm.size();
  at::Tensor out = at::empty(shape, x.options());
  comm.reduce_scatter(out, ranks_first, ReduceOp::Sum);
  return out;
}

at::Tensor own_chunk_along_tokens(const at::Tensor& x, Comm& comm) {
  const int64_t chunk = x.size(1) / comm.size();
  return x.narrow(1, comm.rank() * chunk, chunk).contiguous();
}

struct CopyToRegion : torch::autograd::Function<CopyToRegion> {
  static at::Tensor forward(AutogradContext* ctx, const at::Tensor& x, Comm* comm) {
    remember_comm(ctx, *comm);
    return x.view_as(x);
  }
  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    return {all_reduced(grads[0], recall_comm(ctx)), at::Tensor()};
  }
};

struct ReduceFromRegion : torch::autograd::Function<ReduceFromRegion> {
  static at::Tensor forward(AutogradContext* ctx, const at::Tensor& x, Comm* comm) {
    return all_reduced(x, *comm);
  }
  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    return {grads[0], at::Tensor()};
  }
};

struct GatherFromSequence : torch::autograd::Function<GatherFromSequence> {
  static at::Tensor forward(AutogradContext* ctx, const at::Tensor& x, Comm* comm) {
    remember_comm(ctx, *comm);
    return all_gathered_along_tokens(x, *comm);
  }
  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    return {reduce_scattered_along_tokens(grads[0], recall_comm(ctx)), at::Tensor()};
  }
};

struct ReduceScatterToSequence : torch::autograd::Function<ReduceScatterToSequence> {
  static at::Tensor forward(AutogradContext* ctx, const at::Tensor& x, Comm* comm) {
    remember_comm(ctx, *comm);
    return reduce_scattered_along_tokens(x, *comm);
  }
  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    return {all_gathered_along_tokens(grads[0], recall_comm(ctx)), at::Tensor()};
  }
};

struct SplitToSequence : torch::autograd::Function<SplitToSequence> {
  static at::Tensor forward(AutogradContext* ctx, const at::Tensor& x, Comm* comm) {
    remember_comm(ctx, *comm);
    return own_chunk_along_tokens(x, *comm);
  }
  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    return {all_gathered_along_tokens(grads[0], recall_comm(ctx)), at::Tensor()};
  }
};

struct GatherSequenceToReplica : torch::autograd::Function<GatherSequenceToReplica> {
  static at::Tensor forward(AutogradContext* ctx, const at::Tensor& x, Comm* comm) {
    remember_comm(ctx, *comm);
    return all_gathered_along_tokens(x, *comm);
  }
  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    return {own_chunk_along_tokens(grads[0], recall_comm(ctx)), at::Tensor()};
  }
};

// Forward: loss_i = log(sum_v exp(z_iv - m_i)) - (z_i,target - m_i), with m_i the global row
// max; each rank contributes its columns' partial sums and (if it owns the target) the target
// logit. Backward: dz_iv = (softmax_iv - [v == target_i]) * dloss / N on the local columns.
// A negative target (GPT::kIgnoredTarget) carries no loss: its row's loss and gradient are
// zero, and the mean still divides by all N rows.
struct VocabParallelCrossEntropy : torch::autograd::Function<VocabParallelCrossEntropy> {
  static at::Tensor forward(AutogradContext* ctx, const at::Tensor& logits,
                            const at::Tensor& targets, int64_t vocab_start, int64_t vocab_size,
                            Comm* comm) {
    const int64_t local_vocab = logits.size(1);
    at::Tensor z = logits.detach();
    // Padding columns (global index >= vocab_size) are excluded by a -inf mask.
    const int64_t valid = std::max<int64_t>(0, std::min(local_vocab, vocab_size - vocab_start));
    if (valid < local_vocab) {
      z = z.clone();
      z.narrow(1, valid, local_vocab - valid).fill_(-std::numeric_limits<double>::infinity());
    }
    at::Tensor row_max = std::get<0>(z.max(1)).contiguous();  // (N)
    comm->all_reduce(row_max, ReduceOp::Max);
    at::Tensor shifted = z - row_max.unsqueeze(1);
    at::Tensor exp = shifted.exp();
    at::Tensor sum_exp = exp.sum(1).contiguous();  // (N)
    comm->all_reduce(sum_exp, ReduceOp::Sum);

    at::Tensor local_target = targets - vocab_start;
    at::Tensor owned = (local_target >= 0).logical_and(local_target < valid);
    at::Tensor safe_target = local_target.masked_fill(owned.logical_not(), 0);
    at::Tensor target_logit =
        shifted.gather(1, safe_target.unsqueeze(1)).squeeze(1).masked_fill(owned.logical_not(), 0);
    target_logit = target_logit.contiguous();
    comm->all_reduce(target_logit, ReduceOp::Sum);

    // Negative targets carry no loss: their rows add zero, the divisor stays N.
    at::Tensor ignored = targets < 0;
    at::Tensor loss = (sum_exp.log() - target_logit).masked_fill(ignored, 0).sum() /
                      static_cast<double>(targets.numel());
    ctx->save_for_backward({exp / sum_exp.unsqueeze(1), safe_target, owned, ignored});
    return loss;
  }
  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    auto saved = ctx->get_saved_variables();
    at::Tensor grad = saved[0].clone();  // softmax over the local columns
    const at::Tensor& safe_target = saved[1];
    const at::Tensor& owned = saved[2];
    grad.scatter_add_(1, safe_target.unsqueeze(1), -owned.to(grad.scalar_type()).unsqueeze(1));
    grad.masked_fill_(saved[3].unsqueeze(1), 0);
    grad.mul_(grads[0] / static_cast<double>(grad.size(0)));
    return {grad, at::Tensor(), at::Tensor(), at::Tensor(), at::Tensor()};
  }
};

}  // namespace

at::Tensor copy_to_tp_region(const at::Tensor& x, Comm& tp) {
  return tp.size() == 1 ? x : CopyToRegion::apply(x, &tp);
}
at::Tensor reduce_from_tp_region(const at::Tensor& x, Comm& tp) {
  return tp.size() == 1 ? x : ReduceFromRegion::apply(x, &tp);
}
at::Tensor gather_from_sequence(const at::Tensor& x, Comm& tp) {
  return tp.size() == 1 ? x : GatherFromSequence::apply(x, &tp);
}
at::Tensor reduce_scatter_to_sequence(const at::Tensor& x, Comm& tp) {
  return tp.size() == 1 ? x : ReduceScatterToSequence::apply(x, &tp);
}
at::Tensor split_to_sequence(const at::Tensor& x, Comm& tp) {
  return tp.size() == 1 ? x : SplitToSequence::apply(x, &tp);
}
at::Tensor gather_sequence_to_replica(const at::Tensor& x, Comm& tp) {
  return tp.size() == 1 ? x : GatherSequenceToReplica::apply(x, &tp);
}
at::Tensor vocab_parallel_cross_entropy(const at::Tensor& logits, const at::Tensor& targets,
                                        int64_t vocab_start, int64_t vocab_size, Comm& tp) {
  return VocabParallelCrossEntropy::apply(logits, targets, vocab_start, vocab_size, &tp);
}

}  // namespace strata
