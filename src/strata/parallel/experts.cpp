// The expert-parallel all-to-all as an autograd function. The Comm and the counts travel
// through the autograd context as IValues; the Comm outlives every graph.
#include "strata/parallel/experts.h"

#include <torch/csrc/autograd/custom_function.h>

#include <numeric>

#include "strata/core/error.h"
#include "strata/dist/comm.h"

namespace strata {
namespace {

using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

at::Tensor exchanged(const at::Tensor& rows, const std::vector<int64_t>& send_counts,
                     const std::vector<int64_t>& recv_counts, Comm& comm) {
  const int64_t received = std::accumulate(recv_counts.begin(), recv_counts.end(), int64_t{0});
  auto shape = rows.sizes().vec();
  shape[0] = received;
  at::Tensor out = at::empty(shape, rows.options());
  comm.all_to_all_v(out, rows.contiguous(), send_counts, recv_counts);
  return out;
}

struct AllToAllTokens : torch::autograd::Function<AllToAllTokens> {
  static at::Tensor forward(AutogradContext* ctx, const at::Tensor& rows,
                            std::vector<int64_t> send_counts, std::vector<int64_t> recv_counts,
                            Comm* comm) {
    ctx->saved_data["comm"] = static_cast<int64_t>(reinterpret_cast<intptr_t>(comm));
    ctx->saved_data["send"] = send_counts;
    ctx->saved_data["recv"] = recv_counts;
    return exchanged(rows, send_counts, recv_counts, *comm);
  }
  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    Comm& comm = *reinterpret_cast<Comm*>(static_cast<intptr_t>(ctx->saved_data["comm"].toInt()));
    const std::vector<int64_t> send = ctx->saved_data["send"].toIntVector();
    const std::vector<int64_t> recv = ctx->saved_data["recv"].toIntVector();
    return {exchanged(grads[0], recv, send, comm), at::Tensor(), at::Tensor(), at::Tensor()};
  }
};

}  // namespace

at::Tensor all_to_all_tokens(const at::Tensor& rows, const std::vector<int64_t>& send_counts,
                             const std::vector<int64_t>& recv_counts, Comm& ep) {
  STRATA_CHECK(static_cast<int>(send_counts.size()) == ep.size() &&
                   static_cast<int>(recv_counts.size()) == ep.size(),
               "counts for ", send_counts.size(), " and ", recv_counts.size(),
               " ranks in an ep group of ", ep.size());
  if (ep.size() == 1) return rows;
  return AllToAllTokens::apply(rows, send_counts, recv_counts, &ep);
}

at::Tensor exchange_expert_counts(const at::Tensor& counts, Comm& ep) {
  STRATA_CHECK(
      counts.scalar_type() == at::kLong && counts.dim() == 1 && counts.size(0) % ep.size() == 0,
      "expert counts must be int64 (ep * experts_per_rank)");
  const int64_t per_rank = counts.size(0) / ep.size();
  at::Tensor received = at::empty_like(counts);
  if (ep.size() == 1) {
    received.copy_(counts);
  } else {
    ep.all_to_all(received, counts.contiguous());
  }
  return received.view({ep.size(), per_rank});
}

}  // namespace strata
