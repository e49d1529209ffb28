// GPT forward pass (backward comes from autograd). Shapes: B batch, T tokens, C d_model,
// H query heads, K key/value heads, D head_dim, F d_ff, V vocab; a trailing _l means "this
// tp rank's part" (H_l = H / tp, F_l = F / tp, V_l = padded V / tp). Under sequence
// parallelism the residual stream is (B, T / tp, C).
#include "strata/model/gpt.h"

#include <ATen/core/grad_mode.h>

#include <cmath>
#include <numeric>

#include "strata/core/error.h"
#include "strata/core/precision.h"
#include "strata/dist/comm.h"
#include "strata/kernels/attention.h"
#include "strata/kernels/decode_attention.h"
#include "strata/model/activation.h"
#include "strata/model/recompute.h"
#include "strata/parallel/linear.h"
#include "strata/parallel/regions.h"

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

GPT::GPT(const ModelConfig& config, uint64_t seed, at::ScalarType dtype, TensorParallel tp,
         StageSpec stage, Comm* ep, ContextParallel cp)
    : config_(config),
      seed_(seed),
      dtype_(dtype),
      tp_comm_(tp.comm && tp.comm->size() > 1 ? tp.comm : nullptr),
      sequence_parallel_(tp.sequence_parallel && tp_comm_ != nullptr),
      ep_comm_(ep && ep->size() > 1 ? ep : nullptr),
      cp_{cp.comm && cp.comm->size() > 1 ? cp.comm : nullptr, cp.exchange, cp.trace},
      stage_(stage) {
  if (stage_.num_layers < 0) stage_.num_layers = config.n_layers - stage_.first_layer;
  STRATA_CHECK(stage_.first_layer >= 0 && stage_.first_layer + stage_.num_layers <= config.n_layers,
               "layers [", stage_.first_layer, ", ", stage_.first_layer + stage_.num_layers,
               ") of a ", config.n_layers, "-layer model");
  if (tp_comm_) {
    tp_size_ = tp_comm_->size();
    tp_rank_ = tp_comm_->rank();
  }
  const int64_t C = config.d_model, V = config.vocab_size, T = config.seq_len;
  const int64_t H = config.n_heads, K = config.kv_heads(), D = config.head_dim();
  const int64_t F = config.ff_dim();
  STRATA_REQUIRE(H % tp_size_ == 0, "parallel.tp (", tp_size_, ") must divide model.n_heads (", H,
                 ")");
  STRATA_REQUIRE(F % tp_size_ == 0, "parallel.tp (", tp_size_, ") must divide model.d_ff (", F,
                 ")");
  if (ep_comm_) {
    ep_size_ = ep_comm_->size();
    ep_rank_ = ep_comm_->rank();
  }
  STRATA_REQUIRE(config.moe.num_experts % ep_size_ == 0, "parallel.ep (", ep_size_,
                 ") must divide model.moe.num_experts (", config.moe.num_experts, ")");
  if (cp_.comm) {
    STRATA_REQUIRE(config.attention == AttentionKernel::blockwise,
                   "context parallelism needs model.attention = \"blockwise\"");
    context_positions_ = context_positions(T, cp_.comm->rank(), cp_.comm->size());
  }
  local_heads_ = H / tp_size_;
  kv_replicated_ = K % tp_size_ != 0;
  local_kv_heads_ = kv_replicated_ ? K : K / tp_size_;
  vocab_per_rank_ = (V + tp_size_ - 1) / tp_size_;

  const bool layernorm = config.norm == Norm::layernorm;
  const bool swiglu = config.activation == Activation::swiglu;
  const double std = config.init_std;
  // GPT-2's scaled init for the projections that write into the residual stream.
  const double residual_std = std / std::sqrt(2.0 * config.n_layers);
  // Norm weights see only this rank's tokens under sequence parallelism.
  auto add_norm = [&](const std::string& name, InitKind kind) {
    size_t index = add(name, {C}, kind, 0, false);
    parameters_[index].tp_partial_grad = sequence_parallel_;
    return index;
  };

  // Vocabulary rows are split over tp (padded to a multiple of tp). A last pipeline stage
  // with a tied head holds its own copy of the token embedding.
  if (stage_.first || (stage_.last && config.tie_embeddings)) {
    token_embedding_ = add("embedding.token.weight", {V, C}, InitKind::Normal, std, true, 0);
    parameters_[token_embedding_].pp_tied = config.tie_embeddings && !(stage_.first && stage_.last);
  }
  if (config.pos == PositionEncoding::learned && stage_.first) {
    position_embedding_ = add("embedding.position.weight", {T, C}, InitKind::Normal, std, true);
    parameters_[position_embedding_].tp_partial_grad = sequence_parallel_;
  }
  for (int64_t layer = stage_.first_layer; layer < stage_.first_layer + stage_.num_layers;
       ++layer) {
    const std::string prefix = "blocks." + std::to_string(layer) + ".";
    adding_unit_ = 1 + static_cast<int64_t>(blocks_.size());
    BlockParams block{};
    block.fc_weight = block.fc_out_weight = kNone;
    block.router_weight = block.expert_fc_weight = block.expert_out_weight = kNone;
    block.norm1_weight = add_norm(prefix + "norm1.weight", InitKind::Ones);
    block.norm1_bias = layernorm ? add_norm(prefix + "norm1.bias", InitKind::Zeros) : kNone;
    // Column-parallel: query heads split; keys and values (blocks K*D, K*D) split when tp
    // divides K, else replicated with partial gradients.
    block.q_weight = add(prefix + "attn.q.weight", {H * D, C}, InitKind::Normal, std, true, 0);
    block.kv_weight = add(prefix + "attn.kv.weight", {2 * K * D, C}, InitKind::Normal, std, true,
                          kv_replicated_ ? -1 : 0, {K * D, K * D});
    parameters_[block.kv_weight].tp_partial_grad = kv_replicated_ && tp_comm_ != nullptr;
    // Row-parallel: the input dim (heads) split.
    block.attn_out_weight =
        add(prefix + "attn.out.weight", {C, H * D}, InitKind::Normal, residual_std, true, 1);
    block.norm2_weight = add_norm(prefix + "norm2.weight", InitKind::Ones);
    block.norm2_bias = layernorm ? add_norm(prefix + "norm2.bias", InitKind::Zeros) : kNone;
    if (config.is_moe_layer(layer)) {
      // Router replicated everywhere; experts (E, ...) split over ep, whole over tp. SwiGLU
      // experts fuse gate rows then value rows, as the dense MLP does.
      const int64_t E = config.moe.num_experts;
      const int64_t expert_in = config.moe.activation == Activation::swiglu ? 2 * F : F;
      block.router_weight = add(prefix + "moe.router.weight", {E, C}, InitKind::Normal, std, false);
      block.expert_fc_weight =
          add_experts(prefix + "moe.experts.fc.weight", {E, expert_in, C}, std);
      block.expert_out_weight =
          add_experts(prefix + "moe.experts.out.weight", {E, C, F}, residual_std);
    } else {
      // SwiGLU's up-projection is fused as blocks {F, F}: gate rows, then value rows.
      block.fc_weight =
          swiglu ? add(prefix + "mlp.fc.weight", {2 * F, C}, InitKind::Normal, std, true, 0, {F, F})
                 : add(prefix + "mlp.fc.weight", {F, C}, InitKind::Normal, std, true, 0);
      block.fc_out_weight =
          add(prefix + "mlp.out.weight", {C, F}, InitKind::Normal, residual_std, true, 1);
    }
    blocks_.push_back(block);
  }
  adding_unit_ = kOuterUnit;
  if (stage_.last) {
    final_norm_weight_ = add_norm("final_norm.weight", InitKind::Ones);
    final_norm_bias_ = layernorm ? add_norm("final_norm.bias", InitKind::Zeros) : kNone;
    head_weight_ = config.tie_embeddings
                       ? token_embedding_
                       : add("head.weight", {V, C}, InitKind::Normal, std, true, 0);
  }

  if (config.pos == PositionEncoding::rope) {
    auto inverse_frequency =
        at::pow(config.rope_theta, -at::arange(0, D, 2, at::kDouble) / static_cast<double>(D));
    auto angles = at::outer(at::arange(T, at::kDouble), inverse_frequency);  // (T, D/2)
    rope_cos_ = angles.cos().to(dtype);
    rope_sin_ = angles.sin().to(dtype);
  }
}

