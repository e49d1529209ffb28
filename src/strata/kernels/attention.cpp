// Blockwise causal attention: forward with an online softmax, backward by recomputation.
//
// Forward, for one (batch, head, query tile) task: running row maxima m, row sums l and an
// unnormalized output o start at (-inf, 0, 0); each visible key tile j gives scores
// s = q k_j^T * scale (future keys set to -inf), then m' = max(m, rowmax(s)),
// p = exp(s - m'), l = l e^(m - m') + rowsum(p), o = o e^(m - m') + p v_j, m = m'. At the end
// out = o / l and lse = m + log(l).
//
// Backward (Dao 2023, Algorithm 2), with delta = rowsum(dout * out): a tile's probabilities
// are p = exp(s - lse), dv_j += p^T dout, dp = dout v_j^T, ds = p * (dp - delta),
// dq += ds k_j * scale, dk_j += ds^T q * scale. dq is summed over key tiles and dk, dv over
// query tiles and the query heads sharing a kv head, so the backward runs one task per
// (batch, kv head), which owns all of those rows: B * K tasks, enough for a few cores.
#include "strata/kernels/attention.h"

#include <ATen/Parallel.h>
#include <torch/csrc/autograd/custom_function.h>

#include <algorithm>
#include <limits>

#include "strata/core/error.h"

