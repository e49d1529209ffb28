// The GPT decoder: token embedding, learned or rotary positions, pre-norm blocks of causal
// (grouped-query) attention and a GELU or SwiGLU MLP, a final norm, and a tied or untied
// output head with cross-entropy. What a block is made of (norms, positions, activation,
// biases, rope scaling, experts) is data: a BlockSpec (model/block_spec.h). Written with ATen
// ops under autograd; every weight and bias is a Parameter with a global name, so
// initialization and checkpoints are layout-independent.
//
// Every forward hands a ForwardContext (model/forward_context.h) down its calls: the KV cache
// it reads and writes (none, generation's, serving's paged one), sequence parallelism, the
// objective's scale and whether it is a recomputation. The model keeps no call's state.
//
// Tensor parallelism (Megatron-style) over the tp group: attention heads, the MLP's hidden
// units and the vocabulary are split; the communication lives in parallel/regions.h. With
// sequence parallelism the residual stream between blocks is split along the tokens.
//
// Mixture of experts ([model.moe], model/moe.h): every `every`-th layer's MLP is a set of
// expert FFNs behind a router. The experts are split over the ep group (expert weights carry
// ShardAxis::Ep) and replicated over tp: under tensor parallelism every tp rank runs the
// same MoE layer on the whole sequence (gathered first under sequence parallelism).
//
// Context parallelism (parallel/context_parallel.h) over the cp group: the model sees this
// rank's tokens of each sequence (two chunks, at their original positions) and attention
// reaches the other ranks' keys. Under tensor parallelism each tp rank holds the same tokens
// (split again over tp with sequence parallelism).
//
// The code: gpt.cpp builds the parameters and runs a stage (training, generation, serving);
// gpt_block.cpp the embedding, blocks, norms, MLP and experts; gpt_attention.cpp attention.
#pragma once
#include <ATen/ATen.h>

#include <cstdint>
#include <map>
#include <vector>

#include "strata/core/config.h"
#include "strata/model/block_spec.h"
#include "strata/model/forward_context.h"
#include "strata/model/moe.h"
#include "strata/model/parameter.h"
#include "strata/model/rope.h"
#include "strata/parallel/context_parallel.h"

namespace strata {

class Comm;

// Wraps a model chunk's layer units from outside: enter() sees a unit's input before its
// forward and leave() its output after, and each returns the tensor the model goes on with (the
// same one, or a differentiable identity of it whose backward reports progress). The units and
// their order: GPT::unit_order().
class UnitWrapper {
 public:
  virtual ~UnitWrapper() = default;
  virtual at::Tensor enter(int64_t unit, const at::Tensor& input) = 0;
  virtual at::Tensor leave(int64_t unit, const at::Tensor& output) = 0;
};

// The layer units of a chunk in the three orders that matter to code wrapping them. Unit 0
// (GPT::kOuterUnit: embeddings, final norm, head) spans the chunk: entered before the
// embedding, left after the head. Unit 1 + i is block i, entered and left in turn inside it.
struct UnitOrder {
  std::vector<int64_t> forward;  // order of enter(): 0, 1, ..., n
  std::vector<int64_t>
      backward;  // order backward reaches the units' outputs: 0 (the head), n, ..., 1
  std::vector<int64_t> gradients_complete;  // n, ..., 1, 0 (the embedding's gradient comes last)
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
  // The model a [model] table describes (its block: block_spec_of(config)). ep: the
  // expert-parallel group (nullptr or size 1: every expert on this rank); cp: the
  // context-parallel group (comm nullptr or size 1: whole sequences).
  GPT(const ModelConfig& config, uint64_t seed, at::ScalarType dtype, TensorParallel tp = {},
      StageSpec stage = {}, Comm* ep = nullptr, ContextParallel cp = {});
  // With an explicit block (another model family): config gives the sizes, block says what a
  // block is made of; config's norm, pos, activation, norm_eps, rope_theta and moe give way to
  // block's, and config() reports them so.
  // init = loaded: the parameters are allocated (in dtype, this rank's shards only) and neither
  // drawn nor written, for a caller that loads every value (a checkpoint, a Hugging Face
  // model): no whole float32 tensor is drawn, which would cost the time and memory of the full
  // model, and each page is first touched by the load.
  GPT(const ModelConfig& config, const BlockSpec& block, uint64_t seed, at::ScalarType dtype,
      TensorParallel tp = {}, StageSpec stage = {}, Comm* ep = nullptr, ContextParallel cp = {},
      ParameterInit init = ParameterInit::random);

