// The mixture-of-experts layer. Shapes: B batch, T tokens, C d_model, E experts (E_l on this
// ep rank), k top_k, N = B * T tokens, S kept assignments on this rank, R rows received.
//
// How a forward works:
//  1. Route: logits = x W_r^T (B, T, E), probabilities by softmax; the k largest are picked
//     one at a time with argmax (the lowest expert index wins a tie), and their weights are
//     renormalized to sum to 1 (top_k = 2). With top_k = 1 the weight is the probability
//     itself, as in Switch: a renormalized single weight would be the constant 1 and the
//     router would learn nothing from the language-model loss.
//  2. Capacity: assignment (token t, expert e) of a sequence has position = assignments to e
//     at earlier tokens of the same sequence; it is kept while position < capacity.
//  3. Dispatch: the kept assignments, sorted by (expert, token), become rows of x. Their
//     per-expert counts are exchanged first (one all-to-all of E integers), then the rows
//     go to the experts' ep ranks (all-to-all-v). A rank receives, from each source rank in
//     turn, rows grouped by its local experts; it regroups them by expert, runs each
//     expert's FFN on its rows, and puts the results back in arrival order.
//  4. Combine: the reverse all-to-all-v returns the rows in the order they left; each is
//     scaled by its routing weight and added into its token's output (index_add in
//     (expert, token) order, so the sum is the same on every layout).
// Autograd sees only differentiable ATen ops and all_to_all_tokens, whose backward is the
// reverse exchange, so the backward is the mirror image: combine, return, FFN, dispatch.
#include "strata/model/moe.h"

#include <torch/csrc/autograd/custom_function.h>

#include <cmath>

#include "strata/core/error.h"
#include "strata/core/precision.h"
#include "strata/dist/comm.h"
#include "strata/model/activation.h"
#include "strata/parallel/context_parallel.h"
#include "strata/parallel/experts.h"
#include "strata/parallel/linear.h"