size_t GPT::add(const std::string& name, std::vector<int64_t> shape, InitKind kind, double std,
                bool weight_decay, int64_t split_dim, std::vector<int64_t> blocks) {
  ShardSpec spec;
  spec.global_shape = std::move(shape);
  if (split_dim >= 0 && tp_size_ > 1) {
    spec.split_dim = split_dim;
    spec.split_axis = ShardAxis::Tp;
    spec.split_index = tp_rank_;
    spec.split_count = tp_size_;
    spec.split_blocks = std::move(blocks);
  }
  return add_parameter(name, spec, kind, std, weight_decay);
}

size_t GPT::add_parameter(const std::string& name, const ShardSpec& spec, InitKind kind, double std,
                          bool weight_decay) {
  parameters_.push_back(make_parameter(name, spec, kind, std, seed_, dtype_, weight_decay));
  parameter_units_.push_back(adding_unit_);  // the layer unit being built
  return parameters_.size() - 1;
}

size_t GPT::add_experts(const std::string& name, std::vector<int64_t> shape, double std) {
  ShardSpec spec;
  spec.global_shape = std::move(shape);
  spec.split_dim = 0;
  spec.split_axis = ShardAxis::Ep;
  spec.split_index = ep_rank_;
  spec.split_count = ep_size_;
  return add_parameter(name, spec, InitKind::Normal, std, true);
}

