// The name tables of GPT-2 and of the Llama family (Llama, Qwen2, Mistral, Mixtral).
#include "strata/hf/hf_names.h"

namespace strata {
namespace {

// Builds one architecture's table, a parameter at a time.
class TableBuilder {
 public:
  // The whole stored tensor is the whole parameter.
  void whole(const std::string& hf_name, std::vector<int64_t> hf_shape,
             const std::string& parameter, bool transposed = false) {
    const int64_t rows = transposed ? hf_shape.back() : hf_shape.front();
    part(hf_name, std::move(hf_shape), parameter, 0, rows, {0, 0}, transposed);
  }
  // Rows [hf_begin, hf_begin + rows) of the (transposed) stored tensor, placed at
  // `offsets` of the parameter.
  void part(const std::string& hf_name, std::vector<int64_t> hf_shape, const std::string& parameter,
            int64_t hf_begin, int64_t rows, std::vector<int64_t> offsets, bool transposed = false) {
    const size_t parameter_dims = offsets.size();
    HfPiece piece{hf_name, std::move(hf_shape), transposed,        hf_begin,
                  rows,    parameter,           std::move(offsets)};
    // A 1-d stored tensor placed in a 1-d parameter: one offset.
    if (piece.hf_shape.size() == 1 && parameter_dims == 2) piece.parameter_offsets.resize(1);
    map_.pieces.push_back(std::move(piece));
  }
  void ignore(const std::string& hf_name) { map_.ignored.push_back(hf_name); }
  HfTensorMap take() { return std::move(map_); }

