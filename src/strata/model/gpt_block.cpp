// The GPT's blocks: the embedding, the residual stream through the blocks (with activation
// recomputation), the norms, the dense MLP and the mixture-of-experts layer, each reading the
// call's ForwardContext. Shapes as in gpt.cpp.
#include <ATen/core/grad_mode.h>

#include "strata/core/error.h"
#include "strata/dist/comm.h"
#include "strata/kernels/norm_rows.h"
#include "strata/model/activation.h"
#include "strata/model/gpt.h"
#include "strata/model/recompute.h"
#include "strata/parallel/linear.h"
#include "strata/parallel/regions.h"

namespace strata {

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
  // In float32 (float64) whatever the model computes in; the result in x's dtype. bf16 on the
  // CPU by the fused kernel, which reads and writes bf16 and computes in float32.
  const bool layernorm = block_.norm == Norm::layernorm;
  if (norm_rows_takes(x)) {
    return norm_rows(x, weight(weight_index), layernorm ? weight(bias_index) : at::Tensor(),
                     block_.norm_eps, layernorm);
  }
  const auto wide = at::promote_types(x.scalar_type(), at::kFloat);
  const at::Tensor xw = x.to(wide), w = weight(weight_index).to(wide);
  at::Tensor y;
  if (layernorm) {
    y = at::layer_norm(xw, {config_.d_model}, w, weight(bias_index).to(wide), block_.norm_eps);
  } else {
    y = xw * at::rsqrt(xw.pow(2).mean(-1, /*keepdim=*/true) + block_.norm_eps) * w;
  }
  return y.to(x.scalar_type());
}

at::Tensor GPT::token_positions(int64_t T, int64_t past, bool tp_part) const {
  const int64_t first = tp_part ? tp_rank_ * T : 0;
  if (!cp_.comm) return at::arange(past + first, past + first + T, at::kLong);
  STRATA_CHECK(past == 0, "context parallelism runs whole training sequences, not a cache");
  return context_positions_.narrow(0, first, T);
}

at::Tensor GPT::positions_of(int64_t T, const ForwardContext& context, bool tp_part) const {
  if (context.paged) return context.paged->positions;
  const at::Tensor positions = token_positions(T, context.past(), tp_part);  // (T)
  if (!context.documents.defined()) return positions;
  // A document's tokens count from its start, the offset each token's id holds.
  const at::Tensor starts =
      tp_part ? context.documents.narrow(1, tp_rank_ * T, T) : context.documents;  // (B, T)
  return positions.unsqueeze(0) - starts;
}

at::Tensor GPT::embed(const at::Tensor& tokens, const ForwardContext& context) {
  // Vocab-parallel lookup: rows outside this rank's range contribute zeros, and the partial
  // embeddings are summed over tp (reduce-scattered along tokens under sequence parallelism).
  at::Tensor x;
  if (tp_comm_) {
    at::Tensor local_ids = tokens - tp_rank_ * vocab_per_rank_;
    at::Tensor outside = (local_ids < 0).logical_or(local_ids >= vocab_per_rank_);
    x = at::embedding(weight(token_embedding_), local_ids.masked_fill(outside, 0));
    x = leave_tp(x.masked_fill(outside.unsqueeze(-1), 0), context.sequence_parallel);
  } else {
    x = at::embedding(weight(token_embedding_), tokens);  // (B, T, C)
  }
  if (position_embedding_ != kNone) {
    const at::Tensor positions = positions_of(x.size(1), context, context.sequence_parallel);
    x = x + at::embedding(weight(position_embedding_), positions);  // (T, C) or (B, T, C)
  }
  return x;
}

at::Tensor GPT::hidden(const at::Tensor& tokens, const ForwardContext& context) {
  const int64_t T = tokens.size(1);
  const int64_t past = context.past();
  STRATA_REQUIRE(past + T <= config_.seq_len, "sequence of ", past + T,
                 " tokens exceeds model.seq_len (", config_.seq_len, ")");
  KVCache* cache = context.cache;
  if (cache && cache->keys.empty()) {
    cache->keys.resize(config_.n_layers);
    cache->values.resize(config_.n_layers);
  }
  at::Tensor x = blocks_forward(embed(tokens, context), context);
  if (cache) cache->length += T;
  return enter_tp(norm(x, final_norm_weight_, final_norm_bias_), context.sequence_parallel);
}

