// GPT forward pass (backward comes from autograd). Shapes: B batch, T tokens, C d_model,
// H query heads, K key/value heads, D head_dim, F d_ff, V vocab.
#include "strata/model/gpt.h"

#include <cmath>

#include "strata/core/error.h"

namespace strata {

GPT::GPT(const ModelConfig& config, uint64_t seed, at::ScalarType dtype)
    : config_(config), seed_(seed), dtype_(dtype) {
  const int64_t C = config.d_model, V = config.vocab_size, T = config.seq_len;
  const int64_t H = config.n_heads, K = config.kv_heads(), D = config.head_dim();
  const int64_t F = config.ff_dim();
  const bool layernorm = config.norm == "layernorm";
  const bool swiglu = config.activation == "swiglu";
  const double std = config.init_std;
  // GPT-2's scaled init for the projections that write into the residual stream.
  const double residual_std = std / std::sqrt(2.0 * config.n_layers);

  token_embedding_ = add("embedding.token.weight", {V, C}, InitKind::Normal, std, true);
  if (config.pos == "learned") {
    position_embedding_ = add("embedding.position.weight", {T, C}, InitKind::Normal, std, true);
  }
  for (int64_t layer = 0; layer < config.n_layers; ++layer) {
    const std::string prefix = "blocks." + std::to_string(layer) + ".";
    BlockParams block{};
    block.norm1_weight = add(prefix + "norm1.weight", {C}, InitKind::Ones, 0, false);
    block.norm1_bias = layernorm ? add(prefix + "norm1.bias", {C}, InitKind::Zeros, 0, false) : kNone;
    block.qkv_weight = add(prefix + "attn.qkv.weight", {(H + 2 * K) * D, C}, InitKind::Normal, std, true);
    block.attn_out_weight = add(prefix + "attn.out.weight", {C, H * D}, InitKind::Normal, residual_std, true);
    block.norm2_weight = add(prefix + "norm2.weight", {C}, InitKind::Ones, 0, false);
    block.norm2_bias = layernorm ? add(prefix + "norm2.bias", {C}, InitKind::Zeros, 0, false) : kNone;
    // SwiGLU's up-projection is fused: rows [0, F) are the gate, rows [F, 2F) the value.
    block.fc_weight = add(prefix + "mlp.fc.weight", {swiglu ? 2 * F : F, C}, InitKind::Normal, std, true);
    block.fc_out_weight = add(prefix + "mlp.out.weight", {C, F}, InitKind::Normal, residual_std, true);
    blocks_.push_back(block);
  }
  final_norm_weight_ = add("final_norm.weight", {C}, InitKind::Ones, 0, false);
  final_norm_bias_ = layernorm ? add("final_norm.bias", {C}, InitKind::Zeros, 0, false) : kNone;
  head_weight_ = config.tie_embeddings ? token_embedding_
                                       : add("head.weight", {V, C}, InitKind::Normal, std, true);

  if (config.pos == "rope") {
    auto inverse_frequency =
        at::pow(config.rope_theta, -at::arange(0, D, 2, at::kDouble) / static_cast<double>(D));
    auto angles = at::outer(at::arange(T, at::kDouble), inverse_frequency);  // (T, D/2)
    rope_cos_ = angles.cos().to(dtype);
    rope_sin_ = angles.sin().to(dtype);
  }
}

size_t GPT::add(const std::string& name, std::vector<int64_t> shape, InitKind kind, double std,
                bool weight_decay) {
  ShardSpec spec;
  spec.global_shape = std::move(shape);
  parameters_.push_back(make_parameter(name, spec, kind, std, seed_, dtype_, weight_decay));
  return parameters_.size() - 1;
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

at::Tensor GPT::norm(const at::Tensor& x, size_t weight_index, size_t bias_index) const {
  if (bias_index != kNone) {
    return at::layer_norm(x, {config_.d_model}, weight(weight_index), weight(bias_index),
                          config_.norm_eps);
  }
  auto scale = at::rsqrt(x.pow(2).mean(-1, /*keepdim=*/true) + config_.norm_eps);
  return x * scale * weight(weight_index);
}

at::Tensor GPT::rotate(const at::Tensor& x, int64_t first_position) const {
  // x (B, heads, T, D): rotate the pairs (x[..., i], x[..., i + D/2]) by position * frequency_i.
  const int64_t T = x.size(2), half = x.size(3) / 2;
  auto cos = rope_cos_.narrow(0, first_position, T);  // (T, D/2)
  auto sin = rope_sin_.narrow(0, first_position, T);
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
                          KVCache* cache) {
  const int64_t B = x.size(0), T = x.size(1);
  const int64_t H = config_.n_heads, K = config_.kv_heads(), D = config_.head_dim();
  const int64_t past = cache ? cache->length : 0;

  auto qkv = at::matmul(x, weight(block.qkv_weight).t());  // (B, T, (H + 2K) * D)
  auto q = qkv.narrow(-1, 0, H * D).view({B, T, H, D}).transpose(1, 2);  // (B, H, T, D)
  auto k = qkv.narrow(-1, H * D, K * D).view({B, T, K, D}).transpose(1, 2);  // (B, K, T, D)
  auto v = qkv.narrow(-1, (H + K) * D, K * D).view({B, T, K, D}).transpose(1, 2);
  if (config_.pos == "rope") {
    q = rotate(q, past);
    k = rotate(k, past);
  }
  if (cache) {
    if (past > 0) {
      k = at::cat({cache->keys[layer], k}, 2);
      v = at::cat({cache->values[layer], v}, 2);
    }
    cache->keys[layer] = k;
    cache->values[layer] = v;
  }
  if (K != H) {  // grouped-query: each key/value head serves H / K query heads
    k = k.repeat_interleave(H / K, 1);
    v = v.repeat_interleave(H / K, 1);
  }
  auto scores = at::matmul(q, k.transpose(-2, -1)) * (1.0 / std::sqrt(static_cast<double>(D)));
  scores = scores.masked_fill(causal_mask(T, past + T), -std::numeric_limits<double>::infinity());
  auto y = at::matmul(at::softmax(scores, -1), v);  // (B, H, T, D)
  y = y.transpose(1, 2).reshape({B, T, H * D});
  return at::matmul(y, weight(block.attn_out_weight).t());
}

at::Tensor GPT::mlp(const at::Tensor& x, const BlockParams& block) const {
  auto h = at::matmul(x, weight(block.fc_weight).t());
  if (config_.activation == "swiglu") {
    const int64_t F = config_.ff_dim();
    h = at::silu(h.narrow(-1, 0, F)) * h.narrow(-1, F, F);
  } else {
    h = at::gelu(h, "tanh");
  }
  return at::matmul(h, weight(block.fc_out_weight).t());
}

at::Tensor GPT::logits(const at::Tensor& tokens, KVCache* cache) {
  const int64_t T = tokens.size(1);
  const int64_t past = cache ? cache->length : 0;
  STRATA_REQUIRE(past + T <= config_.seq_len, "sequence of ", past + T,
                 " tokens exceeds model.seq_len (", config_.seq_len, ")");
  if (cache && cache->keys.empty()) {
    cache->keys.resize(config_.n_layers);
    cache->values.resize(config_.n_layers);
  }
  auto x = at::embedding(weight(token_embedding_), tokens);  // (B, T, C)
  if (position_embedding_ != kNone) {
    x = x + weight(position_embedding_).narrow(0, past, T);
  }
  for (int64_t layer = 0; layer < config_.n_layers; ++layer) {
    const auto& block = blocks_[layer];
    x = x + attention(norm(x, block.norm1_weight, block.norm1_bias), block, layer, cache);
    x = x + mlp(norm(x, block.norm2_weight, block.norm2_bias), block);
  }
  if (cache) cache->length += T;
  x = norm(x, final_norm_weight_, final_norm_bias_);
  return at::matmul(x, weight(head_weight_).t());  // (B, T, V)
}

at::Tensor GPT::loss(const at::Tensor& tokens, const at::Tensor& targets) {
  auto logits_btv = logits(tokens);
  return at::cross_entropy_loss(logits_btv.view({-1, config_.vocab_size}), targets.reshape(-1));
}

double training_flops_per_token(const ModelConfig& config) {
  const double C = config.d_model, F = config.ff_dim(), L = config.n_layers;
  const double H = config.n_heads, K = config.kv_heads(), D = config.head_dim();
  const double mlp_in = config.activation == "swiglu" ? 2 * F : F;
  const double per_layer = (H + 2 * K) * D * C + C * H * D + mlp_in * C + C * F;
  const double matmul_params = L * per_layer + config.vocab_size * C;  // blocks + head
  return 6.0 * matmul_params + 12.0 * L * C * config.seq_len;
}

}  // namespace strata
