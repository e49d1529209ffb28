// Context-parallel attention: the three exchanges of context_parallel.h. Shapes: B batch, H query
// heads, K key/value heads, D head_dim, n = cp ranks, T_l = T / n tokens per rank in two chunks
// of c = T / (2n); "rank order" lists rank 0's chunks, then rank 1's, ...; "natural order" is
// the sequence's own.
#include "strata/parallel/context_parallel.h"

#include <optional>
#include <utility>
#include <vector>

#include "strata/core/error.h"
#include "strata/dist/comm.h"
#include "strata/dist/trace.h"
#include "strata/kernels/attention.h"
#include "strata/parallel/autograd_comm.h"
#include "strata/parallel/regions.h"

namespace strata {

std::array<int64_t, 2> context_chunks(int64_t rank, int64_t size) {
  return {rank, 2 * size - 1 - rank};
}

namespace {

// Appends rank `rank`'s two chunks of the sequence x holds along `dim`.
void append_chunks(std::vector<at::Tensor>& out, const at::Tensor& x, int64_t rank, int64_t size,
                   int64_t dim) {
  STRATA_CHECK(x.size(dim) % (2 * size) == 0, "a sequence of ", x.size(dim),
               " tokens is not split in 2 * ", size, " chunks");
  const int64_t c = x.size(dim) / (2 * size);
  for (int64_t chunk : context_chunks(rank, size)) out.push_back(x.narrow(dim, chunk * c, c));
}

// Every rank's chunks in rank order: context_unshard's inverse.
at::Tensor natural_to_rank_order(const at::Tensor& x, int64_t n, int64_t dim) {
  std::vector<at::Tensor> chunks;
  for (int64_t rank = 0; rank < n; ++rank) append_chunks(chunks, x, rank, n, dim);
  return at::cat(chunks, dim);
}

}  // namespace

at::Tensor context_positions(int64_t seq_len, int64_t rank, int64_t size) {
  return context_shard(at::arange(seq_len, at::kLong), rank, size, 0);
}

at::Tensor context_shard(const at::Tensor& x, int64_t rank, int64_t size, int64_t dim) {
  std::vector<at::Tensor> chunks;
  append_chunks(chunks, x, rank, size, dim);
  return at::cat(chunks, dim);
}

at::Tensor context_unshard(const at::Tensor& x, int64_t size, int64_t dim) {
  const int64_t c = x.size(dim) / (2 * size);
  std::vector<at::Tensor> chunks(static_cast<size_t>(2 * size));
  for (int64_t rank = 0; rank < size; ++rank) {
    const auto global = context_chunks(rank, size);
    for (int64_t i = 0; i < 2; ++i) chunks[global[i]] = x.narrow(dim, (2 * rank + i) * c, c);
  }
  return at::cat(chunks, dim);
}

namespace {

using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

// ---- packed documents --------------------------------------------------------------------

// The document ids (B, T) of the whole rows, in natural order, from each rank's (B, T_l): one
// small all-gather per attention call, after which every rank can tell which of its blocks
// share a document. Undefined without documents.
at::Tensor whole_row_documents(const at::Tensor& documents, Comm& cp) {
  if (!documents.defined()) return {};
  const int64_t n = cp.size();
  const at::Tensor mine = documents.transpose(0, 1).contiguous();  // (T_l, B)
  at::Tensor all = at::empty({n * mine.size(0), mine.size(1)}, mine.options());
  cp.all_gather(all, mine);
  return context_unshard(all.transpose(0, 1), n, 1);
}

// The ids of the c tokens from `first` on, or undefined (no documents).
at::Tensor documents_from(const at::Tensor& row_documents, int64_t first, int64_t c) {
  return row_documents.defined() ? row_documents.narrow(1, first, c) : at::Tensor();
}

// ---- all-gather (Llama 3) ----------------------------------------------------------------

at::Tensor all_gather_attention(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
                                double scale, Comm& cp, const at::Tensor& row_documents) {
  const int64_t n = cp.size(), B = k.size(0), K = k.size(1), T_l = k.size(2), D = k.size(3);
  const int64_t c = T_l / 2;
  // Keys then values of each token as one (B, T_l, 2 K D) row, gathered along the tokens (the
  // backward reduce-scatters their gradients home), then put in the sequence's order.
  at::Tensor rows = at::cat({k, v}, 1).permute({0, 2, 1, 3}).reshape({B, T_l, 2 * K * D});
  at::Tensor all = context_unshard(gather_from_sequence(rows, cp), n, 1);
  all = all.view({B, n * T_l, 2 * K, D}).permute({0, 2, 1, 3});  // (B, 2K, T, D)
  const at::Tensor keys = all.narrow(1, 0, K), values = all.narrow(1, K, K);
  // Each query chunk attends to the keys up to its own end.
  const auto chunks = context_chunks(cp.rank(), n);
  std::vector<at::Tensor> out;
  for (int64_t i = 0; i < 2; ++i) {
    const int64_t end = (chunks[i] + 1) * c;
    out.push_back(blockwise_attention(
        q.narrow(2, i * c, c), keys.narrow(2, 0, end), values.narrow(2, 0, end), scale,
        AttentionPositions{chunks[i] * c, 0},
        {documents_from(row_documents, chunks[i] * c, c), documents_from(row_documents, 0, end)}));
  }
  return at::cat(out, 2);
}

// ---- all-to-all (DeepSpeed-Ulysses) ------------------------------------------------------

at::Tensor exchanged(const at::Tensor& x, Comm& comm) {
  at::Tensor in = x.contiguous();
  at::Tensor out = at::empty_like(in);
  comm.all_to_all(out, in);
  return out;
}

// (n, ...): row j goes to rank j, row i of the result came from rank i. Its own transpose, so
// the backward is the same exchange.
struct AllToAllRows : torch::autograd::Function<AllToAllRows> {
  static at::Tensor forward(AutogradContext* ctx, const at::Tensor& x, Comm* comm) {
    remember_comm(ctx, *comm);
    return exchanged(x, *comm);
  }
  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    return {exchanged(grads[0], recall_comm(ctx)), at::Tensor()};
  }
};

// (B, N, T_l, D) this rank's tokens of every head -> (B, N / n, T, D) every token of this
// rank's heads (head group r), in natural order.
at::Tensor sequence_to_heads(const at::Tensor& x, Comm& cp) {
  const int64_t n = cp.size(), B = x.size(0), N = x.size(1), T_l = x.size(2), D = x.size(3);
  at::Tensor rows = x.reshape({B, n, N / n, T_l, D}).transpose(0, 1);  // row j: head group j
  at::Tensor got = AllToAllRows::apply(rows, &cp);                     // row j: rank j's tokens
  return context_unshard(got.permute({1, 2, 0, 3, 4}).reshape({B, N / n, n * T_l, D}), n, 2);
}

// The inverse: (B, N / n, T, D) -> (B, N, T_l, D).
at::Tensor heads_to_sequence(const at::Tensor& y, Comm& cp) {
  const int64_t n = cp.size(), B = y.size(0), G = y.size(1), T = y.size(2), D = y.size(3);
  at::Tensor rows =
      natural_to_rank_order(y, n, 2).view({B, G, n, T / n, D}).permute({2, 0, 1, 3, 4});
  at::Tensor got = AllToAllRows::apply(rows, &cp);  // row j: head group j of this rank's tokens
  return got.transpose(0, 1).reshape({B, n * G, T / n, D});
}

at::Tensor all_to_all_attention(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
                                double scale, Comm& cp, const at::Tensor& row_documents) {
  const int64_t n = cp.size(), H = q.size(1), K = k.size(1);
  STRATA_REQUIRE(H % n == 0 && (K % n == 0 || n % K == 0), "all-to-all context parallelism: ", H,
                 " query and ", K, " kv heads per rank do not split over cp = ", n);
  at::Tensor keys = k, values = v;
  if (K % n != 0) {  // fewer kv heads than ranks: each rank gets a copy of the one it needs
    keys = k.repeat_interleave(n / K, 1);
    values = v.repeat_interleave(n / K, 1);
  }
  at::Tensor y =
      blockwise_attention(sequence_to_heads(q, cp), sequence_to_heads(keys, cp),
                          sequence_to_heads(values, cp), scale, {}, {row_documents, row_documents});
  return heads_to_sequence(y, cp);
}

// ---- ring --------------------------------------------------------------------------------

constexpr int kKeysValuesTag = 71, kKeyValueGradsTag = 72;

// Whether any query of chunk `query_chunk` shares a document with a key of the earlier (or
// same) chunk `key_chunk`: ids never decrease along a row, so exactly when, in some row, the
// key chunk's last id reaches the query chunk's first.
bool shares_document(const at::Tensor& row_documents, int64_t query_chunk, int64_t key_chunk,
                     int64_t c) {
  if (!row_documents.defined()) return true;
  return (row_documents.select(1, key_chunk * c + c - 1) >=
          row_documents.select(1, query_chunk * c))
      .any()
      .item<bool>();
}

// One exchange step's blocks: the pairs (query chunk i, key chunk j) of this rank's queries
// and the keys of rank `source`, skipping pairs whose keys all come after the queries and,
// with documents, pairs that share no document (counted in *skipped when given).
template <typename Visit>
void visible_pairs(int64_t rank, int64_t source, int64_t n, int64_t c,
                   const at::Tensor& row_documents, int64_t* skipped, Visit&& visit) {
  const auto queries = context_chunks(rank, n), keys = context_chunks(source, n);
  for (int64_t i = 0; i < 2; ++i) {
    for (int64_t j = 0; j < 2; ++j) {
      if (keys[j] > queries[i]) continue;
      if (!shares_document(row_documents, queries[i], keys[j], c)) {
        if (skipped) ++*skipped;
        continue;
      }
      visit(i, j, AttentionPositions{queries[i] * c, keys[j] * c},
            AttentionDocuments{documents_from(row_documents, queries[i] * c, c),
                               documents_from(row_documents, keys[j] * c, c)});
    }
  }
}

// The whole rows' document ids as the ring's autograd function takes them (an undefined
// tensor argument would count as an input of the graph).
struct RowDocuments {
  at::Tensor ids;  // (B, T) int64 in natural order; undefined without documents
};

// exp(a - b) with exp(-inf - -inf) taken as 0: the weight of a row that saw no key.
at::Tensor share(const at::Tensor& lse, const at::Tensor& total) {
  return at::nan_to_num((lse - total).exp(), 0.0).unsqueeze(-1);
}

// Merges a block's (out, lse) into a query chunk's running result: the softmax over the union
// of their keys. A row may have seen no key yet (lse -inf) when documents mask a block; its
// own chunk's block gives every row at least itself by the end.
void merge(std::optional<AttentionForward>& into, AttentionForward piece) {
  piece.out = piece.out.to(piece.lse.scalar_type());
  if (!into) {
    into = std::move(piece);
    return;
  }
  const at::Tensor lse = at::logaddexp(into->lse, piece.lse);
  into->out = into->out * share(into->lse, lse) + piece.out * share(piece.lse, lse);
  into->lse = lse;
}

// Posts the next hop around the ring: `buffer` to the next rank, `incoming` from the previous.
std::pair<Work, Work> pass_on(Comm& cp, const at::Tensor& buffer, at::Tensor& incoming, int tag) {
  const int n = cp.size(), r = cp.rank();
  Work send = cp.isend(buffer, (r + 1) % n, tag);
  Work receive = cp.irecv(incoming, (r + n - 1) % n, tag);
  return {std::move(send), std::move(receive)};
}

// A trace event for [construction, destruction), when there is a trace.
class RingEvent {
 public:
  RingEvent(Trace* trace, const char* name) {
    if (trace) scope_.emplace(*trace, name, -1);
  }