  const ModelConfig& config() const { return config_; }
  const BlockSpec& block() const { return block_; }
  std::vector<Parameter>& parameters() { return parameters_; }
  const std::vector<Parameter>& parameters() const { return parameters_; }
  Parameter& parameter(const std::string& name);
  int64_t num_parameters() const;  // global count

  // tokens (B, T) int64 -> logits (B, T, V) over the whole vocabulary (gathered over tp;
  // for generation and tests). With a cache, the tokens continue the cached sequence. Without
  // one, `documents` (B, T) may pack documents into the rows (ForwardContext::documents).
  at::Tensor logits(const at::Tensor& tokens, KVCache* cache = nullptr,
                    const at::Tensor& documents = {});
  // Mean cross-entropy of targets (B, T) given tokens (B, T); vocab-parallel under tp. A
  // target of kIgnoredTarget carries no loss: it adds zero to the sum, which is still
  // divided by B * T, so the caller rescales to a mean over the tokens that carry loss
  // (the trainer does so over the whole global batch).
  static constexpr int64_t kIgnoredTarget = -1;
  at::Tensor loss(const at::Tensor& tokens, const at::Tensor& targets,
                  const at::Tensor& documents = {});

  // One pipeline stage's forward: input is token ids (B, T) on the first stage, else the
  // previous stage's output (B, T or T / tp under sequence parallelism, C). Returns that
  // output shape on all but the last stage, and the mean loss of targets (B, T) there. Under
  // context parallelism T is this rank's T / cp tokens (context_shard of the sequence).
  // objective_scale: the factor the objective enters the backward with (the executor's
  // 1 / microbatches); the MoE auxiliary losses join the backward with it from inside the
  // layers, the returned language-model loss is unscaled. documents: the packed documents of
  // this rank's tokens (ForwardContext::documents; (B, T), context_shard of the rows' under
  // context parallelism), or undefined.
  at::Tensor forward_stage(const at::Tensor& input, const at::Tensor& targets,
                           double objective_scale = 1.0, const at::Tensor& documents = {});
  const StageSpec& stage() const { return stage_; }
  int64_t num_layers() const { return static_cast<int64_t>(blocks_.size()); }  // of this chunk
  // Key/value heads whose keys and values this rank computes and caches (all of them when
  // they are replicated over tp).
  int64_t local_kv_heads() const { return local_kv_heads_; }
  at::ScalarType dtype() const { return dtype_; }

  // One serving step through this chunk, without autograd: input is token ids (1, N) on the
  // first stage, else the previous stage's output (1, N, C). Each sequence's new keys and
  // values are written to its slots, and its queries attend to its whole context there. Returns
  // (1, N, C) on all but the last stage; on the last, the logits (R, V) over the whole
  // vocabulary of the rows `sample_rows` (R) int64.
  at::Tensor forward_paged(const at::Tensor& input, const PagedBatch& batch,
                           const at::Tensor& sample_rows);

  // Layer units (see UnitWrapper): how many, their orders, the unit of parameters()[index].
  static constexpr int64_t kOuterUnit = 0;
  int64_t num_units() const { return 1 + static_cast<int64_t>(blocks_.size()); }
  UnitOrder unit_order() const;
  int64_t unit_of(size_t parameter_index) const { return parameter_units_[parameter_index]; }
  // nullptr (the default) = run the units as they are. The wrapper must outlive every
  // forward and backward through the chunk.
  void wrap_units(UnitWrapper* wrapper) { wrapper_ = wrapper; }
  // Activation recomputation (model/recompute.h) of this chunk's first `layers` blocks (0 =
  // all): full recomputes each block's forward in its backward, keeping only its input;
  // selective recomputes the attention core from the q, k, v it keeps, where the core keeps
  // more than its output (selective_recomputes_attention).
  void set_recompute(Recompute mode, int64_t layers = 0);
  // Mixture of experts: every forward without a cache records one MoeLayerStats per MoE
  // layer; take_moe_stats() hands them over and clears.
  std::vector<MoeLayerStats> take_moe_stats();