Parameter& GPT::parameter(const std::string& name) {
  for (auto& parameter : parameters_) {
    if (parameter.name == name) return parameter;
  }
  STRATA_CHECK(false, "no parameter named ", name);
}

int64_t GPT::num_parameters() const {
  int64_t total = 0;
  for (const auto& parameter : parameters_) total += numel_of(parameter.spec.global_shape);
  return total;
}

at::Tensor GPT::enter_tp(const at::Tensor& x, bool sequence_parallel) {
  if (!tp_comm_) return x;
  return sequence_parallel ? gather_from_sequence(x, *tp_comm_) : copy_to_tp_region(x, *tp_comm_);
}

at::Tensor GPT::leave_tp(const at::Tensor& x, bool sequence_parallel) {
  if (!tp_comm_) return x;
  return sequence_parallel ? reduce_scatter_to_sequence(x, *tp_comm_)
                           : reduce_from_tp_region(x, *tp_comm_);
}

at::Tensor GPT::norm(const at::Tensor& x, size_t weight_index, size_t bias_index) const {
  // In float32 (float64) whatever the model computes in; the result in x's dtype.
  const auto wide = at::promote_types(x.scalar_type(), at::kFloat);
  const at::Tensor xw = x.to(wide), w = weight(weight_index).to(wide);
  at::Tensor y;
  if (bias_index != kNone) {
    y = at::layer_norm(xw, {config_.d_model}, w, weight(bias_index).to(wide), config_.norm_eps);
  } else {
    y = xw * at::rsqrt(xw.pow(2).mean(-1, /*keepdim=*/true) + config_.norm_eps) * w;
  }
  return y.to(x.scalar_type());
}

