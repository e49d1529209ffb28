// GPT construction and the forward of a pipeline stage (backward comes from autograd).
// Shapes: B batch, T tokens, C d_model, H query heads, K key/value heads, D head_dim, F d_ff,
// V vocab; a trailing _l means "this tp rank's part" (H_l = H / tp, F_l = F / tp, V_l = padded
// V / tp). Under sequence parallelism the residual stream is (B, T / tp, C).
#include "strata/model/gpt.h"

#include <ATen/core/grad_mode.h>

#include <cmath>

#include "strata/core/error.h"
#include "strata/dist/comm.h"
#include "strata/parallel/linear.h"
#include "strata/parallel/regions.h"

namespace strata {

GPT::GPT(const ModelConfig& config, uint64_t seed, at::ScalarType dtype, TensorParallel tp,
         StageSpec stage, Comm* ep, ContextParallel cp)
    : GPT(config, block_spec_of(config), seed, dtype, tp, stage, ep, cp) {}

GPT::GPT(const ModelConfig& config, const BlockSpec& block, uint64_t seed, at::ScalarType dtype,
         TensorParallel tp, StageSpec stage, Comm* ep, ContextParallel cp, ParameterInit init)
    : config_(config_with_block(config, block)),
      block_(block),
      seed_(seed),
      init_(init),
      dtype_(dtype),
      tp_comm_(tp.comm && tp.comm->size() > 1 ? tp.comm : nullptr),
      sequence_parallel_(tp.sequence_parallel && tp_comm_ != nullptr),
      ep_comm_(ep && ep->size() > 1 ? ep : nullptr),
      cp_{cp.comm && cp.comm->size() > 1 ? cp.comm : nullptr, cp.exchange, cp.trace,
          cp.skipped_blocks},
      stage_(stage) {
  check_block_spec(block_);
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
  STRATA_REQUIRE(block_.moe.num_experts % ep_size_ == 0, "parallel.ep (", ep_size_,
                 ") must divide model.moe.num_experts (", block_.moe.num_experts, ")");
  if (cp_.comm) {
    STRATA_REQUIRE(config.attention == AttentionKernel::blockwise,
                   "context parallelism needs model.attention = \"blockwise\"");
    context_positions_ = context_positions(T, cp_.comm->rank(), cp_.comm->size());
  }
  local_heads_ = H / tp_size_;
  kv_replicated_ = K % tp_size_ != 0;
  local_kv_heads_ = kv_replicated_ ? K : K / tp_size_;
  vocab_per_rank_ = (V + tp_size_ - 1) / tp_size_;

  const bool layernorm = block_.norm == Norm::layernorm;
  const double std = config.init_std;
  // Vocabulary rows are split over tp (padded to a multiple of tp). A last pipeline stage
  // with a tied head holds its own copy of the token embedding.
  if (stage_.first || (stage_.last && config.tie_embeddings)) {
    token_embedding_ = add("embedding.token.weight", {V, C}, InitKind::Normal, std, true, 0);
    parameters_[token_embedding_].pp_tied = config.tie_embeddings && !(stage_.first && stage_.last);
    parameters_[token_embedding_].pp_tied_copy =
        parameters_[token_embedding_].pp_tied && !stage_.first;
  }
  if (block_.position == PositionEncoding::learned && stage_.first) {
    position_embedding_ = add("embedding.position.weight", {T, C}, InitKind::Normal, std, true);
    parameters_[position_embedding_].tp_partial_grad = sequence_parallel_;
  }
  for (int64_t layer = stage_.first_layer; layer < stage_.first_layer + stage_.num_layers;
       ++layer) {
    adding_unit_ = 1 + static_cast<int64_t>(blocks_.size());
    add_block(layer);
  }
  adding_unit_ = kOuterUnit;
  if (stage_.last) {
    final_norm_weight_ = add_replicated("final_norm.weight", {C}, InitKind::Ones);
    final_norm_bias_ = layernorm ? add_replicated("final_norm.bias", {C}, InitKind::Zeros) : kNone;
    head_weight_ = config.tie_embeddings
                       ? token_embedding_
                       : add("head.weight", {V, C}, InitKind::Normal, std, true, 0);
  }
  if (block_.position == PositionEncoding::rope) {
    rope_ = RotaryEmbedding(D, T, block_.rope_theta, block_.rope_scaling, dtype);
  }
}

void GPT::add_block(int64_t layer) {
  const int64_t C = config_.d_model, H = config_.n_heads, K = config_.kv_heads();
  const int64_t D = config_.head_dim(), F = config_.ff_dim();
  const std::string prefix = "blocks." + std::to_string(layer) + ".";
  const bool layernorm = block_.norm == Norm::layernorm;
  const LinearBiases& biases = block_.biases;
  const double std = config_.init_std;
  // GPT-2's scaled init for the projections that write into the residual stream.
  const double residual_std = std / std::sqrt(2.0 * config_.n_layers);
  // Keys and values are split over tp when it divides K, else replicated with partial
  // gradients.
  const int64_t kv_split = kv_replicated_ ? -1 : 0;
  BlockParams block;
  block.norm1_weight = add_replicated(prefix + "norm1.weight", {C}, InitKind::Ones);
  if (layernorm) block.norm1_bias = add_replicated(prefix + "norm1.bias", {C}, InitKind::Zeros);
  // Column-parallel: query heads split, key and value heads (blocks K*D, K*D) as above.
  block.q_weight = add(prefix + "attn.q.weight", {H * D, C}, InitKind::Normal, std, true, 0);
  if (biases.q) block.q_bias = add_bias(prefix + "attn.q.bias", {H * D}, 0);
  block.kv_weight = add(prefix + "attn.kv.weight", {2 * K * D, C}, InitKind::Normal, std, true,
                        kv_split, {K * D, K * D});
  if (biases.k) block.k_bias = add_bias(prefix + "attn.k.bias", {K * D}, kv_split);
  if (biases.v) block.v_bias = add_bias(prefix + "attn.v.bias", {K * D}, kv_split);
  for (size_t index : {block.kv_weight, block.k_bias, block.v_bias}) {
    if (index != kNone) parameters_[index].tp_partial_grad = kv_replicated_ && tp_comm_ != nullptr;
  }
  // Row-parallel: the input dim (heads) split; the bias joins after the reduction.
  block.attn_out_weight =
      add(prefix + "attn.out.weight", {C, H * D}, InitKind::Normal, residual_std, true, 1);
  if (biases.attention_out) {
    block.attn_out_bias = add_replicated(prefix + "attn.out.bias", {C}, InitKind::Zeros);
  }
  block.norm2_weight = add_replicated(prefix + "norm2.weight", {C}, InitKind::Ones);
  if (layernorm) block.norm2_bias = add_replicated(prefix + "norm2.bias", {C}, InitKind::Zeros);
  if (block_.is_moe_layer(layer)) {
    // Router replicated everywhere; experts (E, ...) split over ep, whole over tp. SwiGLU
    // experts fuse gate rows then value rows, as the dense MLP does.
    const int64_t E = block_.moe.num_experts;
    const int64_t expert_in = block_.moe.activation == Activation::swiglu ? 2 * F : F;
    block.router_weight = add(prefix + "moe.router.weight", {E, C}, InitKind::Normal, std, false);
    block.expert_fc_weight = add_experts(prefix + "moe.experts.fc.weight", {E, expert_in, C}, std);
    block.expert_out_weight =
        add_experts(prefix + "moe.experts.out.weight", {E, C, F}, residual_std);
  } else {
    // SwiGLU's up-projection is fused as blocks {F, F}: gate rows, then value rows.
    const bool swiglu = block_.activation == Activation::swiglu;
    const int64_t fc_rows = swiglu ? 2 * F : F;
    const std::vector<int64_t> fc_blocks =
        swiglu ? std::vector<int64_t>{F, F} : std::vector<int64_t>{};
    block.fc_weight =
        add(prefix + "mlp.fc.weight", {fc_rows, C}, InitKind::Normal, std, true, 0, fc_blocks);
    if (biases.mlp_in) block.fc_bias = add_bias(prefix + "mlp.fc.bias", {fc_rows}, 0, fc_blocks);
    block.fc_out_weight =
        add(prefix + "mlp.out.weight", {C, F}, InitKind::Normal, residual_std, true, 1);
    if (biases.mlp_out) {
      block.fc_out_bias = add_replicated(prefix + "mlp.out.bias", {C}, InitKind::Zeros);
    }
  }
  blocks_.push_back(block);
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

size_t GPT::add_bias(const std::string& name, std::vector<int64_t> shape, int64_t split_dim,
                     std::vector<int64_t> blocks) {
  return add(name, std::move(shape), InitKind::Zeros, 0, false, split_dim, std::move(blocks));
}

size_t GPT::add_replicated(const std::string& name, std::vector<int64_t> shape, InitKind kind) {
  size_t index = add(name, std::move(shape), kind, 0, false);
  parameters_[index].tp_partial_grad = sequence_parallel_;
  return index;
}

size_t GPT::add_parameter(const std::string& name, const ShardSpec& spec, InitKind kind, double std,
                          bool weight_decay) {
  parameters_.push_back(make_parameter(name, spec,
                                       init_ == ParameterInit::random ? kind : InitKind::Loaded,
                                       std, seed_, dtype_, weight_decay));
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

at::Tensor GPT::logits(const at::Tensor& tokens, KVCache* cache, const at::Tensor& documents) {
  STRATA_CHECK(stage_.first && stage_.last && !cp_.comm,
               "logits() needs the whole model and whole sequences on this rank");
  STRATA_CHECK(!(cache && documents.defined()), "packed documents cannot continue a KV cache");
  // Generation runs without sequence parallelism (one new token cannot be split); the
  // weights are the same either way.
  ForwardContext context = ForwardContext::generation(cache);
  context.documents = documents;
  return vocab_logits(hidden(tokens, context));
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
  // Serving runs without sequence parallelism (one new token cannot be split).
  const ForwardContext context = ForwardContext::serving(batch);
  at::Tensor x = stage_.first ? embed(input, context) : input;
  x = blocks_forward(x, context);
  if (!stage_.last) return x;
  x = x.select(0, 0).index_select(0, sample_rows);  // (R, C)
  return vocab_logits(norm(x, final_norm_weight_, final_norm_bias_));
}

at::Tensor GPT::loss(const at::Tensor& tokens, const at::Tensor& targets,
                     const at::Tensor& documents) {
  STRATA_CHECK(stage_.first && stage_.last, "loss() needs the whole model on this rank");
  return forward_stage(tokens, targets, 1.0, documents);
}

at::Tensor GPT::forward_stage(const at::Tensor& input, const at::Tensor& targets,
                              double objective_scale, const at::Tensor& documents) {
  const ForwardContext context =
      ForwardContext::training(objective_scale, sequence_parallel_, documents);
  at::Tensor x = enter(kOuterUnit, input);
  if (stage_.first) x = embed(x, context);
  x = blocks_forward(x, context);
  return leave(kOuterUnit, stage_.last ? head_loss(x, targets, context) : x);
}

at::Tensor GPT::head_loss(const at::Tensor& last_hidden, const at::Tensor& targets,
                          const ForwardContext& context) {
  at::Tensor x =
      enter_tp(norm(last_hidden, final_norm_weight_, final_norm_bias_), context.sequence_parallel);
  // The loss in float32 (float64) whatever the model computes in.
  at::Tensor local_logits = strata::linear(x, weight(head_weight_));  // (B, T, V_l)
  local_logits = local_logits.to(at::promote_types(local_logits.scalar_type(), at::kFloat));
  if (!tp_comm_) {
    // A sum divided by the count, not a mean over the targets not ignored (see loss()).
    return at::cross_entropy_loss(local_logits.view({-1, config_.vocab_size}), targets.reshape(-1),
                                  {}, at::Reduction::Sum, kIgnoredTarget) /
           static_cast<double>(targets.numel());
  }
  return vocab_parallel_cross_entropy(local_logits.view({-1, vocab_per_rank_}), targets.reshape(-1),
                                      tp_rank_ * vocab_per_rank_, config_.vocab_size, *tp_comm_);
}

}  // namespace strata