 private:
  static constexpr size_t kNone = static_cast<size_t>(-1);
  struct BlockParams {  // indices into parameters_; kNone where the block has no such parameter
    size_t norm1_weight = kNone, norm1_bias = kNone;
    size_t q_weight = kNone, q_bias = kNone;
    size_t kv_weight = kNone, k_bias = kNone, v_bias = kNone;
    size_t attn_out_weight = kNone, attn_out_bias = kNone;
    size_t norm2_weight = kNone, norm2_bias = kNone;
    size_t fc_weight = kNone, fc_bias = kNone, fc_out_weight = kNone, fc_out_bias = kNone;  // dense
    size_t router_weight = kNone, expert_fc_weight = kNone, expert_out_weight = kNone;      // MoE
  };

  // Construction (gpt.cpp).
  void add_block(int64_t layer);
  size_t add(const std::string& name, std::vector<int64_t> shape, InitKind kind, double std,
             bool weight_decay, int64_t split_dim = -1, std::vector<int64_t> blocks = {});
  // A bias (split as add() splits), zero-initialized, without weight decay.
  size_t add_bias(const std::string& name, std::vector<int64_t> shape, int64_t split_dim,
                  std::vector<int64_t> blocks = {});
  // A parameter applied to the residual stream (norms, the biases of row-split projections):
  // replicated over tp, without weight decay; under sequence parallelism each tp rank's
  // gradient is only its tokens' part.
  size_t add_replicated(const std::string& name, std::vector<int64_t> shape, InitKind kind);
  size_t add_experts(const std::string& name, std::vector<int64_t> shape, double std);
  // Every parameter enters here: initialized, and recorded in the layer unit being built.
  size_t add_parameter(const std::string& name, const ShardSpec& spec, InitKind kind, double std,
                       bool weight_decay);
  const at::Tensor& weight(size_t index) const { return parameters_[index].value; }
  // y + the bias parameters_[index] (broadcast over the leading dims); y when index is kNone.
  at::Tensor plus_bias(const at::Tensor& y, size_t index) const {
    return index == kNone ? y : y + weight(index);
  }

  // The stage (gpt.cpp).
  at::Tensor head_loss(const at::Tensor& x, const at::Tensor& targets,
                       const ForwardContext& context);  // x: last block's output
  // Final-normed hidden states (..., C) -> logits (..., V) over the whole vocabulary.
  at::Tensor vocab_logits(const at::Tensor& normed);

  // The blocks (gpt_block.cpp).
  // Hidden states after the final norm, full sequence: (B, T, C), each tp rank a replica.
  at::Tensor hidden(const at::Tensor& tokens, const ForwardContext& context);
  // The blocks in turn, each entered and left through the wrapper.
  at::Tensor blocks_forward(at::Tensor x, const ForwardContext& context);
  at::Tensor enter(int64_t unit, const at::Tensor& x) {
    return wrapper_ ? wrapper_->enter(unit, x) : x;
  }
  at::Tensor leave(int64_t unit, const at::Tensor& y) {
    return wrapper_ ? wrapper_->leave(unit, y) : y;
  }
  // One transformer block: attention, then the MLP or (MoE layers) the experts.
  at::Tensor block_forward(at::Tensor x, size_t layer, const ForwardContext& context);
  at::Tensor embed(const at::Tensor& tokens, const ForwardContext& context);
  at::Tensor norm(const at::Tensor& x, size_t weight_index, size_t bias_index) const;
  bool recomputes(int64_t block, Recompute mode) const;
  at::Tensor mlp(const at::Tensor& x, const BlockParams& block, const ForwardContext& context);
  at::Tensor moe(const at::Tensor& x, const BlockParams& block, int64_t layer,
                 const ForwardContext& context);
  at::Tensor enter_tp(const at::Tensor& x, bool sequence_parallel);  // before a column split
  at::Tensor leave_tp(const at::Tensor& x, bool sequence_parallel);  // after a row split
  // The positions (T) int64 of the T tokens this rank holds from `past` on; with tp_part they
  // are this tp rank's part of them (sequence parallelism). Under context parallelism: the
  // rank's two chunks of a whole training sequence.
  at::Tensor token_positions(int64_t T, int64_t past, bool tp_part) const;
  // The positions of the call's T tokens (tp_part as above): serving's, or token_positions,
  // restarted at each document start when the context packs documents ((B, T) then).
  at::Tensor positions_of(int64_t T, const ForwardContext& context, bool tp_part) const;