at::Tensor GPT::token_positions(int64_t T, int64_t past, bool tp_part) const {
  const int64_t first = tp_part ? tp_rank_ * T : 0;
  if (!cp_.comm) return at::arange(past + first, past + first + T, at::kLong);
  STRATA_CHECK(past == 0, "context parallelism runs whole training sequences, not a cache");
  return context_positions_.narrow(0, first, T);
}

at::Tensor GPT::rotate(const at::Tensor& x, const at::Tensor& positions) const {
  // x (B, heads, T, D): rotate the pairs (x[..., i], x[..., i + D/2]) by position * frequency_i.
  const int64_t half = x.size(3) / 2;
  auto cos = rope_cos_.index_select(0, positions);  // (T, D/2)
  auto sin = rope_sin_.index_select(0, positions);
  auto x1 = x.narrow(-1, 0, half), x2 = x.narrow(-1, half, half);
  return at::cat({x1 * cos - x2 * sin, x1 * sin + x2 * cos}, -1);
}

const at::Tensor& GPT::causal_mask(int64_t query_len, int64_t key_len) {
  auto key = std::make_pair(query_len, key_len);
  auto found = causal_masks_.find(key);
  if (found != causal_masks_.end()) return found->second;
  // Query i sits at position key_len - query_len + i and may see keys up to that position.
  auto mask = at::ones({query_len, key_len}, at::kBool).triu(key_len - query_len + 1);
  return causal_masks_.emplace(key, mask).first->second;
}