 private:
  std::optional<Trace::Scope> scope_;
};

struct RingAttention : torch::autograd::Function<RingAttention> {
  static at::Tensor forward(AutogradContext* ctx, const at::Tensor& q, const at::Tensor& k,
                            const at::Tensor& v, double scale, Comm* comm, Trace* trace,
                            const RowDocuments& documents_of_rows, int64_t* skipped) {
    const at::Tensor& row_documents = documents_of_rows.ids;
    Comm& cp = *comm;
    const int64_t n = cp.size(), r = cp.rank(), c = q.size(2) / 2;
    at::Tensor kv = at::stack({k, v}).contiguous();  // (2, B, K, T_l, D): the block that travels
    at::Tensor next = at::empty_like(kv);
    std::array<std::optional<AttentionForward>, 2> result;  // per query chunk
    for (int64_t step = 0; step < n; ++step) {
      std::pair<Work, Work> hop;
      if (step + 1 < n) hop = pass_on(cp, kv, next, kKeysValuesTag);
      {
        RingEvent compute(trace, "cp_ring_compute");
        visible_pairs(
            r, (r + n - step) % n, n, c, row_documents, skipped,
            [&](int64_t i, int64_t j, AttentionPositions at, const AttentionDocuments& documents) {
              merge(result[i],
                    blockwise_attention_forward(q.narrow(2, i * c, c), kv[0].narrow(2, j * c, c),
                                                kv[1].narrow(2, j * c, c), scale, at, documents));
            });
      }
      if (step + 1 < n) {
        RingEvent wait(trace, "cp_ring_wait");
        hop.first.wait();
        hop.second.wait();
        std::swap(kv, next);
      }
    }
    // Merged in float32, returned and saved in q's dtype: the backward reads the output it
    // returned, as the kernel without cp does (its delta = rowsum(dout * out)), and a bf16 run
    // holds 2 bytes per element of it, not a float32 copy besides.
    const at::Tensor out = at::cat({result[0]->out, result[1]->out}, 2).to(q.scalar_type());
    const at::Tensor lse = at::cat({result[0]->lse, result[1]->lse}, 2);
    ctx->save_for_backward({q, k, v, out, lse});
    ctx->saved_data["scale"] = scale;
    ctx->saved_data["trace"] = static_cast<int64_t>(reinterpret_cast<intptr_t>(trace));
    ctx->saved_data["row_documents"] = row_documents;
    remember_comm(ctx, cp);
    return out;
  }