  // Attention (gpt_attention.cpp).
  at::Tensor attention(const at::Tensor& x, const BlockParams& block, int64_t layer,
                       const ForwardContext& context);
  // softmax(q k^T scale, causal) v of q (B, H_l, T, D) and k, v (B, K_l, T, D) where the
  // context keeps keys and values: nowhere, a KVCache, or the paged pool.
  at::Tensor attend_sequences(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
                              int64_t layer, const at::Tensor& documents);
  at::Tensor attend_cached(const at::Tensor& q, at::Tensor k, at::Tensor v, int64_t layer,
                           KVCache& cache);
  at::Tensor attend_paged(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
                          int64_t layer, const PagedBatch& batch);
  // Grouped-query: the key/value heads (B, K_l, L, D) as the attention core wants them for
  // this rank's query heads.
  at::Tensor expand_kv(const at::Tensor& kv) const;
  // softmax(q k^T scale, causal) v by the configured kernel, or across the cp ranks; with
  // documents (B, T) (ForwardContext::documents) only within each document.
  at::Tensor attention_core(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
                            int64_t past, const at::Tensor& documents = {});
  const at::Tensor& causal_mask(int64_t query_len, int64_t key_len);

  ModelConfig config_;
  BlockSpec block_;
  uint64_t seed_;
  ParameterInit init_ = ParameterInit::random;
  at::ScalarType dtype_;
  Comm* tp_comm_;           // nullptr when there is no tensor parallelism
  bool sequence_parallel_;  // of the training forward (forward_stage)
  Comm* ep_comm_;           // nullptr when every expert is on this rank
  int64_t ep_size_ = 1, ep_rank_ = 0;
  ContextParallel cp_;            // comm nullptr without context parallelism
  at::Tensor context_positions_;  // (seq_len / cp) int64: this rank's tokens' positions
  Recompute recompute_ = Recompute::none;
  int64_t recompute_layers_ = 0;  // the first blocks that recompute (all of them when 0)
  std::vector<MoeLayerStats> moe_stats_;
  int64_t tp_size_ = 1, tp_rank_ = 0;
  int64_t local_heads_, local_kv_heads_;  // heads this rank computes
  bool kv_replicated_;                    // kv heads not divisible by tp: every rank holds all
  int64_t vocab_per_rank_;                // rows of the (padded) vocabulary on each rank
  StageSpec stage_;

  std::vector<Parameter> parameters_;
  std::vector<int64_t> parameter_units_;  // per parameter: its layer unit
  int64_t adding_unit_ = kOuterUnit;      // unit of the parameters add() creates
  UnitWrapper* wrapper_ = nullptr;
  size_t token_embedding_ = kNone, position_embedding_ = kNone;
  size_t final_norm_weight_ = kNone, final_norm_bias_ = kNone, head_weight_ = kNone;
  std::vector<BlockParams> blocks_;  // weight fields a layer does not use are kNone
  RotaryEmbedding rope_;             // rotary positions only
  std::map<std::pair<int64_t, int64_t>, at::Tensor> causal_masks_;  // (Tq, Tk) bool, true = hidden
};

}  // namespace strata