namespace strata {
namespace {

constexpr double kInf = std::numeric_limits<double>::infinity();

struct Problem {
  int64_t B, H, K, group, Tq, Tk, D;
  AttentionPositions positions;
  at::ScalarType accumulate;  // float64 for float64 inputs, else float32
  int64_t query_tiles;
};

int64_t tiles(int64_t rows, int64_t tile) { return (rows + tile - 1) / tile; }

Problem describe(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
                 std::optional<AttentionPositions> positions) {
  STRATA_CHECK(q.dim() == 4 && k.dim() == 4 && v.dim() == 4, "attention wants (B, heads, T, D) ",
               "tensors, got q ", q.sizes(), ", k ", k.sizes(), ", v ", v.sizes());
  Problem p;
  p.B = q.size(0);
  p.H = q.size(1);
  p.Tq = q.size(2);
  p.D = q.size(3);
  p.K = k.size(1);
  p.Tk = k.size(2);
  STRATA_CHECK(
      k.sizes() == v.sizes() && k.size(0) == p.B && k.size(3) == p.D && p.K >= 1 && p.H % p.K == 0,
      "attention shapes: q ", q.sizes(), ", k ", k.sizes(), ", v ", v.sizes());
  STRATA_CHECK(q.scalar_type() == k.scalar_type() && k.scalar_type() == v.scalar_type(),
               "attention: q, k and v differ in dtype");
  p.group = p.H / p.K;
  p.positions = positions ? *positions : AttentionPositions{p.Tk - p.Tq, 0};
  p.accumulate = q.scalar_type() == at::kDouble ? at::kDouble : at::kFloat;
  p.query_tiles = tiles(p.Tq, kAttentionQueryTile);
  return p;
}

// How many leading keys query row `row` sees.
int64_t keys_seen_by(const Problem& p, int64_t row) {
  return std::clamp<int64_t>(p.positions.query + row - p.positions.key + 1, 0, p.Tk);
}

// Sets to -inf, in place, the scores of query rows [r0, r0 + rows) against key rows
// [j0, j0 + cols) whose key comes after the query: key j0 + c is after query r0 + r when
// c - r > d with d = (query + r0) - (key + j0).
void mask_future(at::Tensor& scores, const Problem& p, int64_t r0, int64_t j0) {
  const int64_t rows = scores.size(0), cols = scores.size(1);
  const int64_t d = p.positions.query + r0 - p.positions.key - j0;
  if (cols - 1 <= d) return;  // every key of the tile is visible to every row
  scores.masked_fill_(at::ones({rows, cols}, at::kBool).triu(d + 1), -kInf);
}

at::Tensor accumulating(const at::Tensor& x, at::ScalarType accumulate) {
  return x.to(accumulate).contiguous();
}

}  // namespace

AttentionForward blockwise_attention_forward(const at::Tensor& q, const at::Tensor& k,
                                             const at::Tensor& v, double scale,
                                             std::optional<AttentionPositions> positions) {
  const Problem p = describe(q, k, v, positions);
  // q scaled once, so each tile's product is already the scaled scores.
  const at::Tensor qa = accumulating(q, p.accumulate).mul(scale),
                   ka = accumulating(k, p.accumulate), va = accumulating(v, p.accumulate);
  at::Tensor out = at::empty({p.B, p.H, p.Tq, p.D}, qa.options());
  at::Tensor lse = at::empty({p.B, p.H, p.Tq}, qa.options());
  at::parallel_for(0, p.B * p.H * p.query_tiles, 1, [&](int64_t begin, int64_t end) {
    for (int64_t task = begin; task < end; ++task) {
      const int64_t tile = task % p.query_tiles, b = task / p.query_tiles / p.H,
                    h = task / p.query_tiles % p.H;
      const int64_t r0 = tile * kAttentionQueryTile;
      const int64_t rows = std::min(kAttentionQueryTile, p.Tq - r0);
      const at::Tensor qi = qa[b][h].narrow(0, r0, rows);  // (rows, D)
      const at::Tensor keys = ka[b][h / p.group], values = va[b][h / p.group];
      at::Tensor o = out[b][h].narrow(0, r0, rows);  // (rows, D), unnormalized until the end
      at::Tensor m = at::full({rows}, -kInf, qa.options());
      at::Tensor l = at::zeros({rows}, qa.options());
      o.zero_();
      // Rows see a prefix of the keys: when the tile's first row sees key 0, every row has
      // seen one after the first key tile and its running maximum is finite from then on.
      const bool rows_without_keys = keys_seen_by(p, r0) == 0;
      const int64_t visible = keys_seen_by(p, r0 + rows - 1);
      for (int64_t j0 = 0; j0 < visible; j0 += kAttentionKeyTile) {
        const int64_t cols = std::min(kAttentionKeyTile, visible - j0);
        at::Tensor s = at::mm(qi, keys.narrow(0, j0, cols).t());  // (rows, cols), scaled
        mask_future(s, p, r0, j0);
        at::Tensor m_new = at::maximum(m, at::amax(s, 1));
        // A row that has seen no key yet keeps m = -inf; shifting it by 0 keeps exp finite.
        const at::Tensor shift =
            rows_without_keys ? m_new.masked_fill(at::isneginf(m_new), 0) : m_new;
        const at::Tensor probabilities = s.sub_(shift.unsqueeze(1)).exp_();
        const at::Tensor rescale = m.sub_(shift).exp_();
        l.mul_(rescale).add_(probabilities.sum(1));
        o.mul_(rescale.unsqueeze(1)).addmm_(probabilities, values.narrow(0, j0, cols));
        m = std::move(m_new);
      }
      const at::Tensor seen = l > 0;  // rows that see no key: out 0, lse -inf
      o.div_(l.masked_fill(seen.logical_not(), 1).unsqueeze(1));
      lse[b][h].narrow(0, r0, rows).copy_((m + l.log()).masked_fill(seen.logical_not(), -kInf));
    }
  });
  return {out.to(q.scalar_type()), lse};
}

AttentionGradients blockwise_attention_backward(const at::Tensor& dout, const at::Tensor& q,
                                                const at::Tensor& k, const at::Tensor& v,
                                                const at::Tensor& out, const at::Tensor& lse,
                                                double scale,
                                                std::optional<AttentionPositions> positions) {
  const Problem p = describe(q, k, v, positions);
  // q scaled once: q k^T are the scaled scores, and dk = ds^T (q * scale).
  const at::Tensor qa = accumulating(q, p.accumulate).mul(scale),
                   ka = accumulating(k, p.accumulate), va = accumulating(v, p.accumulate),
                   douta = accumulating(dout, p.accumulate);
  const at::Tensor delta = (douta * out.to(p.accumulate)).sum(-1);  // (B, H, Tq)
  // Rows that saw no key (lse -inf): +inf makes each of their probabilities exp(s - inf) = 0.
  const at::Tensor lse_safe = lse.to(p.accumulate).masked_fill(at::isneginf(lse), kInf);
  at::Tensor dq = at::zeros_like(qa), dk = at::zeros_like(ka), dv = at::zeros_like(va);

  // One task per (batch, kv head): it owns the dq rows of the query heads sharing the kv
  // head and the kv head's dk and dv rows, so no two tasks write the same rows and each tile
  // pair costs five products.
  at::parallel_for(0, p.B * p.K, 1, [&](int64_t begin, int64_t end) {
    for (int64_t task = begin; task < end; ++task) {
      const int64_t b = task / p.K, g = task % p.K;
      const at::Tensor keys = ka[b][g], values = va[b][g];
      at::Tensor dkg = dk[b][g], dvg = dv[b][g];
      for (int64_t h = g * p.group; h < (g + 1) * p.group; ++h) {
        for (int64_t r0 = 0; r0 < p.Tq; r0 += kAttentionQueryTile) {
          const int64_t rows = std::min(kAttentionQueryTile, p.Tq - r0);
          const at::Tensor qi = qa[b][h].narrow(0, r0, rows),
                           douti = douta[b][h].narrow(0, r0, rows);
          const at::Tensor lse_i = lse_safe[b][h].narrow(0, r0, rows).unsqueeze(1);
          const at::Tensor delta_i = delta[b][h].narrow(0, r0, rows).unsqueeze(1);
          at::Tensor dqi = dq[b][h].narrow(0, r0, rows);
          const int64_t visible = keys_seen_by(p, r0 + rows - 1);
          for (int64_t j0 = 0; j0 < visible; j0 += kAttentionKeyTile) {
            const int64_t cols = std::min(kAttentionKeyTile, visible - j0);
            const at::Tensor kj = keys.narrow(0, j0, cols), vj = values.narrow(0, j0, cols);
            at::Tensor probs = at::mm(qi, kj.t());  // scaled scores (rows, cols)
            mask_future(probs, p, r0, j0);
            probs.sub_(lse_i).exp_();
            dvg.narrow(0, j0, cols).addmm_(probs.t(), douti);
            at::Tensor ds = probs.mul_(at::mm(douti, vj.t()).sub_(delta_i));  // in place of p
            dqi.addmm_(ds, kj, 1.0, scale);
            dkg.narrow(0, j0, cols).addmm_(ds.t(), qi);
          }
        }
      }
    }
  });
  return {dq.to(q.scalar_type()), dk.to(k.scalar_type()), dv.to(v.scalar_type())};
}

namespace {

struct BlockwiseAttentionFunction : torch::autograd::Function<BlockwiseAttentionFunction> {
  static at::Tensor forward(torch::autograd::AutogradContext* ctx, const at::Tensor& q,
                            const at::Tensor& k, const at::Tensor& v, double scale,
                            int64_t query_position, int64_t key_position) {
    AttentionForward result = blockwise_attention_forward(
        q, k, v, scale, AttentionPositions{query_position, key_position});
    ctx->save_for_backward({q, k, v, result.out, result.lse});
    ctx->saved_data["scale"] = scale;
    ctx->saved_data["query_position"] = query_position;
    ctx->saved_data["key_position"] = key_position;
    return result.out;
  }
  static torch::autograd::variable_list backward(torch::autograd::AutogradContext* ctx,
                                                 torch::autograd::variable_list grads) {
    const auto saved = ctx->get_saved_variables();
    const AttentionPositions positions{ctx->saved_data["query_position"].toInt(),
                                       ctx->saved_data["key_position"].toInt()};
    AttentionGradients g =
        blockwise_attention_backward(grads[0], saved[0], saved[1], saved[2], saved[3], saved[4],
                                     ctx->saved_data["scale"].toDouble(), positions);
    return {g.dq, g.dk, g.dv, at::Tensor(), at::Tensor(), at::Tensor()};
  }
};

}  // namespace

at::Tensor blockwise_attention(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
                               double scale, std::optional<AttentionPositions> positions) {
  const AttentionPositions at_end{k.size(2) - q.size(2), 0};
  const AttentionPositions where = positions ? *positions : at_end;
  return BlockwiseAttentionFunction::apply(q, k, v, scale, where.query, where.key);
}

}  // namespace strata