namespace strata {
namespace {

// rows (n, C) through one expert: fc (F or 2F, C), out (C, F).
at::Tensor expert_ffn(const at::Tensor& rows, const at::Tensor& fc, const at::Tensor& out,
                      Activation activation) {
  return strata::linear(ffn_activation(strata::linear(rows, fc), activation), out);
}

std::vector<int64_t> to_vector(const at::Tensor& t) {
  at::Tensor c = t.contiguous();
  return std::vector<int64_t>(c.data_ptr<int64_t>(), c.data_ptr<int64_t>() + c.numel());
}

struct AttachAuxiliaryLoss : torch::autograd::Function<AttachAuxiliaryLoss> {
  static at::Tensor forward(torch::autograd::AutogradContext* ctx, const at::Tensor& x,
                            const at::Tensor& loss, double scale) {
    ctx->saved_data["scale"] = scale;
    ctx->saved_data["dtype"] = static_cast<int64_t>(loss.scalar_type());
    return x.view_as(x);
  }
  static torch::autograd::variable_list backward(torch::autograd::AutogradContext* ctx,
                                                 torch::autograd::variable_list grads) {
    const auto dtype = static_cast<at::ScalarType>(ctx->saved_data["dtype"].toInt());
    at::Tensor loss_grad = at::full({}, ctx->saved_data["scale"].toDouble(), at::dtype(dtype));
    return {grads[0], loss_grad, at::Tensor()};
  }
};

}  // namespace

at::Tensor attach_auxiliary_loss(const at::Tensor& x, const at::Tensor& loss, double scale) {
  return AttachAuxiliaryLoss::apply(x, loss, scale);
}

int64_t moe_capacity(const ModelConfig& config) {
  const MoeConfig& moe = config.moe;
  if (!(moe.capacity_factor > 0)) return 0;
  return static_cast<int64_t>(std::ceil(moe.capacity_factor * static_cast<double>(moe.top_k) *
                                        static_cast<double>(config.seq_len) /
                                        static_cast<double>(moe.num_experts)));
}

namespace {

struct SequenceCounts {
  at::Tensor total;   // (B, E) assignments per expert in the whole sequence
  at::Tensor before;  // (B, T, E) at earlier tokens of the sequence; undefined: cumsum here
  int64_t sequence_tokens;
};

// chosen (B, T, E) of this cp rank's two chunks: the counts over the whole sequence, from every
// rank's per-chunk counts.
SequenceCounts sequence_counts(const at::Tensor& chosen, Comm& cp) {
  const int64_t n = cp.size(), B = chosen.size(0), T = chosen.size(1), E = chosen.size(2);
  const int64_t c = T / 2;
  const at::Tensor per_chunk = chosen.view({B, 2, c, E});
  at::Tensor all = at::empty({n, B, 2, E}, at::kLong);
  cp.all_gather(all, per_chunk.sum(2).contiguous());
  // (B, 2n, E): one count per chunk, in the sequence's order.
  const at::Tensor counts = context_unshard(all.permute({1, 0, 2, 3}).reshape({B, 2 * n, E}), n);
  const at::Tensor chunks_before = counts.cumsum(1) - counts;  // earlier chunks, per chunk
  const at::Tensor offset = context_shard(chunks_before, cp.rank(), n);  // (B, 2, E): mine
  const at::Tensor before = per_chunk.cumsum(2) - per_chunk + offset.unsqueeze(2);
  return {counts.sum(1), before.view({B, T, E}), T * n};
}

}  // namespace

MoeOutput moe_forward(const at::Tensor& x, const MoeWeights& weights, const ModelConfig& config,
                      Comm* ep, at::Tensor* expert_counts, Comm* cp) {
  STRATA_CHECK(!(cp && expert_counts), "context parallelism runs whole sequences, not a cache");
  const MoeConfig& moe = config.moe;
  const int64_t B = x.size(0), T = x.size(1), C = x.size(2), N = B * T;
  const int64_t E = moe.num_experts, k = moe.top_k;
  const int64_t ep_size = ep ? ep->size() : 1, ep_rank = ep ? ep->rank() : 0;
  const int64_t E_l = E / ep_size;
  STRATA_CHECK(E % ep_size == 0 && weights.fc.size(0) == E_l && weights.out.size(0) == E_l, E,
               " experts over ", ep_size, " ep ranks, but ", weights.fc.size(0), " held here");
  MoeOutput result;
  MoeLayerStats& stats = result.stats;

  // 1. Route, in float32 (or float64) whatever the model computes in: the choice of experts
  // and the gates should not depend on bf16 rounding.
  const auto wide = at::promote_types(x.scalar_type(), at::kFloat);
  at::Tensor logits = at::matmul(x.to(wide), weights.router.to(wide).t());  // (B, T, E)
  result.z_loss = at::logsumexp(logits, -1).pow(2).mean();
  at::Tensor probs = at::softmax(logits, -1);
  at::Tensor remaining = probs.detach().clone();
  std::vector<at::Tensor> picks;
  for (int64_t choice = 0; choice < k; ++choice) {
    at::Tensor pick = remaining.argmax(-1, /*keepdim=*/true);  // first maximum: lowest index
    picks.push_back(pick);
    remaining.scatter_(-1, pick, -1.0);
  }
  at::Tensor expert_index = at::cat(picks, -1);  // (B, T, k)
  at::Tensor gate = probs.gather(-1, expert_index);
  if (k > 1) gate = gate / gate.sum(-1, /*keepdim=*/true);

  // Switch load balancing per sequence: E * sum_e (share of assignments to e) * (mean prob).
  // Under context parallelism the shares count the whole sequence's assignments; the mean
  // probability is this rank's, so the mean of the ranks' losses is the sequence's.
  at::Tensor chosen = at::zeros({B, T, E}, at::kLong).scatter_(-1, expert_index, 1);
  SequenceCounts sequence =
      cp ? sequence_counts(chosen, *cp) : SequenceCounts{chosen.sum(1), {}, T};
  at::Tensor share =
      sequence.total.to(probs.scalar_type()) / static_cast<double>(sequence.sequence_tokens * k);
  result.aux_loss = (share * probs.mean(1)).sum(-1).mean() * static_cast<double>(E);

  // 2. Capacity, per sequence in token order (continuing the cached counts when decoding).
  const int64_t capacity = moe_capacity(config);
  at::Tensor keep = at::ones({B, T, k}, at::kBool);
  if (capacity > 0 || expert_counts) {
    // (B, T, E) assignments at earlier tokens
    at::Tensor earlier = sequence.before.defined() ? sequence.before : chosen.cumsum(1) - chosen;
    const bool cached = expert_counts && expert_counts->defined();
    if (cached) earlier = earlier + expert_counts->unsqueeze(1);
    if (capacity > 0) keep = earlier.gather(-1, expert_index) < capacity;
    if (expert_counts) *expert_counts = cached ? *expert_counts + chosen.sum(1) : chosen.sum(1);
  }
  stats.load = to_vector(chosen.sum(at::IntArrayRef{0, 1}));
  stats.assignments = N * k;
  stats.dropped = stats.assignments - keep.sum().item<int64_t>();
  stats.sequences = B;
  stats.aux_loss = result.aux_loss.item<double>();
  stats.z_loss = result.z_loss.item<double>();

  // 3. Dispatch: kept assignments a = token * k + choice, sorted by (expert, a).
  at::Tensor kept = keep.reshape(-1).nonzero().squeeze(1);  // (S)
  at::Tensor kept_expert = expert_index.reshape(-1).index_select(0, kept);
  at::Tensor order = std::get<1>((kept_expert * (N * k) + kept).sort());
  at::Tensor assignment = kept.index_select(0, order);
  at::Tensor expert_sorted = kept_expert.index_select(0, order);
  at::Tensor token = at::div(assignment, k, "floor");
  at::Tensor counts = at::bincount(expert_sorted, {}, E);      // (E) rows for each global expert
  at::Tensor rows = x.reshape({N, C}).index_select(0, token);  // (S, C)

  at::Tensor from_ranks = ep ? exchange_expert_counts(counts, *ep) : counts.view({1, E});
  const std::vector<int64_t> send_counts = to_vector(counts.view({ep_size, E_l}).sum(1));
  const std::vector<int64_t> recv_counts = to_vector(from_ranks.sum(1));
  for (int64_t rank = 0; rank < ep_size; ++rank) {
    if (rank == ep_rank) continue;
    stats.rows_sent_to_peers += send_counts[rank];
    stats.rows_received_from_peers += recv_counts[rank];
  }
  at::Tensor received = ep ? all_to_all_tokens(rows, send_counts, recv_counts, *ep) : rows;

  // Regroup the received rows (source rank, then local expert) by local expert.
  const std::vector<int64_t> per_source = to_vector(from_ranks.reshape(-1));  // (ep * E_l)
  std::vector<int64_t> source_offset(per_source.size());
  int64_t offset = 0;
  for (size_t i = 0; i < per_source.size(); ++i) {
    source_offset[i] = offset;
    offset += per_source[i];
  }
  std::vector<int64_t> grouped;
  std::vector<int64_t> rows_of_expert(E_l, 0);
  grouped.reserve(offset);
  for (int64_t e = 0; e < E_l; ++e) {
    for (int64_t source = 0; source < ep_size; ++source) {
      const size_t i = source * E_l + e;
      for (int64_t r = 0; r < per_source[i]; ++r) grouped.push_back(source_offset[i] + r);
      rows_of_expert[e] += per_source[i];
    }
  }
  at::Tensor grouped_index = at::tensor(grouped, at::kLong);
  at::Tensor expert_input = received.index_select(0, grouped_index);
  std::vector<at::Tensor> pieces;
  int64_t start = 0;
  for (int64_t e = 0; e < E_l; ++e) {  // every expert runs, with no rows too: defined grads
    pieces.push_back(expert_ffn(expert_input.narrow(0, start, rows_of_expert[e]), weights.fc[e],
                                weights.out[e], moe.activation));
    start += rows_of_expert[e];
  }
  at::Tensor inverse =
      at::empty_like(grouped_index).scatter_(0, grouped_index, at::arange(offset, at::kLong));
  at::Tensor expert_output = at::cat(pieces, 0).index_select(0, inverse);  // arrival order

  // 4. Combine.
  at::Tensor returned =
      ep ? all_to_all_tokens(expert_output, recv_counts, send_counts, *ep) : expert_output;
  at::Tensor weight = gate.reshape(-1).index_select(0, assignment).to(x.scalar_type());
  result.y = at::zeros({N, C}, x.options())
                 .index_add(0, token, returned * weight.unsqueeze(1))
                 .view({B, T, C});
  return result;
}

}  // namespace strata