at::Tensor GPT::attention(const at::Tensor& x, const BlockParams& block, int64_t layer,
                          KVCache* cache, bool sequence_parallel) {
  at::Tensor input = enter_tp(x, sequence_parallel);  // (B, T, C) on every tp rank
  const int64_t B = input.size(0), T = input.size(1);
  const int64_t H_l = local_heads_, K_l = local_kv_heads_, D = config_.head_dim();
  const int64_t past = cache ? cache->length : 0;

  auto q = strata::linear(input, weight(block.q_weight)).view({B, T, H_l, D}).transpose(1, 2);
  auto kv = strata::linear(input, weight(block.kv_weight));                 // (B, T, 2 * K_l * D)
  auto k = kv.narrow(-1, 0, K_l * D).view({B, T, K_l, D}).transpose(1, 2);  // (B, K_l, T, D)
  auto v = kv.narrow(-1, K_l * D, K_l * D).view({B, T, K_l, D}).transpose(1, 2);
  if (config_.pos == PositionEncoding::rope) {
    const at::Tensor positions = paged_ ? paged_->positions : token_positions(T, past, false);
    q = rotate(q, positions);
    k = rotate(k, positions);
  }
  at::Tensor y;  // (B, H_l, T, D)
  if (paged_) {
    y = paged_attention(q, k, v, layer);
  } else {
    if (cache) {
      if (past > 0) {
        k = at::cat({cache->keys[layer], k}, 2);
        v = at::cat({cache->values[layer], v}, 2);
      }
      cache->keys[layer] = k;
      cache->values[layer] = v;
    }
    if (cache && T == 1 && !cp_.comm && !at::GradMode::is_enabled()) {
      // A decode step: each batch row's one query against its cache, as serving decodes (the
      // kernel has no backward; a differentiable call takes the attention kernel below).
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
      y = out.transpose(1, 2);
    } else {
      k = expand_kv(k);
      v = expand_kv(v);
      if (!cache && recomputes(layer, Recompute::selective)) {
        y = recomputed({q, k, v}, [this](const std::vector<at::Tensor>& in, bool) {
          return attention_core(in[0], in[1], in[2], 0);
        });
      } else {
        y = attention_core(q, k, v, past);
      }
    }
  }
  y = y.transpose(1, 2).reshape({B, T, H_l * D});
  return leave_tp(strata::linear(y, weight(block.attn_out_weight)), sequence_parallel);
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

at::Tensor GPT::paged_attention(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
                                int64_t layer) {
  // The new keys and values go to their slots first, so each sequence then reads its whole
  // context (earlier steps and this one) from the pool, and attends as a cache would: the
  // decoding sequences (one new row each) all in one call of the decode kernel, reading their
  // slots in place; a prefill chunk through the attention kernel over its gathered context.
  at::Tensor& keys = paged_->cache->keys[layer];  // (slots, K_l, D)
  at::Tensor& values = paged_->cache->values[layer];
  keys.index_copy_(0, paged_->write_slots, k[0].transpose(0, 1));
  values.index_copy_(0, paged_->write_slots, v[0].transpose(0, 1));
  const at::Tensor q_rows = query_rows(q[0]);  // (N, H_l, D)
  at::Tensor out = at::empty(q_rows.sizes(), q.options());
  std::vector<DecodeQuery> decoding;
  for (const PagedBatch::Sequence& sequence : paged_->sequences) {
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

at::Tensor GPT::attention_core(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
                               int64_t past) {
  const double scale = attention_scale(config_);
  if (cp_.comm) return context_parallel_attention(q, k, v, scale, cp_);
  if (config_.attention == AttentionKernel::blockwise) {
    return blockwise_attention(q, k, v, scale, AttentionPositions{past, 0});
  }
  // Eager: products in the model's dtype (float16 on CPU through float32), softmax in float32.
  const int64_t T = q.size(2);
  const at::Tensor qc = computable(q), kc = computable(k), vc = computable(v);
  auto scores = at::matmul(qc, kc.transpose(-2, -1)) * scale;
  scores = scores.masked_fill(causal_mask(T, past + T), -std::numeric_limits<double>::infinity());
  auto probs = at::softmax(scores, -1, at::promote_types(scores.scalar_type(), at::kFloat));
  return at::matmul(probs.to(vc.scalar_type()), vc).to(q.scalar_type());
}

bool GPT::recomputes(int64_t block, Recompute mode) const {
  return recompute_ == mode && (recompute_layers_ == 0 || block < recompute_layers_);
}

void GPT::set_recompute(Recompute mode, int64_t layers) {
  STRATA_CHECK(layers >= 0, "recompute layers ", layers);
  recompute_ = mode;
  recompute_layers_ = layers;
}

at::Tensor GPT::mlp(const at::Tensor& x, const BlockParams& block, bool sequence_parallel) {
  auto h = strata::linear(enter_tp(x, sequence_parallel), weight(block.fc_weight));
  h = ffn_activation(h, config_.activation);
  return leave_tp(strata::linear(h, weight(block.fc_out_weight)), sequence_parallel);
}

at::Tensor GPT::moe(const at::Tensor& x, const BlockParams& block, int64_t layer, KVCache* cache,
                    bool sequence_parallel) {
  // Replicated over tp: each tp rank routes the whole sequence (capacity is per sequence).
  at::Tensor input = sequence_parallel ? gather_sequence_to_replica(x, *tp_comm_) : x;
  if (cache && cache->expert_counts.empty()) cache->expert_counts.resize(config_.n_layers);
  MoeOutput out =
      moe_forward(input,
                  {weight(block.router_weight), weight(block.expert_fc_weight),
                   weight(block.expert_out_weight)},
                  config_, ep_comm_, cache ? &cache->expert_counts[layer] : nullptr, cp_.comm);
  if (!cache && !recomputing_ && !paged_) {
    out.stats.layer = stage_.first_layer + layer;
    moe_stats_.push_back(std::move(out.stats));
  }
  at::Tensor y = sequence_parallel ? split_to_sequence(out.y, *tp_comm_) : out.y;
  const MoeConfig& moe_config = config_.moe;
  if (at::GradMode::is_enabled() && (moe_config.aux_loss_coef > 0 || moe_config.z_loss_coef > 0)) {
    y = attach_auxiliary_loss(
        y, moe_config.aux_loss_coef * out.aux_loss + moe_config.z_loss_coef * out.z_loss,
        objective_scale_);
  }
  return y;
}

std::vector<MoeLayerStats> GPT::take_moe_stats() {
  std::vector<MoeLayerStats> stats;
  stats.swap(moe_stats_);
  return stats;
}

at::Tensor GPT::embed(const at::Tensor& tokens, int64_t past, bool sequence_parallel) {
  // Vocab-parallel lookup: rows outside this rank's range contribute zeros, and the partial
  // embeddings are summed over tp (reduce-scattered along tokens under sequence parallelism).
  at::Tensor x;
  if (tp_comm_) {
    at::Tensor local_ids = tokens - tp_rank_ * vocab_per_rank_;
    at::Tensor outside = (local_ids < 0).logical_or(local_ids >= vocab_per_rank_);
    x = at::embedding(weight(token_embedding_), local_ids.masked_fill(outside, 0));
    x = leave_tp(x.masked_fill(outside.unsqueeze(-1), 0), sequence_parallel);
  } else {
    x = at::embedding(weight(token_embedding_), tokens);  // (B, T, C)
  }
  if (position_embedding_ != kNone) {
    x = x + weight(position_embedding_)
                .index_select(0, paged_ ? paged_->positions
                                        : token_positions(x.size(1), past, sequence_parallel));
  }
  return x;
}

at::Tensor GPT::hidden(const at::Tensor& tokens, KVCache* cache, bool sequence_parallel) {
  const int64_t T = tokens.size(1);
  const int64_t past = cache ? cache->length : 0;
  STRATA_REQUIRE(past + T <= config_.seq_len, "sequence of ", past + T,
                 " tokens exceeds model.seq_len (", config_.seq_len, ")");
  if (cache && cache->keys.empty()) {
    cache->keys.resize(config_.n_layers);
    cache->values.resize(config_.n_layers);
  }
  at::Tensor x = blocks_forward(embed(tokens, past, sequence_parallel), cache, sequence_parallel);
  if (cache) cache->length += T;
  return enter_tp(norm(x, final_norm_weight_, final_norm_bias_), sequence_parallel);
}

at::Tensor GPT::block_forward(at::Tensor x, size_t layer, KVCache* cache, bool sequence_parallel) {
  const auto& block = blocks_[layer];
  x = x + attention(norm(x, block.norm1_weight, block.norm1_bias), block,
                    static_cast<int64_t>(layer), cache, sequence_parallel);
  at::Tensor normed = norm(x, block.norm2_weight, block.norm2_bias);
  return x + (block.router_weight != kNone
                  ? moe(normed, block, static_cast<int64_t>(layer), cache, sequence_parallel)
                  : mlp(normed, block, sequence_parallel));
}

at::Tensor GPT::blocks_forward(at::Tensor x, KVCache* cache, bool sequence_parallel) {
  for (size_t index = 0; index < blocks_.size(); ++index) {
    const int64_t unit = 1 + static_cast<int64_t>(index);
    at::Tensor input = enter(unit, x), output;
    if (!cache && recomputes(static_cast<int64_t>(index), Recompute::full)) {
      // The block runs again in its backward: with this forward's objective scale, and
      // without recording its MoE statistics a second time.
      const double scale = objective_scale_;
      output = recomputed({input}, [this, index, sequence_parallel, scale](
                                       const std::vector<at::Tensor>& in, bool recomputing) {
        const double forward_scale = objective_scale_;
        objective_scale_ = scale;
        recomputing_ = recomputing;
        at::Tensor y = block_forward(in[0], index, nullptr, sequence_parallel);
        objective_scale_ = forward_scale;
        recomputing_ = false;
        return y;
      });
    } else {
      output = block_forward(input, index, cache, sequence_parallel);
    }
    x = leave(unit, output);
  }
  return x;
}

UnitOrder GPT::unit_order() const {
  UnitOrder order;
  const int64_t blocks = num_units() - 1;
  for (int64_t unit = 0; unit <= blocks; ++unit) order.forward.push_back(unit);
  order.backward.push_back(kOuterUnit);
  for (int64_t unit = blocks; unit >= 1; --unit) {
    order.backward.push_back(unit);
    order.gradients_complete.push_back(unit);
  }
  order.gradients_complete.push_back(kOuterUnit);
  return order;
}

at::Tensor GPT::logits(const at::Tensor& tokens, KVCache* cache) {
  STRATA_CHECK(stage_.first && stage_.last && !cp_.comm,
               "logits() needs the whole model and whole sequences on this rank");
  // Generation runs without sequence parallelism (one new token cannot be split); the
  // weights are the same either way.
  return vocab_logits(hidden(tokens, cache, false));
}

at::Tensor GPT::vocab_logits(const at::Tensor& normed) {
  at::Tensor local = strata::linear(normed, weight(head_weight_));
  if (!tp_comm_) return local;                                 // (..., V)
  at::Tensor vocab_first = local.movedim(-1, 0).contiguous();  // (V_l, ...)
  auto shape = vocab_first.sizes().vec();
  shape[0] *= tp_size_;
  at::Tensor all = at::empty(shape, local.options());
  tp_comm_->all_gather(all, vocab_first);
  return all.narrow(0, 0, config_.vocab_size).movedim(0, -1);
}

at::Tensor GPT::forward_paged(const at::Tensor& input, const PagedBatch& batch,
                              const at::Tensor& sample_rows) {
  STRATA_CHECK(!cp_.comm, "forward_paged() runs whole sequences, not context-parallel chunks");
  STRATA_CHECK(batch.cache && batch.cache->keys.size() == blocks_.size(),
               "the paged cache must hold every layer of this chunk");
  at::NoGradGuard no_grad;
  // Generation runs without sequence parallelism (one new token cannot be split).
  struct Reset {
    const PagedBatch*& paged;
    ~Reset() { paged = nullptr; }
  } reset{paged_};
  paged_ = &batch;
  at::Tensor x = stage_.first ? embed(input, 0, false) : input;
  x = blocks_forward(x, nullptr, false);
  if (!stage_.last) return x;
  x = x.select(0, 0).index_select(0, sample_rows);  // (R, C)
  return vocab_logits(norm(x, final_norm_weight_, final_norm_bias_));
}

at::Tensor GPT::loss(const at::Tensor& tokens, const at::Tensor& targets) {
  STRATA_CHECK(stage_.first && stage_.last, "loss() needs the whole model on this rank");
  return forward_stage(tokens, targets);
}

at::Tensor GPT::forward_stage(const at::Tensor& input, const at::Tensor& targets,
                              double objective_scale) {
  objective_scale_ = objective_scale;
  at::Tensor x = enter(kOuterUnit, input);
  if (stage_.first) x = embed(x, 0, sequence_parallel_);
  x = blocks_forward(x, nullptr, sequence_parallel_);
  return leave(kOuterUnit, stage_.last ? head_loss(x, targets) : x);
}

at::Tensor GPT::head_loss(const at::Tensor& last_hidden, const at::Tensor& targets) {
  at::Tensor x =
      enter_tp(norm(last_hidden, final_norm_weight_, final_norm_bias_), sequence_parallel_);
  // The loss in float32 (float64) whatever the model computes in.
  at::Tensor local_logits = strata::linear(x, weight(head_weight_));  // (B, T, V_l)
  local_logits = local_logits.to(at::promote_types(local_logits.scalar_type(), at::kFloat));
  if (!tp_comm_) {
    return at::cross_entropy_loss(local_logits.view({-1, config_.vocab_size}), targets.reshape(-1));
  }
  return vocab_parallel_cross_entropy(local_logits.view({-1, vocab_per_rank_}), targets.reshape(-1),
                                      tp_rank_ * vocab_per_rank_, config_.vocab_size, *tp_comm_);
}

}  // namespace strata