at::Tensor GPT::block_forward(at::Tensor x, size_t layer, const ForwardContext& context) {
  const auto& block = blocks_[layer];
  x = x + attention(norm(x, block.norm1_weight, block.norm1_bias), block,
                    static_cast<int64_t>(layer), context);
  at::Tensor normed = norm(x, block.norm2_weight, block.norm2_bias);
  return x + (block.router_weight != kNone
                  ? moe(normed, block, static_cast<int64_t>(layer), context)
                  : mlp(normed, block, context));
}

at::Tensor GPT::blocks_forward(at::Tensor x, const ForwardContext& context) {
  for (size_t index = 0; index < blocks_.size(); ++index) {
    const int64_t unit = 1 + static_cast<int64_t>(index);
    at::Tensor input = enter(unit, x), output;
    if (context.kv_view() == KvView::none &&
        recomputes(static_cast<int64_t>(index), Recompute::full)) {
      // The block runs again in its backward, with this forward's context, marked as the
      // recomputation (its MoE statistics are not recorded a second time).
      output = recomputed(
          {input}, [this, index, context](const std::vector<at::Tensor>& in, bool recomputing) {
            ForwardContext run = context;
            run.recomputing = recomputing;
            return block_forward(in[0], index, run);
          });
    } else {
      output = block_forward(input, index, context);
    }
    x = leave(unit, output);
  }
  return x;
}

bool GPT::recomputes(int64_t block, Recompute mode) const {
  return recompute_ == mode && (recompute_layers_ == 0 || block < recompute_layers_);
}

void GPT::set_recompute(Recompute mode, int64_t layers) {
  STRATA_CHECK(layers >= 0, "recompute layers ", layers);
  recompute_ = mode;
  recompute_layers_ = layers;
}

at::Tensor GPT::mlp(const at::Tensor& x, const BlockParams& block, const ForwardContext& context) {
  // Column-split in (F_l hidden units, their bias with them), row-split out; the output bias
  // once, after the reduction.
  at::Tensor h = strata::linear(enter_tp(x, context.sequence_parallel), weight(block.fc_weight));
  h = ffn_activation(plus_bias(h, block.fc_bias), block_.activation);
  at::Tensor y =
      leave_tp(strata::linear(h, weight(block.fc_out_weight)), context.sequence_parallel);
  return plus_bias(y, block.fc_out_bias);
}

at::Tensor GPT::moe(const at::Tensor& x, const BlockParams& block, int64_t layer,
                    const ForwardContext& context) {
  // Replicated over tp: each tp rank routes the whole sequence (capacity is per sequence).
  const bool sequence_parallel = context.sequence_parallel;
  at::Tensor input = sequence_parallel ? gather_sequence_to_replica(x, *tp_comm_) : x;
  KVCache* cache = context.cache;
  if (cache && cache->expert_counts.empty()) cache->expert_counts.resize(config_.n_layers);
  MoeOutput out =
      moe_forward(input,
                  {weight(block.router_weight), weight(block.expert_fc_weight),
                   weight(block.expert_out_weight)},
                  config_, ep_comm_, cache ? &cache->expert_counts[layer] : nullptr, cp_.comm);
  if (context.kv_view() == KvView::none && !context.recomputing) {
    out.stats.layer = stage_.first_layer + layer;
    moe_stats_.push_back(std::move(out.stats));
  }
  at::Tensor y = sequence_parallel ? split_to_sequence(out.y, *tp_comm_) : out.y;
  const MoeConfig& moe_config = block_.moe;
  if (at::GradMode::is_enabled() && (moe_config.aux_loss_coef > 0 || moe_config.z_loss_coef > 0)) {
    y = attach_auxiliary_loss(
        y, moe_config.aux_loss_coef * out.aux_loss + moe_config.z_loss_coef * out.z_loss,
        context.objective_scale);
  }
  return y;
}

std::vector<MoeLayerStats> GPT::take_moe_stats() {
  std::vector<MoeLayerStats> stats;
  stats.swap(moe_stats_);
  return stats;
}

}  // namespace strata