 private:
  HfTensorMap map_;
};

HfTensorMap gpt2_map(const ModelConfig& model, const std::string& prefix) {
  const int64_t C = model.d_model, V = model.vocab_size, T = model.seq_len, F = model.ff_dim();
  TableBuilder table;
  table.whole(prefix + "wte.weight", {V, C}, "embedding.token.weight");
  table.whole(prefix + "wpe.weight", {T, C}, "embedding.position.weight");
  for (int64_t layer = 0; layer < model.n_layers; ++layer) {
    const std::string hf = prefix + "h." + std::to_string(layer) + ".";
    const std::string ours = "blocks." + std::to_string(layer) + ".";
    table.whole(hf + "ln_1.weight", {C}, ours + "norm1.weight");
    table.whole(hf + "ln_1.bias", {C}, ours + "norm1.bias");
    // Conv1D stores [in, out] = (C, 3C): its transpose is [q ; k ; v] rows.
    table.part(hf + "attn.c_attn.weight", {C, 3 * C}, ours + "attn.q.weight", 0, C, {0, 0}, true);
    table.part(hf + "attn.c_attn.weight", {C, 3 * C}, ours + "attn.kv.weight", C, 2 * C, {0, 0},
               true);
    table.part(hf + "attn.c_attn.bias", {3 * C}, ours + "attn.q.bias", 0, C, {0});
    table.part(hf + "attn.c_attn.bias", {3 * C}, ours + "attn.k.bias", C, C, {0});
    table.part(hf + "attn.c_attn.bias", {3 * C}, ours + "attn.v.bias", 2 * C, C, {0});
    table.whole(hf + "attn.c_proj.weight", {C, C}, ours + "attn.out.weight", true);
    table.whole(hf + "attn.c_proj.bias", {C}, ours + "attn.out.bias");
    table.whole(hf + "ln_2.weight", {C}, ours + "norm2.weight");
    table.whole(hf + "ln_2.bias", {C}, ours + "norm2.bias");
    table.whole(hf + "mlp.c_fc.weight", {C, F}, ours + "mlp.fc.weight", true);
    table.whole(hf + "mlp.c_fc.bias", {F}, ours + "mlp.fc.bias");
    table.whole(hf + "mlp.c_proj.weight", {F, C}, ours + "mlp.out.weight", true);
    table.whole(hf + "mlp.c_proj.bias", {C}, ours + "mlp.out.bias");
    // The causal mask and its fill value, saved as buffers by older transformers.
    table.ignore(hf + "attn.bias");
    table.ignore(hf + "attn.masked_bias");
  }
  table.whole(prefix + "ln_f.weight", {C}, "final_norm.weight");
  table.whole(prefix + "ln_f.bias", {C}, "final_norm.bias");
  if (model.tie_embeddings) {
    table.ignore("lm_head.weight");
  } else {
    table.whole("lm_head.weight", {V, C}, "head.weight");
  }
  return table.take();
}

HfTensorMap llama_map(const ModelConfig& model, const BlockSpec& block) {
  const int64_t C = model.d_model, V = model.vocab_size, F = model.ff_dim();
  const int64_t H = model.n_heads, K = model.kv_heads(), D = model.head_dim();
  TableBuilder table;
  table.whole("model.embed_tokens.weight", {V, C}, "embedding.token.weight");
  for (int64_t layer = 0; layer < model.n_layers; ++layer) {
    const std::string hf = "model.layers." + std::to_string(layer) + ".";
    const std::string ours = "blocks." + std::to_string(layer) + ".";
    table.whole(hf + "input_layernorm.weight", {C}, ours + "norm1.weight");
    table.whole(hf + "self_attn.q_proj.weight", {H * D, C}, ours + "attn.q.weight");
    table.part(hf + "self_attn.k_proj.weight", {K * D, C}, ours + "attn.kv.weight", 0, K * D,
               {0, 0});
    table.part(hf + "self_attn.v_proj.weight", {K * D, C}, ours + "attn.kv.weight", 0, K * D,
               {K * D, 0});
    if (block.biases.q) table.whole(hf + "self_attn.q_proj.bias", {H * D}, ours + "attn.q.bias");
    if (block.biases.k) table.whole(hf + "self_attn.k_proj.bias", {K * D}, ours + "attn.k.bias");
    if (block.biases.v) table.whole(hf + "self_attn.v_proj.bias", {K * D}, ours + "attn.v.bias");
    table.whole(hf + "self_attn.o_proj.weight", {C, H * D}, ours + "attn.out.weight");
    if (block.biases.attention_out) {
      table.whole(hf + "self_attn.o_proj.bias", {C}, ours + "attn.out.bias");
    }
    table.whole(hf + "post_attention_layernorm.weight", {C}, ours + "norm2.weight");
    if (block.is_moe_layer(layer)) {
      const std::string moe = hf + "block_sparse_moe.";
      table.whole(moe + "gate.weight", {block.moe.num_experts, C}, ours + "moe.router.weight");
      for (int64_t e = 0; e < block.moe.num_experts; ++e) {
        const std::string expert = moe + "experts." + std::to_string(e) + ".";
        table.part(expert + "w1.weight", {F, C}, ours + "moe.experts.fc.weight", 0, F, {e, 0, 0});
        table.part(expert + "w3.weight", {F, C}, ours + "moe.experts.fc.weight", 0, F, {e, F, 0});
        table.part(expert + "w2.weight", {C, F}, ours + "moe.experts.out.weight", 0, C, {e, 0, 0});
      }
    } else {
      table.part(hf + "mlp.gate_proj.weight", {F, C}, ours + "mlp.fc.weight", 0, F, {0, 0});
      table.part(hf + "mlp.up_proj.weight", {F, C}, ours + "mlp.fc.weight", 0, F, {F, 0});
      table.whole(hf + "mlp.down_proj.weight", {C, F}, ours + "mlp.out.weight");
      if (block.biases.mlp_in) {
        table.part(hf + "mlp.gate_proj.bias", {F}, ours + "mlp.fc.bias", 0, F, {0});
        table.part(hf + "mlp.up_proj.bias", {F}, ours + "mlp.fc.bias", 0, F, {F});
      }
      if (block.biases.mlp_out) table.whole(hf + "mlp.down_proj.bias", {C}, ours + "mlp.out.bias");
    }
    table.ignore(hf + "self_attn.rotary_emb.inv_freq");  // a buffer older versions saved
  }
  table.whole("model.norm.weight", {C}, "final_norm.weight");
  if (model.tie_embeddings) {
    table.ignore("lm_head.weight");
  } else {
    table.whole("lm_head.weight", {V, C}, "head.weight");
  }
  return table.take();
}

}  // namespace

std::vector<int64_t> HfPiece::box_shape() const {
  std::vector<int64_t> shape = hf_shape;
  if (transposed) std::swap(shape.front(), shape.back());
  shape.front() = rows;
  if (parameter_offsets.size() == shape.size() + 1) shape.insert(shape.begin(), 1);
  return shape;
}

HfTensorMap hf_tensor_map(HfArchitecture architecture, const ModelConfig& model,
                          const BlockSpec& block, const std::string& prefix) {
  if (architecture == HfArchitecture::gpt2) return gpt2_map(model, prefix);
  return llama_map(model, block);
}

}  // namespace strata
