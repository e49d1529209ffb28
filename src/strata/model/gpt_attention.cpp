// The GPT's attention: one path for every forward. The projections (and their biases), the
// rotary positions and the output projection are shared; the call's ForwardContext decides
// only where keys and values come from and go to: nowhere (whole sequences), generation's
// KVCache, or serving's paged pool. Shapes as in gpt.cpp.
#include <ATen/core/grad_mode.h>

#include <cmath>
#include <limits>
#include <numeric>

#include "strata/core/error.h"
#include "strata/core/precision.h"
#include "strata/kernels/attention.h"
#include "strata/kernels/decode_attention.h"
#include "strata/model/gpt.h"
#include "strata/model/recompute.h"
#include "strata/parallel/linear.h"

namespace strata {
namespace {

double attention_scale(const ModelConfig& config) {
  return 1.0 / std::sqrt(static_cast<double>(config.head_dim()));
}

// (heads, T, D) queries of one batch row as the (T, heads, D) rows decode_attention reads.
at::Tensor query_rows(const at::Tensor& q) {
  at::Tensor rows = q.transpose(0, 1);
  return rows.stride(2) == 1 ? rows : rows.contiguous();
}

// Which kv head each of this rank's query heads reads: its own group's, unless every rank
// holds every kv head (tp does not divide them), when its heads start at its first head.
DecodeHeads decode_heads(bool kv_replicated, int64_t first_head, const ModelConfig& config) {
  if (!kv_replicated) return {};
  return {first_head, config.n_heads / config.kv_heads()};
}

}  // namespace

at::Tensor GPT::attention(const at::Tensor& x, const BlockParams& block, int64_t layer,
                          const ForwardContext& context) {
  at::Tensor input = enter_tp(x, context.sequence_parallel);  // (B, T, C) on every tp rank
  const int64_t B = input.size(0), T = input.size(1);
  const int64_t H_l = local_heads_, K_l = local_kv_heads_, D = config_.head_dim();

  // Column-parallel projections: this rank's heads, each with its part of the biases.
  at::Tensor q = plus_bias(strata::linear(input, weight(block.q_weight)), block.q_bias)
                     .view({B, T, H_l, D})
                     .transpose(1, 2);  // (B, H_l, T, D)
  // Keys, then values: unbound rather than narrowed, so the backward stacks their gradients
  // into one (B, T, 2 * K_l * D) tensor once, where each narrow's backward would zero a
  // tensor of that size, copy its half in and add the two.
  const std::vector<at::Tensor> kv = strata::linear(input, weight(block.kv_weight))
                                         .view({B, T, 2, K_l * D})
                                         .unbind(2);  // (B, T, K_l * D) each
  at::Tensor k = plus_bias(kv[0], block.k_bias).view({B, T, K_l, D}).transpose(1, 2);
  at::Tensor v =
      plus_bias(kv[1], block.v_bias).view({B, T, K_l, D}).transpose(1, 2);  // (B, K_l, T, D)
  if (block_.position == PositionEncoding::rope) {
    const at::Tensor positions = positions_of(T, context, false);
    q = rope_.rotate(q, positions);
    k = rope_.rotate(k, positions);
  }
  at::Tensor y;  // (B, H_l, T, D); the blockwise kernel's in (B, T, H_l, D) memory order
  switch (context.kv_view()) {
    case KvView::none:
      y = attend_sequences(q, k, v, layer, context.documents);
      break;
    case KvView::contiguous:
      y = attend_cached(q, k, v, layer, *context.cache);
      break;
    case KvView::paged:
      y = attend_paged(q, k, v, layer, *context.paged);
      break;
  }
  y = y.transpose(1, 2).reshape({B, T, H_l * D});  // a view of the blockwise kernel's output
  // Row-parallel output projection; its bias once, after the reduction.
  at::Tensor out =
      leave_tp(strata::linear(y, weight(block.attn_out_weight)), context.sequence_parallel);
  return plus_bias(out, block.attn_out_bias);
}

at::Tensor GPT::attend_sequences(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
                                 int64_t layer, const at::Tensor& documents) {
  const at::Tensor k_heads = expand_kv(k), v_heads = expand_kv(v);
  if (!recomputes(layer, Recompute::selective) ||
      !selective_recomputes_attention(config_.attention, cp_.comm != nullptr)) {
    return attention_core(q, k_heads, v_heads, 0, documents);
  }
  return recomputed({q, k_heads, v_heads},
                    [this, documents](const std::vector<at::Tensor>& in, bool) {
                      return attention_core(in[0], in[1], in[2], 0, documents);
                    });
}

at::Tensor GPT::attend_cached(const at::Tensor& q, at::Tensor k, at::Tensor v, int64_t layer,
                              KVCache& cache) {
  // The new keys and values join the cached ones; the queries attend to all of them.
  const int64_t past = cache.length;
  if (past > 0) {
    k = at::cat({cache.keys[layer], k}, 2);
    v = at::cat({cache.values[layer], v}, 2);
  }
  cache.keys[layer] = k;
  cache.values[layer] = v;
  const int64_t B = q.size(0), H_l = q.size(1), T = q.size(2), D = q.size(3);
  if (T > 1 || cp_.comm || at::GradMode::is_enabled()) {
    return attention_core(q, expand_kv(k), expand_kv(v), past);
  }
  // A decode step: each batch row's one query against its cache, as serving decodes (the
  // kernel has no backward; a differentiable call takes the attention kernel above).
  std::vector<int64_t> positions(k.size(2));
  std::iota(positions.begin(), positions.end(), 0);
  const std::vector<DecodeQuery> query = {{0, positions.data(), k.size(2)}};
  const DecodeHeads heads = decode_heads(kv_replicated_, tp_rank_ * local_heads_, config_);
  at::Tensor out = at::empty({B, 1, H_l, D}, q.options());
  for (int64_t b = 0; b < B; ++b) {
    at::Tensor out_b = out[b];
    decode_attention(query_rows(q[b]), k[b].transpose(0, 1), v[b].transpose(0, 1), query,
                     attention_scale(config_), out_b, heads);
  }
  return out.transpose(1, 2);
}

at::Tensor GPT::attend_paged(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
                             int64_t layer, const PagedBatch& batch) {
  // The new keys and values go to their slots first, so each sequence then reads its whole
  // context (earlier steps and this one) from the pool, and attends as a cache would: the
  // decoding sequences (one new row each) all in one call of the decode kernel, reading their
  // slots in place; a prefill chunk through the attention kernel over its gathered context.
  at::Tensor& keys = batch.cache->keys[layer];  // (slots, K_l, D)
  at::Tensor& values = batch.cache->values[layer];
  keys.index_copy_(0, batch.write_slots, k[0].transpose(0, 1));
  values.index_copy_(0, batch.write_slots, v[0].transpose(0, 1));
  const at::Tensor q_rows = query_rows(q[0]);  // (N, H_l, D)
  at::Tensor out = at::empty(q_rows.sizes(), q.options());
  std::vector<DecodeQuery> decoding;
  for (const PagedBatch::Sequence& sequence : batch.sequences) {
    const at::Tensor& slots = sequence.context_slots;
    if (sequence.rows == 1) {
      decoding.push_back({sequence.first_row, slots.data_ptr<int64_t>(), slots.size(0)});
      continue;
    }
    at::Tensor k_s = expand_kv(keys.index_select(0, slots).transpose(0, 1).unsqueeze(0));
    at::Tensor v_s = expand_kv(values.index_select(0, slots).transpose(0, 1).unsqueeze(0));
    at::Tensor q_s = q.narrow(2, sequence.first_row, sequence.rows);
    out.narrow(0, sequence.first_row, sequence.rows)
        .copy_(attention_core(q_s, k_s, v_s, slots.size(0) - sequence.rows)[0].transpose(0, 1));
  }
  decode_attention(q_rows, keys, values, decoding, attention_scale(config_), out,
                   decode_heads(kv_replicated_, tp_rank_ * local_heads_, config_));
  return out.unsqueeze(0).transpose(1, 2);  // (1, H_l, N, D)
}

at::Tensor GPT::expand_kv(const at::Tensor& kv) const {
  // Each key/value head serves H / K query heads. With replicated kv heads, expand all of them
  // and keep the ones this rank's query heads use; the blockwise kernel reads a shared kv head
  // in place otherwise, eager attention expands them.
  const int64_t group = config_.n_heads / config_.kv_heads();
  const bool blockwise = config_.attention == AttentionKernel::blockwise;
  if (!kv_replicated_ && (group == 1 || blockwise)) return kv;
  at::Tensor expanded = kv.repeat_interleave(group, 1);
  return kv_replicated_ ? expanded.narrow(1, tp_rank_ * local_heads_, local_heads_) : expanded;
}

at::Tensor GPT::attention_core(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
                               int64_t past, const at::Tensor& documents) {
  const double scale = attention_scale(config_);
  if (cp_.comm) return context_parallel_attention(q, k, v, scale, cp_, documents);
  if (config_.attention == AttentionKernel::blockwise) {
    return blockwise_attention(q, k, v, scale, AttentionPositions{past, 0},
                               AttentionDocuments{documents, documents});
  }
  // Eager: products in the model's dtype (float16 on CPU through float32), softmax in float32.
  const int64_t T = q.size(2);
  const at::Tensor qc = computable(q), kc = computable(k), vc = computable(v);
  auto scores = at::matmul(qc, kc.transpose(-2, -1)) * scale;
  at::Tensor hidden = causal_mask(T, past + T);  // (T, T), true = hidden
  if (documents.defined()) {                     // and keys of other documents: (B, 1, T, T)
    hidden = hidden.logical_or(documents.unsqueeze(2) != documents.unsqueeze(1)).unsqueeze(1);
  }
  scores = scores.masked_fill(hidden, -std::numeric_limits<double>::infinity());
  auto probs = at::softmax(scores, -1, at::promote_types(scores.scalar_type(), at::kFloat));
  return at::matmul(probs.to(vc.scalar_type()), vc).to(q.scalar_type());
}

const at::Tensor& GPT::causal_mask(int64_t query_len, int64_t key_len) {
  auto key = std::make_pair(query_len, key_len);
  auto found = causal_masks_.find(key);
  if (found != causal_masks_.end()) return found->second;
  // Query i sits at position key_len - query_len + i and may see keys up to that position.
  auto mask = at::ones({query_len, key_len}, at::kBool).triu(key_len - query_len + 1);
  return causal_masks_.emplace(key, mask).first->second;
}

}  // namespace strata
