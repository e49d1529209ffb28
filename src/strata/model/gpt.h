// The GPT decoder: token embedding, learned or rotary positions, pre-norm blocks of causal
// (grouped-query) attention and a GELU or SwiGLU MLP, a final norm, and a tied or untied
// output head with cross-entropy. Written with ATen ops under autograd; every weight is a
// Parameter with a global name, so initialization and checkpoints are layout-independent.
//
// Tensor parallelism (Megatron-style) over the tp group: attention heads, the MLP's hidden
// units and the vocabulary are split; the communication lives in parallel/regions.h. With
// sequence parallelism the residual stream between blocks is split along the tokens.
//
// Mixture of experts ([model.moe], model/moe.h): every `every`-th layer's MLP is a set of
// expert FFNs behind a router. The experts are split over the ep group (expert weights carry
// ShardAxis::Ep) and replicated over tp: under tensor parallelism every tp rank runs the
// same MoE layer on the whole sequence (gathered first under sequence parallelism).
#pragma once
#include <ATen/ATen.h>

#include <cstdint>
#include <map>
#include <vector>

#include "strata/core/config.h"
#include "strata/model/moe.h"
#include "strata/model/parameter.h"

namespace strata {

class Comm;

// Observes a model chunk's layers ("units") around their forward and backward, for ZeRO:
// stage 3 gathers a unit's weights before each use and frees them after; gradient reduction
// starts as soon as a unit's backward is done. Unit 0 (GPT::kOuterUnit) is the embeddings,
// the final norm and the head, held for the whole forward (and the whole backward) of the
// chunk; unit 1 + i is the chunk's block i. The backward calls run inside autograd's
// backward, on the thread that called it. after_backward of the outer unit comes from
// GPT::end_backward(), called once the chunk's backward for a microbatch is done.
class LayerHooks {
 public:
  virtual ~LayerHooks() = default;
  virtual void before_forward(int64_t unit) = 0;
  virtual void after_forward(int64_t unit) = 0;
  virtual void before_backward(int64_t unit) = 0;
  virtual void after_backward(int64_t unit) = 0;
};

// Keys and values of every layer for incremental decoding.
struct KVCache {
  std::vector<at::Tensor> keys;           // per layer (B, local kv heads, length, head_dim)
  std::vector<at::Tensor> values;         // per layer (B, local kv heads, length, head_dim)
  std::vector<at::Tensor> expert_counts;  // per MoE layer (B, E) int64: assignments so far
  int64_t length = 0;                     // positions already cached
};

struct TensorParallel {
  Comm* comm = nullptr;  // the tp group; nullptr = no tensor parallelism
  bool sequence_parallel = false;
};

// The part of the model one object holds: a pipeline stage (or one of its interleaved
// chunks) holds layers [first_layer, first_layer + num_layers); the first stage also the
// embeddings, the last the final norm, the head and the loss. The default is the whole model.
struct StageSpec {
  int64_t first_layer = 0;
  int64_t num_layers = -1;  // -1: all layers from first_layer on
  bool first = true;        // holds the embeddings; its input is token ids
  bool last = true;         // holds the head; its output is the loss
};

class GPT {
 public:
  // ep: the expert-parallel group (nullptr or size 1: every expert on this rank).
  GPT(const ModelConfig& config, uint64_t seed, at::ScalarType dtype, TensorParallel tp = {},
      StageSpec stage = {}, Comm* ep = nullptr);

  const ModelConfig& config() const { return config_; }
  std::vector<Parameter>& parameters() { return parameters_; }
  const std::vector<Parameter>& parameters() const { return parameters_; }
  Parameter& parameter(const std::string& name);
  int64_t num_parameters() const;  // global count

  // tokens (B, T) int64 -> logits (B, T, V) over the whole vocabulary (gathered over tp;
  // for generation and tests). With a cache, the tokens continue the cached sequence.
  at::Tensor logits(const at::Tensor& tokens, KVCache* cache = nullptr);
  // Mean cross-entropy of targets (B, T) given tokens (B, T); vocab-parallel under tp.
  at::Tensor loss(const at::Tensor& tokens, const at::Tensor& targets);

  // One pipeline stage's forward: input is token ids (B, T) on the first stage, else the
  // previous stage's output (B, T or T / tp under sequence parallelism, C). Returns that
  // output shape on all but the last stage, and the mean loss of targets (B, T) there.
  at::Tensor forward_stage(const at::Tensor& input, const at::Tensor& targets);
  const StageSpec& stage() const { return stage_; }