  // Every block's gradients from the final out and lse (blockwise_attention_backward's delta
  // and probabilities are those of the whole row). dQ stays here; each rank's K/V go around
  // the ring again and their dK/dV, accumulated hop by hop, follow them and come home last.
  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    const auto saved = ctx->get_saved_variables();
    const at::Tensor &q = saved[0], &k = saved[1], &v = saved[2], &out = saved[3], &lse = saved[4];
    const double scale = ctx->saved_data["scale"].toDouble();
    Comm& cp = recall_comm(ctx);
    auto* trace = reinterpret_cast<Trace*>(static_cast<intptr_t>(ctx->saved_data["trace"].toInt()));
    const int64_t n = cp.size(), r = cp.rank(), c = q.size(2) / 2;
    const at::Tensor dout = grads[0];
    const at::Tensor row_documents = ctx->saved_data["row_documents"].toTensor();
    const auto accumulate = lse.scalar_type();
    at::Tensor dq = at::zeros(q.sizes(), q.options().dtype(accumulate));
    at::Tensor kv = at::stack({k, v}).contiguous();
    at::Tensor next = at::empty_like(kv);
    std::pair<Work, Work> grads_hop;  // the previous step's dK/dV on their way
    at::Tensor sent, incoming;
    for (int64_t step = 0; step < n; ++step) {
      std::pair<Work, Work> hop;
      if (step + 1 < n) hop = pass_on(cp, kv, next, kKeysValuesTag);
      at::Tensor dkv = at::zeros(kv.sizes(), kv.options().dtype(accumulate));
      std::optional<RingEvent> compute(std::in_place, trace, "cp_ring_compute");
      visible_pairs(
          r, (r + n - step) % n, n, c, row_documents, nullptr,
          [&](int64_t i, int64_t j, AttentionPositions at, const AttentionDocuments& documents) {
            AttentionGradients g = blockwise_attention_backward(
                dout.narrow(2, i * c, c), q.narrow(2, i * c, c), kv[0].narrow(2, j * c, c),
                kv[1].narrow(2, j * c, c), out.narrow(2, i * c, c), lse.narrow(2, i * c, c), scale,
                at, documents);
            dq.narrow(2, i * c, c).add_(g.dq);
            dkv[0].narrow(2, j * c, c).add_(g.dk);
            dkv[1].narrow(2, j * c, c).add_(g.dv);
          });
      compute.reset();
      RingEvent wait(trace, "cp_ring_wait");
      if (step > 0) {  // what the ranks before added to this block's gradients
        grads_hop.first.wait();
        grads_hop.second.wait();
        dkv.add_(incoming);
      }
      // On to the rank that holds this block next; after the last step that is its owner.
      sent = dkv;
      incoming = at::empty_like(dkv);
      grads_hop = pass_on(cp, sent, incoming, kKeyValueGradsTag);
      if (step + 1 < n) {
        hop.first.wait();
        hop.second.wait();
        std::swap(kv, next);
      }
    }
    {
      RingEvent wait(trace, "cp_ring_wait");
      grads_hop.first.wait();
      grads_hop.second.wait();  // incoming: this rank's own dK/dV, from every rank
    }
    return {dq.to(q.scalar_type()),
            incoming[0].to(k.scalar_type()),
            incoming[1].to(v.scalar_type()),
            at::Tensor(),
            at::Tensor(),
            at::Tensor(),
            at::Tensor(),
            at::Tensor()};
  }
};

}  // namespace

at::Tensor context_parallel_attention(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
                                      double scale, const ContextParallel& cp,
                                      const at::Tensor& documents) {
  STRATA_CHECK(cp.comm && q.size(2) % 2 == 0 && k.size(2) == q.size(2),
               "context-parallel attention wants a cp group and two equal chunks of queries and ",
               "keys per rank, got q ", q.sizes(), ", k ", k.sizes());
  const at::Tensor row_documents = whole_row_documents(documents, *cp.comm);
  switch (cp.exchange) {
    case ContextParallelComm::ring:
      return RingAttention::apply(q, k, v, scale, cp.comm, cp.trace, RowDocuments{row_documents},
                                  cp.skipped_blocks);
    case ContextParallelComm::all_gather:
      return all_gather_attention(q, k, v, scale, *cp.comm, row_documents);
    case ContextParallelComm::all_to_all:
      return all_to_all_attention(q, k, v, scale, *cp.comm, row_documents);
  }
  STRATA_CHECK(false, "unknown context-parallel exchange");
}

}  // namespace strata