  // Layer units (see LayerHooks): how many, and the unit of parameters()[index].
  static constexpr int64_t kOuterUnit = 0;
  int64_t num_units() const { return 1 + static_cast<int64_t>(blocks_.size()); }
  int64_t unit_of(size_t parameter_index) const { return parameter_units_[parameter_index]; }
  // nullptr (the default) = no hooks. The hooks must outlive every forward and backward.
  void set_hooks(LayerHooks* hooks) { hooks_ = hooks; }
  // The chunk's backward of one microbatch is done (after_backward of the outer unit).
  void end_backward();
  // Mixture of experts. The auxiliary losses (aux_loss_coef * Switch loss + z_loss_coef *
  // z-loss of each MoE layer) join the objective through the backward with this factor
  // (the trainer sets 1 / microbatches, as the language-model loss gets); loss() and
  // forward_stage() return the language-model loss alone. Every forward without a cache
  // records one MoeLayerStats per MoE layer; take_moe_stats() hands them over and clears.
  void set_auxiliary_loss_scale(double scale) { auxiliary_loss_scale_ = scale; }
  std::vector<MoeLayerStats> take_moe_stats();

 private:
  struct BlockParams {  // indices into parameters_
    size_t norm1_weight, norm1_bias, q_weight, kv_weight, attn_out_weight;
    size_t norm2_weight, norm2_bias, fc_weight, fc_out_weight;  // fc: dense layers only
    size_t router_weight, expert_fc_weight, expert_out_weight;  // MoE layers only
  };
  static constexpr size_t kNone = static_cast<size_t>(-1);

  size_t add(const std::string& name, std::vector<int64_t> shape, InitKind kind, double std,
             bool weight_decay, int64_t split_dim = -1, std::vector<int64_t> blocks = {});
  const at::Tensor& weight(size_t index) const { return parameters_[index].value; }
  // Hidden states after the final norm, full sequence: (B, T, C), each tp rank a replica.
  at::Tensor hidden(const at::Tensor& tokens, KVCache* cache, bool sequence_parallel);
  at::Tensor blocks_forward(at::Tensor x, KVCache* cache, bool sequence_parallel);
  // One transformer block: attention, then the MLP or (MoE layers) the experts.
  at::Tensor block_forward(at::Tensor x, size_t layer, KVCache* cache, bool sequence_parallel);
  at::Tensor head_loss(const at::Tensor& x, const at::Tensor& targets);  // x: last block's output
  at::Tensor embed(const at::Tensor& tokens, int64_t past, bool sequence_parallel);
  at::Tensor norm(const at::Tensor& x, size_t weight_index, size_t bias_index) const;
  at::Tensor attention(const at::Tensor& x, const BlockParams& block, int64_t layer, KVCache* cache,
                       bool sequence_parallel);
  at::Tensor mlp(const at::Tensor& x, const BlockParams& block, bool sequence_parallel);
  at::Tensor moe(const at::Tensor& x, const BlockParams& block, int64_t layer, KVCache* cache,
                 bool sequence_parallel);
  size_t add_experts(const std::string& name, std::vector<int64_t> shape, double std);
  // Every parameter enters here: initialized, and recorded in the layer unit being built.
  size_t add_parameter(const std::string& name, const ShardSpec& spec, InitKind kind, double std,
                       bool weight_decay);
  at::Tensor enter_tp(const at::Tensor& x, bool sequence_parallel);      // before a column split
  at::Tensor leave_tp(const at::Tensor& x, bool sequence_parallel);      // after a row split
  at::Tensor rotate(const at::Tensor& x, int64_t first_position) const;  // RoPE
  const at::Tensor& causal_mask(int64_t query_len, int64_t key_len);

  ModelConfig config_;
  uint64_t seed_;
  at::ScalarType dtype_;
  Comm* tp_comm_;  // nullptr when there is no tensor parallelism
  bool sequence_parallel_;
  Comm* ep_comm_;  // nullptr when every expert is on this rank
  int64_t ep_size_ = 1, ep_rank_ = 0;
  double auxiliary_loss_scale_ = 1.0;
  std::vector<MoeLayerStats> moe_stats_;
  int64_t tp_size_ = 1, tp_rank_ = 0;
  int64_t local_heads_, local_kv_heads_;  // heads this rank computes
  bool kv_replicated_;                    // kv heads not divisible by tp: every rank holds all
  int64_t vocab_per_rank_;                // rows of the (padded) vocabulary on each rank
  StageSpec stage_;

  std::vector<Parameter> parameters_;
  std::vector<int64_t> parameter_units_;  // per parameter: its layer unit
  int64_t adding_unit_ = kOuterUnit;      // unit of the parameters add() creates
  LayerHooks* hooks_ = nullptr;
  size_t token_embedding_ = kNone, position_embedding_ = kNone;
  size_t final_norm_weight_ = kNone, final_norm_bias_ = kNone, head_weight_ = kNone;
  std::vector<BlockParams> blocks_;  // weight fields a layer does not use are kNone
  at::Tensor rope_cos_, rope_sin_;   // (seq_len, head_dim / 2)
  std::map<std::pair<int64_t, int64_t>, at::Tensor> causal_masks_;  // (Tq, Tk) bool, true = hidden
};

// Model FLOPs of one training step (forward + backward, no recomputation) per token:
// 6 * (matrix parameters of the blocks and the head that one token meets: the router and
// top_k experts in a MoE layer) + 12 * n_layers * d_model * seq_len.
double training_flops_per_token(const ModelConfig& config);

}  // namespace strata
