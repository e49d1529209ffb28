// The cost model: per pipeline rank, the parameters, activations and per-microbatch times of
// the layers it holds; then the schedule simulator for the pipeline, and the data-parallel
// phase (its gradient reduction overlapping each stage's last backward and the pipeline's
// drain) and the optimizer after it. Notation: t tp, b micro_batch, n = b * s / cp tokens a rank
// computes, e bytes of an activation element, R matmul FLOP/s, M memory bytes/s.
#include "strata/plan/cost_model.h"

#include <algorithm>
#include <cmath>

#include "strata/core/config.h"
#include "strata/core/error.h"
#include "strata/core/stages.h"
#include "strata/pipeline/generators.h"
#include "strata/pipeline/simulator.h"
#include "strata/plan/collectives.h"
#include "strata/plan/context_parallel.h"

namespace strata {
namespace {

// Elementwise passes over the data (a read and a write each unless noted), by the rate they
// run at: plain data movement at memory_bandwidth_gbs (M), kernels with arithmetic at
// elementwise_gbs (E; the same on GPUs, slower on CPUs).
constexpr double kResidualAddPasses = 6;     // M: 2 residual adds, 2 reads + 1 write each
constexpr double kNormPasses = 4;            // E: 2 norms
constexpr double kScoreScaleMaskPasses = 4;  // M: scale and causal mask of a*s*s scores
constexpr double kSoftmaxPasses = 2;         // E: softmax of the scores
constexpr double kDropoutPasses = 3;         // M: mask generation and apply, per dropout site
constexpr double kHeadCopyPasses = 2;        // M: q, k, v made contiguous per head; the merge
constexpr double kRopePasses = 8;            // M: rotate q and k: two products, a sum, a concat
constexpr double kGeluPasses = 2;            // E
constexpr double kSwigluPasses = 5;          // E: silu (read+write), the product (2 reads+write)
constexpr double kFinalNormPasses = 2;       // E
constexpr double kEmbeddingPasses = 3;       // M: lookup, position add
constexpr double kCrossEntropyForwardPasses = 8;   // E: max, shift, exp, sum, pick the target...
constexpr double kCrossEntropyBackwardPasses = 4;  // E: softmax minus one-hot, scaled
constexpr double kBackwardElementwiseFactor = 2;  // a backward op reads input and grad, writes grad
constexpr double kGradAccumulatePasses = 3;       // M: .grad += dW, two reads and one write

// Kernels of one layer and microbatch, each charged device.kernel_overhead_us. Forward: 2 norms,
// the 4 weight multiplies (q/k/v, out projection, MLP up and down), the attention core's 2
// batched multiplies and its fused scale-mask-softmax, 2 bias-dropout-residual adds, the
// activation function, and the copies that split and merge heads. The input gradient runs the
// backward of each (the core's multiplies twice over), the weight gradient one multiply per
// weight; selective recomputation repeats the core's 3.
constexpr double kLayerKernelsForward = 14;
constexpr double kLayerKernelsInputGrad = 20;
constexpr double kLayerKernelsWeightGrad = 4;
// Of those, the attention core's, forward and input gradient: eager 3 and 5 (its multiplies
// and softmax), blockwise 1 and 2 (one fused kernel; the backward's row sums of dO * O first).
struct CoreKernels {
  double forward, input_grad;
};
CoreKernels attention_core_kernels(AttentionKernel kernel) {
  return kernel == AttentionKernel::eager ? CoreKernels{3, 5} : CoreKernels{1, 2};
}

// Optimizer step + clipping, bytes moved per local parameter. fp32/fp64: strata's fused AdamW
// (optim/adamw.cpp: reads value, gradient and both moments, writes value and moments: 28
// bytes at 4 bytes per element) + clipping (the norm reads the gradients, 4; scaling them
// rewrites them, 8) + zero_grad (4) = 44. bf16: a fused
// mixed-precision AdamW (read fp32 master, m, v and the 2-byte gradient; write master, m, v
// and the 2-byte weight) + reading the gradients for the norm.
double optimizer_bytes_per_parameter(Precision precision) {
  switch (precision) {
    case Precision::bf16:
    case Precision::fp16:
      return 30;
    case Precision::fp32:
      return 44;
    case Precision::fp64:
      return 88;
  }
  return 0;
}

// Reduce-scatter granularity of ZeRO-2/3 gradients: the buffer the reduction needs.
constexpr double kZeroBucketElements = 25e6;

// Seconds of one layer's elementwise forward for one microbatch on one rank, and of its
// attention-score part (what selective recomputation repeats). M and E in bytes per second.
struct ElementwiseSeconds {
  double layer = 0, scores = 0;
};
ElementwiseSeconds layer_elementwise_forward(const TransformerSpec& spec, const PlanLayout& layout,
                                             bool moe_layer, double e, double M, double E) {
  const double t = static_cast<double>(layout.tp), cp = static_cast<double>(layout.cp);
  const double n = static_cast<double>(layout.micro_batch * spec.seq_len) / cp;
  const double replicated_tokens = layout.sequence_parallel ? n / t : n;
  const double h = static_cast<double>(spec.d_model), kv = static_cast<double>(spec.kv_width());
  const double s = static_cast<double>(spec.seq_len);
  // The eager kernel's scores pass through memory; the blockwise kernel's tiles stay in cache
  // (in SRAM on a GPU), their softmax priced in its rate (blockwise_attention_efficiency).
  const double scores = spec.attention == AttentionKernel::eager
                            ? static_cast<double>(spec.n_heads) / t * s * (s / cp) *
                                  static_cast<double>(layout.micro_batch)
                            : 0.0;
  double memory = kResidualAddPasses * e * replicated_tokens * h;
  memory += kHeadCopyPasses * e * n * (2 * h + 2 * kv) / t;
  if (spec.dropout) memory += 2 * kDropoutPasses * e * replicated_tokens * h;
  if (!spec.learned_positions) memory += kRopePasses * e * n * (h + kv) / t;
  double kernels = kNormPasses * e * replicated_tokens * h;
  const double width =
      moe_layer ? static_cast<double>(spec.expert_width()) : static_cast<double>(spec.d_ff);
  const double tokens = moe_layer ? n * expert_token_factor(spec.moe) : n;
  kernels += (spec.mlp_gated(moe_layer) ? kSwigluPasses : kGeluPasses) * e * tokens * width / t;
  ElementwiseSeconds seconds;
  seconds.scores = (kScoreScaleMaskPasses + (spec.dropout ? kDropoutPasses : 0)) * e * scores / M +
                   kSoftmaxPasses * e * scores / E;
  seconds.layer = memory / M + kernels / E + seconds.scores;
  return seconds;
}

// One layer's weight multiplies on a rank (q/k/v, out projection, MLP up, MLP down): the rows
// (tokens) each multiplies, its in and out widths (the split one divided by tp), and how many
// such matrices the rank holds. An expert layer's rank holds experts / ep of them, each
// multiplying the tokens the ep group routes to it: b s / cp x top_k x ep / experts in
// expectation.
struct WeightMultiply {
  double rows, in, out, count;
  double flops() const { return 2 * rows * in * out * count; }
};
std::vector<WeightMultiply> layer_weight_multiplies(const TransformerSpec& spec,
                                                    const PlanLayout& layout, bool moe_layer) {
  const double t = static_cast<double>(layout.tp);
  const double h = static_cast<double>(spec.d_model), kv = static_cast<double>(spec.kv_width());
  const double n =
      static_cast<double>(layout.micro_batch * spec.seq_len) / static_cast<double>(layout.cp);
  const double width =
      moe_layer ? static_cast<double>(spec.expert_width()) : static_cast<double>(spec.d_ff);
  const double up = spec.mlp_gated(moe_layer) ? 2 * width : width;
  double experts = 1, mlp_rows = n;
  if (moe_layer) {
    const double ep = static_cast<double>(layout.ep);
    experts = static_cast<double>(spec.moe.num_experts) / ep;
    mlp_rows = n * expert_token_factor(spec.moe) / experts;
  }
  return {{n, h, (h + 2 * kv) / t, 1.0},
          {n, h / t, h, 1.0},
          {mlp_rows, h, up / t, experts},
          {mlp_rows, width / t, h, experts}};
}

// The fraction of peak one layer's weight multiplies reach on a rank: each at the shape
// efficiency of its smallest side (its rows, in or out width), weighted by its FLOPs.
double layer_matmul_efficiency(const TransformerSpec& spec, const PlanLayout& layout,
                               bool moe_layer, const DeviceProfile& device) {
  double flops = 0, at_peak = 0;
  for (const WeightMultiply& multiply : layer_weight_multiplies(spec, layout, moe_layer)) {
    flops += multiply.flops();
    at_peak += multiply.flops() /
               device.matmul_shape_efficiency(std::min({multiply.rows, multiply.in, multiply.out}));
  }
  return flops / at_peak;
}

// The schedule of the layout's pipeline for `microbatches` microbatches.
Schedule make_schedule(const PlanLayout& layout, int64_t microbatches) {
  Layout pipeline = layout;
  pipeline.microbatches = microbatches;
  return build_schedule(pipeline);
}

// The data-parallel buckets of a stage's gradients: runs of layer units about
// parallel.bucket_mb's default large, never splitting a unit (ZeRO-3: one unit each).
int64_t reduction_buckets(double gradient_bytes, int64_t units, int64_t zero) {
  if (zero == 3) return units;
  const double bucket_bytes = ParallelConfig{}.bucket_mb * 1024 * 1024;
  const auto wanted = static_cast<int64_t>(std::ceil(gradient_bytes / bucket_bytes));
  return std::clamp<int64_t>(wanted, 1, units);
}

}  // namespace

double data_parallel_exposed(double reduction_s, int64_t buckets, double backward_s) {
  STRATA_CHECK(buckets >= 1, "buckets ", buckets);
  // Bucket i (1-based) is ready at backward_s * i / k and the reductions run one after another,
  // each reduction_s / k: the last ends at max over i of (ready_i + (k - i + 1) * reduction_s /
  // k), which is the larger of the two ends below.
  const double k = static_cast<double>(buckets);
  return std::max(reduction_s / k, reduction_s - backward_s * (k - 1) / k);
}

// One pipeline rank: what it holds and what one microbatch costs it.
struct CostModel::StageModel {
  int64_t layers = 0;
  double dense_params = 0;   // replicated over dp * cp
  double expert_params = 0;  // replicated over dp * cp / ep
  double largest_layer_params = 0;
  // PowerSGD: the elements its layers' weight matrices travel as ((m + n) r where that is under
  // m n / 2, else m n) and the parameters of those matrices (the rest travels uncompressed).
  double powersgd_elements = 0, powersgd_matrix_params = 0;
  double powersgd_flops = 0;    // the two factor products per matrix and step, 4 m n r
  double activation_bytes = 0;  // one microbatch through all its layers
  double working_set = 0;       // what recomputing one layer holds on top
  double forward_compute = 0, input_compute = 0, weight_compute = 0;
  ComputeBreakdown parts;  // the three above by kind
  double forward_tp = 0, backward_tp = 0;
  double forward_cp = 0, backward_cp = 0;  // exposed cp exchange, recomputation's included
  double cp_bytes = 0;                     // what the cp exchanges send, all passes
  double forward_ep = 0, backward_ep = 0;
  double transfer = 0;             // one activation (or gradient) message to the neighbour stage
  double tied_embedding_sync = 0;  // last stage: all-reduce of the tied embedding's gradient

  double forward() const { return forward_compute + forward_tp + forward_cp + forward_ep; }
  double backward_input() const { return input_compute + backward_tp + backward_cp + backward_ep; }
  double per_microbatch() const { return forward() + backward_input() + weight_compute; }
};

PlanInputs plan_inputs(const TransformerSpec& model, const ClusterProfile& cluster,
                       int64_t global_batch) {
  PlanInputs inputs;
  inputs.model = model;
  inputs.cluster = cluster;
  inputs.global_batch = global_batch;
  inputs.precision = parse_precision(cluster.device.precision);
  return inputs;
}

CostModel::CostModel(PlanInputs inputs) : inputs_(std::move(inputs)) {}
CostModel::~CostModel() = default;

std::vector<CostModel::StageModel> CostModel::stages(const PlanLayout& layout) const {
  const TransformerSpec& spec = inputs_.model;
  const ClusterProfile& cluster = inputs_.cluster;
  const NetworkProfile& network = cluster.network;
  const StateBytesPerParameter bytes_per = state_bytes_per_parameter(inputs_.precision);
  const double e = bytes_per.activation_element;
  const double t = static_cast<double>(layout.tp), cp = static_cast<double>(layout.cp);
  const double peak = cluster.device.peak_tflops * 1e12;
  const double kernel = cluster.device.kernel_overhead_us * 1e-6;
  const double R_attention = peak * (spec.attention == AttentionKernel::eager
                                         ? cluster.device.attention_matmul_efficiency()
                                         : cluster.device.blockwise_attention_rate());
  const double M = cluster.device.memory_bandwidth_gbs * 1e9;
  const double E = cluster.device.elementwise_rate_gbs() * 1e9;
  const double n = static_cast<double>(layout.micro_batch * spec.seq_len) / cp;
  const double h = static_cast<double>(spec.d_model);
  const double replicated_tokens = layout.sequence_parallel ? n / t : n;
  const int64_t G = cluster.devices_per_node;
  const GroupSpan tp_group = group_span(1, layout.tp, G);
  const GroupSpan ep_group = group_span(layout.tp, layout.ep, G);
  const GroupSpan pp_group = group_span(layout.tp * layout.cp * layout.dp, layout.pp, G);
  const ParameterCounts counts = parameter_counts(spec);
  const double vocab_per_rank = std::ceil(static_cast<double>(spec.vocab_size) / t);

  ActivationOptions activation;
  activation.tp = layout.tp;
  activation.cp = layout.cp;
  activation.sequence_parallel = layout.sequence_parallel;
  activation.recompute = layout.recompute;
  activation.element_bytes = static_cast<int64_t>(e);
  ActivationOptions no_recompute = activation;
  no_recompute.recompute = Recompute::none;

  // Collectives of one layer for one microbatch: the tp all-reduce (or all-gather +
  // reduce-scatter) of the b*s*h activations, the expert dispatch (or combine) all-to-all, the
  // cp exchange of K and V (context_parallel.h).
  // Around each block: an all-reduce, or under sequence parallelism an all-gather before it
  // and a reduce-scatter after it (the same bytes, one more op).
  const double tp_all_gather = all_gather_seconds(network, tp_group, e * n * h);
  const double tp_reduce_scatter = reduce_scatter_seconds(network, tp_group, e * n * h);
  const double tp_block = layout.sequence_parallel
                              ? tp_all_gather + tp_reduce_scatter
                              : all_reduce_seconds(network, tp_group, e * n * h);
  const double expert_tokens = replicated_tokens * expert_token_factor(spec.moe);
  const double ep_all_to_all = all_to_all_seconds(network, ep_group, e * expert_tokens * h);
  // The attention core as its kernel executes it (transformer.h, attention_core_flops), the
  // same in every layer, at its own rate; the cp exchange of K and V hides behind it as far as
  // it can.
  const double split = t * cp;
  const AttentionCoreFlops core_flops = attention_core_flops(spec, layout.micro_batch);
  const double core_forward = core_flops.forward / split / R_attention;
  const double core_input_grad = core_flops.input_grad / split / R_attention;
  const CoreKernels core_kernels = attention_core_kernels(spec.attention);
  const CoreKernels eager_kernels = attention_core_kernels(AttentionKernel::eager);
  const double forward_kernels =
      kLayerKernelsForward - eager_kernels.forward + core_kernels.forward;
  const double input_grad_kernels =
      kLayerKernelsInputGrad - eager_kernels.input_grad + core_kernels.input_grad;
  const ContextParallelExchange cp_exchange =
      context_parallel_exchange(spec, layout, cluster, e, core_forward, core_input_grad);

  std::vector<StageModel> out(layout.pp);
  const std::vector<int64_t>& chunk_layers = partition(layout.pp * layout.vpp);
  int64_t first_layer = 0;
  for (size_t c = 0; c < chunk_layers.size(); ++c) {
    StageModel& stage = out[c % layout.pp];
    const int64_t end_layer = first_layer + chunk_layers[c];
    for (int64_t layer = first_layer; layer < end_layer; ++layer) {
      const bool moe = spec.is_moe_layer(layer);
      ++stage.layers;
      const PassFlops flops = layer_flops(spec, layout.micro_batch, moe);
      const double local_dense =
          (moe ? counts.moe_layer - counts.expert_params : counts.dense_layer) / t;
      const double local_expert =
          moe ? counts.expert_params / (t * static_cast<double>(layout.ep)) : 0.0;
      stage.dense_params += local_dense;
      stage.expert_params += local_expert;
      stage.largest_layer_params = std::max(stage.largest_layer_params, local_dense + local_expert);

      if (layout.compression == GradientCompression::powersgd) {
        const double r = static_cast<double>(layout.powersgd_rank);
        for (const WeightMultiply& matrix : layer_weight_multiplies(spec, layout, moe)) {
          const double elements = matrix.in * matrix.out;
          const bool pays = (matrix.in + matrix.out) * r < elements / 2;
          stage.powersgd_matrix_params += matrix.count * elements;
          stage.powersgd_elements +=
              matrix.count * (pays ? (matrix.in + matrix.out) * r : elements);
          if (pays) stage.powersgd_flops += matrix.count * 4 * elements * r;
        }
      }
      stage.activation_bytes += layer_activation_bytes(spec, layout.micro_batch, moe, activation);
      if (layout.recompute == Recompute::full) {
        stage.working_set = std::max(
            stage.working_set, layer_activation_bytes(spec, layout.micro_batch, moe, no_recompute) +
                                   cp_exchange.activation_bytes);
      } else {
        stage.activation_bytes += cp_exchange.activation_bytes;
      }
      if (layout.recompute == Recompute::selective) {
        stage.working_set = std::max(stage.working_set, attention_core_activation_bytes(
                                                            spec, layout.micro_batch, activation));
      }

      const double R = peak * layer_matmul_efficiency(spec, layout, moe, cluster.device);
      // The model's full s x s core (layer_flops) is what the weight multiplies are not.
      const double core = flops.attention_core_forward;
      const double forward_matmul =
          (flops.forward - core) / split / R + core_forward + forward_kernels * kernel;
      const double input_grad_matmul =
          (flops.input_grad - 2 * core) / split / R + core_input_grad + input_grad_kernels * kernel;
      const ElementwiseSeconds elementwise = layer_elementwise_forward(spec, layout, moe, e, M, E);
      const double forward_elementwise = elementwise.layer;
      const double core_elementwise = elementwise.scores;

      const double accumulate =
          kGradAccumulatePasses * bytes_per.grads * (local_dense + local_expert) / M;
      stage.forward_compute += forward_matmul + forward_elementwise;
      stage.input_compute += input_grad_matmul + kBackwardElementwiseFactor * forward_elementwise;
      stage.weight_compute +=
          flops.weight_grad / split / R + kLayerKernelsWeightGrad * kernel + accumulate;
      stage.parts.matmul +=
          (flops.forward - 3 * core + flops.input_grad + flops.weight_grad) / split / R;
      stage.parts.attention += core_forward + core_input_grad;
      stage.parts.elementwise +=
          (1 + kBackwardElementwiseFactor) * forward_elementwise + accumulate;
      stage.parts.kernels +=
          (forward_kernels + input_grad_kernels + kLayerKernelsWeightGrad) * kernel;
      stage.forward_tp += 2 * tp_block;
      stage.backward_tp += 2 * tp_block;
      stage.forward_cp += cp_exchange.forward_seconds;
      stage.backward_cp += cp_exchange.backward_seconds + cp_exchange.recompute_seconds;
      stage.cp_bytes +=
          cp_exchange.forward_bytes + cp_exchange.backward_bytes + cp_exchange.recompute_bytes;
      if (moe) {
        stage.forward_ep += 2 * ep_all_to_all;
        stage.backward_ep += 2 * ep_all_to_all;
      }
      if (layout.recompute == Recompute::full) {
        stage.input_compute += forward_matmul + forward_elementwise;
        stage.parts.recompute += forward_matmul + forward_elementwise;
        stage.backward_tp += 2 * tp_block;
        if (moe) stage.backward_ep += 2 * ep_all_to_all;
      } else if (layout.recompute == Recompute::selective) {
        const double repeated = core_forward + core_elementwise + core_kernels.forward * kernel;
        stage.input_compute += repeated;
        stage.parts.recompute += repeated;
      }
    }
    first_layer = end_layer;
  }

  // Embedding on the first stage: vocab-parallel lookup whose partial rows are all-reduced
  // (reduce-scattered under sequence parallelism), plus learned positions.
  StageModel& first = out.front();
  const double embedding_params = vocab_per_rank * h;
  const double position_params =
      spec.learned_positions ? static_cast<double>(spec.seq_len) * h : 0.0;
  first.dense_params += embedding_params + position_params;
  const double embedding_pass = kEmbeddingPasses * e * n * h / M;
  const double embedding_accumulate =
      kGradAccumulatePasses * bytes_per.grads * (embedding_params + position_params) / M;
  first.forward_compute += embedding_pass;
  first.input_compute += embedding_pass;
  first.weight_compute += embedding_accumulate;
  first.parts.elementwise += 2 * embedding_pass + embedding_accumulate;
  first.forward_tp += layout.sequence_parallel ? tp_reduce_scatter : tp_block;
  if (layout.sequence_parallel) first.backward_tp += tp_all_gather;

  // Head on the last stage: final norm, (gather,) logits matmul, vocab-parallel cross-entropy
  // (three all-reduces of one number per token), which keeps the logits and their softmax in
  // at least fp32.
  StageModel& last = out.back();
  const PassFlops head = head_flops(spec, layout.micro_batch);
  const double head_params = spec.tied_embeddings && layout.pp == 1 ? 0.0 : vocab_per_rank * h;
  const double final_norm_params = spec.norm_bias ? 2 * h : h;
  last.dense_params += head_params + final_norm_params;
  const double logits = n * vocab_per_rank;
  const double R = peak * cluster.device.matmul_shape_efficiency(std::min({n, h, vocab_per_rank}));
  const double loss_element = std::max(4.0, e);
  last.activation_bytes += e * replicated_tokens * h + e * n * h + 2 * loss_element * logits;
  const double head_forward = head.forward / (t * cp) / R;
  const double head_input = head.input_grad / (t * cp) / R;
  const double head_weight = head.weight_grad / (t * cp) / R;
  const double head_forward_elementwise = kFinalNormPasses * e * replicated_tokens * h / E +
                                          kCrossEntropyForwardPasses * loss_element * logits / E;
  const double head_input_elementwise =
      kBackwardElementwiseFactor * kFinalNormPasses * e * replicated_tokens * h / E +
      kCrossEntropyBackwardPasses * loss_element * logits / E;
  const double head_accumulate = kGradAccumulatePasses * bytes_per.grads * head_params / M;
  last.forward_compute += head_forward + head_forward_elementwise;
  last.input_compute += head_input + head_input_elementwise;
  last.weight_compute += head_weight + head_accumulate;
  last.parts.matmul += head_forward + head_input + head_weight;
  last.parts.elementwise += head_forward_elementwise + head_input_elementwise + head_accumulate;
  last.forward_tp += 3 * all_reduce_seconds(network, tp_group, 4 * n);
  last.forward_tp += layout.sequence_parallel ? tp_all_gather : 0.0;
  last.backward_tp += layout.sequence_parallel ? tp_reduce_scatter : tp_block;
  if (spec.tied_embeddings && layout.pp > 1) {
    // The last stage's copy of the tied embedding and the first stage's are kept equal by
    // all-reducing their gradients once per step (Megatron's embedding group).
    last.tied_embedding_sync = all_reduce_seconds(
        network, group_span(layout.tp * layout.cp * layout.dp * (layout.pp - 1), 2, G),
        bytes_per.grads * head_params);
  }

  const double message = e * (layout.sequence_parallel ? n / t : n) * h;
  for (StageModel& stage : out) {
    stage.transfer = layout.pp > 1 ? p2p_seconds(network, pp_group.crosses_nodes(), message) : 0.0;
  }
  return out;
}

std::vector<CostModel::StageShare> CostModel::stage_shares(const PlanLayout& layout) const {
  std::vector<StageShare> out;
  for (const StageModel& stage : stages(layout)) {
    out.push_back({stage.layers, stage.dense_params + stage.expert_params});
  }
  return out;
}

const std::vector<int64_t>& CostModel::partition(int64_t chunks) const {
  auto found = partition_cache_.find(chunks);
  if (found != partition_cache_.end()) return found->second;
  // The runtime's partition (core/stages.h stage_layers): layers balanced against the head, costed
  // in training FLOPs per token.
  const TransformerSpec& spec = inputs_.model;
  const double seq = static_cast<double>(spec.seq_len);
  const double per_layer = layer_flops(spec, 1, false).total() / seq;
  const double head = head_flops(spec, 1).total() / seq;
  return partition_cache_
      .emplace(chunks, balanced_partition(spec.n_layers, chunks, per_layer, 0.0, head))
      .first->second;
}

const std::vector<double>& CostModel::inflight_per_stage(const PlanLayout& layout,
                                                         int64_t microbatches) {
  // The in-flight counts follow from each rank's action order alone: any costs will do.
  // Except under GPipe (which holds all m), a stage's peak is reached within its warmup and
  // first steady round, so p * (2v + 1) microbatches (a multiple of p, as interleaving needs)
  // show it and keep long pipelines cheap to simulate.
  const int64_t shown = layout.schedule == PipelineSchedule::gpipe
                            ? microbatches
                            : std::min(microbatches, layout.pp * (2 * layout.vpp + 1));
  const auto key = std::make_tuple(layout.schedule, layout.pp, shown, layout.vpp);
  auto found = inflight_cache_.find(key);
  if (found != inflight_cache_.end()) return found->second;
  std::vector<double> inflight(layout.pp, 1.0);
  if (layout.pp > 1) {
    const Schedule schedule = make_schedule(layout, shown);
    const SimulationResult result = simulate_schedule(schedule, {StageCosts{}});
    ++simulations_;
    for (int64_t r = 0; r < layout.pp; ++r)
      inflight[r] = result.per_stage[r].peak_inflight_microbatches;
  }
  return inflight_cache_.emplace(key, std::move(inflight)).first->second;
}

std::vector<CostModel::StageMemory> CostModel::stage_memory(const PlanLayout& layout,
                                                            const std::vector<StageModel>& models) {
  const int64_t microbatches = microbatches_of(layout, inputs_.global_batch);
  const std::vector<double>& inflight_counts = inflight_per_stage(layout, microbatches);
  const StateBytesPerParameter bytes_per = state_bytes_per_parameter(inputs_.precision);
  const int64_t replicas = layout.dp * layout.cp;
  const int64_t expert_replicas = replicas / layout.ep;
  const double e = bytes_per.activation_element;
  const double n = static_cast<double>(layout.micro_batch * inputs_.model.seq_len) /
                   static_cast<double>(layout.cp);
  const double message = e * (layout.sequence_parallel ? n / static_cast<double>(layout.tp) : n) *
                         static_cast<double>(inputs_.model.d_model);

  std::vector<StageMemory> out(layout.pp);
  for (int64_t r = 0; r < layout.pp; ++r) {
    const StageModel& stage = models[r];
    const ModelStateBytes dense =
        model_state_bytes(stage.dense_params, layout.zero, replicas, inputs_.precision);
    const ModelStateBytes expert =
        model_state_bytes(stage.expert_params, layout.zero, expert_replicas, inputs_.precision);
    MemoryBreakdown& memory = out[r].memory;
    out[r].inflight = inflight_counts[r];
    memory.params = dense.params + expert.params;
    memory.grads = dense.grads + expert.grads;
    memory.optimizer = dense.optimizer + expert.optimizer;
    memory.activations = inflight_counts[r] * stage.activation_bytes + stage.working_set;
    // Gradient reduction: ZeRO 0/1 reduce one flat copy of all gradients (the runtime
    // concatenates them); ZeRO 2/3 reduce-scatter bucket by bucket. ZeRO-3 gathers the
    // parameters of the running layer and prefetches the next. A pipeline stage keeps a send
    // and a receive buffer for activations and for gradients.
    const double gradient_bytes = bytes_per.grads * (stage.dense_params + stage.expert_params);
    if (replicas > 1) {
      memory.buffers += layout.zero <= 1
                            ? gradient_bytes
                            : std::min(gradient_bytes, bytes_per.grads * kZeroBucketElements);
    }
    if (layout.zero == 3) memory.buffers += 2 * bytes_per.weights * stage.largest_layer_params;
    if (layout.pp > 1) memory.buffers += 4 * message;
  }
  return out;
}

MemoryBreakdown CostModel::memory(const PlanLayout& layout, int64_t* fullest_stage,
                                  double* inflight) {
  const std::vector<StageMemory> memories = stage_memory(layout, stages(layout));
  size_t fullest = 0;
  for (size_t r = 1; r < memories.size(); ++r) {
    if (memories[r].memory.total() > memories[fullest].memory.total()) fullest = r;
  }
  if (fullest_stage != nullptr) *fullest_stage = static_cast<int64_t>(fullest);
  if (inflight != nullptr) *inflight = memories[fullest].inflight;
  return memories[fullest].memory;
}

Prediction CostModel::predict(const PlanLayout& layout) { return predict(layout, true); }

Prediction CostModel::predict_lower_bound(const PlanLayout& layout) {
  return predict(layout, false);
}

Prediction CostModel::predict(const PlanLayout& layout, bool simulate_pipeline) {
  const TransformerSpec& spec = inputs_.model;
  const ClusterProfile& cluster = inputs_.cluster;
  const NetworkProfile& network = cluster.network;
  const StateBytesPerParameter bytes_per = state_bytes_per_parameter(inputs_.precision);
  const int64_t microbatches = microbatches_of(layout, inputs_.global_batch);
  const double m = static_cast<double>(microbatches);

  Prediction prediction;
  prediction.layout = layout;
  prediction.microbatches = microbatches;
  const std::vector<StageModel> models = stages(layout);
  const std::vector<StageMemory> memories = stage_memory(layout, models);
  for (int64_t r = 0; r < layout.pp; ++r) {
    prediction.stages.push_back({models[r].layers, memories[r].memory.total(), memories[r].inflight,
                                 m * models[r].per_microbatch()});
    if (memories[r].memory.total() > memories[prediction.fullest_stage].memory.total()) {
      prediction.fullest_stage = r;
    }
  }
  prediction.memory = memories[prediction.fullest_stage].memory;
  prediction.inflight_microbatches = memories[prediction.fullest_stage].inflight;
  prediction.memory_capacity = cluster.memory_bytes();
  prediction.fits = prediction.memory.total() <= prediction.memory_capacity;
  const int64_t G = cluster.devices_per_node;
  prediction.tp_spans_nodes = group_span(1, layout.tp, G).crosses_nodes();
  prediction.links.tensor_parallel = prediction.tp_spans_nodes;
  prediction.links.context_parallel = group_span(layout.tp, layout.cp, G).crosses_nodes();
  prediction.links.expert = group_span(layout.tp, layout.ep, G).crosses_nodes();
  prediction.links.data_parallel = group_span(layout.tp, layout.dp * layout.cp, G).crosses_nodes();
  prediction.links.pipeline =
      group_span(layout.tp * layout.cp * layout.dp, layout.pp, G).crosses_nodes();

  std::vector<StageCosts> costs(layout.pp);
  int64_t busiest = 0;
  for (int64_t r = 0; r < layout.pp; ++r) {
    costs[r].forward = models[r].forward();
    costs[r].backward_input = models[r].backward_input();
    costs[r].backward_weight = models[r].weight_compute;
    costs[r].transfer = models[r].transfer;
    if (models[r].per_microbatch() > models[busiest].per_microbatch()) busiest = r;
  }
  double pipeline_time = m * models[busiest].per_microbatch();
  // When each stage ends its last backward: its own work, or the simulation's timeline.
  std::vector<double> pipeline_stage_end(layout.pp);
  for (int64_t r = 0; r < layout.pp; ++r) pipeline_stage_end[r] = m * models[r].per_microbatch();
  double no_transfer_time = pipeline_time;
  if (layout.pp > 1 && simulate_pipeline) {
    const Schedule schedule = make_schedule(layout, microbatches);
    std::vector<StageCosts> without_transfer = costs;
    for (StageCosts& cost : without_transfer) cost.transfer = 0;
    const SimulationResult ideal = simulate_schedule(schedule, without_transfer);
    const SimulationResult real = simulate_schedule(schedule, costs);
    simulations_ += 2;
    no_transfer_time = ideal.step_time;
    pipeline_time = real.step_time;
    for (int64_t r = 0; r < layout.pp; ++r) pipeline_stage_end[r] = real.per_stage[r].end;
    prediction.bubble_fraction = ideal.bubble_fraction;
  }

  // The busiest stage's work, by kind; the rest of the pipeline time is bubble and transfers.
  const StageModel& stage = models[busiest];
  TimeBreakdown& time = prediction.time;
  time.compute = m * (stage.forward_compute + stage.input_compute + stage.weight_compute);
  time.compute_parts = stage.parts * m;
  time.tensor_parallel = m * (stage.forward_tp + stage.backward_tp);
  time.context_parallel = m * (stage.forward_cp + stage.backward_cp);
  prediction.context_parallel_bytes = m * stage.cp_bytes;
  time.expert_all_to_all = m * (stage.forward_ep + stage.backward_ep);
  time.pipeline_bubble = std::max(0.0, no_transfer_time - m * stage.per_microbatch());
  time.pipeline_p2p = std::max(0.0, pipeline_time - no_transfer_time);

  // After the pipeline: every stage reduces its gradients over its replicas, then (once the
  // gradient norm is agreed over all ranks) steps its optimizer. The reduction proper overlaps
  // the stage's last backward bucket by bucket (data_parallel_exposed), and a stage that ends
  // its last backward before the pipeline's end hides that much more of it.
  // Without the simulation (the lower bound) a stage ends no earlier than its own work.
  std::vector<double> stage_slack(layout.pp);
  for (int64_t r = 0; r < layout.pp; ++r) {
    stage_slack[r] = std::max(0.0, pipeline_time - pipeline_stage_end[r]);
  }
  const int64_t replicas = layout.dp * layout.cp;
  const GroupSpan replica_group = group_span(layout.tp, replicas, cluster.devices_per_node);
  const GroupSpan expert_group =
      group_span(layout.tp * layout.ep, replicas / layout.ep, cluster.devices_per_node);
  const double M = cluster.device.memory_bandwidth_gbs * 1e9;
  double hidden_part = 0, after_part = 0, optimizer = 0;
  for (int64_t r = 0; r < layout.pp; ++r) {
    const StageModel& model = models[r];
    double overlapped = 0;  // the gradient reduction proper, which overlaps the last backward
    double reduce = 0;      // before the gradient norm, after the last backward
    double after = 0;       // ZeRO's parameter gathers and the synchronizing small sums
    // PowerSGD's share of the elements that travel: its matrices as factors, the rest whole.
    const double stage_params = model.dense_params + model.expert_params;
    const double powersgd_share =
        stage_params > 0
            ? (model.powersgd_elements + stage_params - model.powersgd_matrix_params) / stage_params
            : 1.0;
    for (const auto& [params, group] : {std::make_pair(model.dense_params, replica_group),
                                        std::make_pair(model.expert_params, expert_group)}) {
      if (group.size <= 1 || params <= 0) continue;
      const double grads = bytes_per.grads * params, weights = bytes_per.weights * params;
      // ZeRO-3's per-microbatch gathers, in zero_gather's type (int8: a float scale per 256).
      double gathered = weights;
      if (layout.zero_gather == GatherCompression::bf16) gathered = std::min(weights, 2 * params);
      if (layout.zero_gather == GatherCompression::int8) gathered = (1 + 4.0 / 256) * params;
      switch (layout.compression) {
        case GradientCompression::none:
        case GradientCompression::bf16: {
          const double sent =
              layout.compression == GradientCompression::bf16 ? std::min(grads, 2 * params) : grads;
          if (layout.zero == 0) {
            // The runtime copies every gradient into one flat buffer and back around the
            // all-reduce.
            overlapped += all_reduce_seconds(network, group, sent);
            reduce += 4 * grads / M;
          } else {
            overlapped += reduce_scatter_seconds(network, group, sent);
          }
          break;
        }
        case GradientCompression::powersgd:
          // Two all-reduces (P and Q) of fp32 factors; error feedback reads and writes the
          // residual and the gradient (3 passes); ZeRO-1/2 still gather the weights (below).
          reduce +=
              all_reduce_seconds(network, group, 4 * powersgd_share * params) + 3 * 4 * params / M;
          break;
        case GradientCompression::onebit:
          // Signs packed 8 per byte and a float32 scale per 256 through the two phases
          // (worker -> server -> worker: an all-reduce's volume); encoding with error feedback
          // on both sides, 4 passes.
          reduce += all_reduce_seconds(network, group, params * (1.0 / 8 + 4.0 / 256)) +
                    4 * 4 * params / M;
          break;
      }
      // ZeRO-1/2 gather the updated parameters once; ZeRO-3 gathers each unit before its
      // forward and its backward instead, every microbatch.
      if (layout.zero == 1 || layout.zero == 2)
        after += all_gather_seconds(network, group, weights);
      if (layout.zero == 3) after += m * 2 * all_gather_seconds(network, group, gathered);
    }
    if (layout.compression == GradientCompression::powersgd) {
      reduce += model.powersgd_flops /
                (cluster.device.peak_tflops * 1e12 * cluster.device.matmul_efficiency);
    }
    // The tied embedding's sum waits for both end stages; the mean loss is averaged over the
    // replicas: one small all-reduce.
    after += model.tied_embedding_sync + all_reduce_seconds(network, replica_group, 8);
    const double exposed = data_parallel_exposed(
        overlapped,
        reduction_buckets(bytes_per.grads * stage_params, model.layers + 1, layout.zero),
        model.backward_input() + model.weight_compute);
    hidden_part = std::max(hidden_part, std::max(0.0, exposed + reduce - stage_slack[r]));
    after_part = std::max(after_part, after);
    const double local =
        model.dense_params / (layout.zero >= 1 ? static_cast<double>(replicas) : 1.0) +
        model.expert_params / (layout.zero >= 1 ? static_cast<double>(replicas / layout.ep) : 1.0);
    optimizer = std::max(optimizer, optimizer_bytes_per_parameter(inputs_.precision) * local / M);
  }
  time.data_parallel = hidden_part + after_part;
  time.optimizer = optimizer;

  prediction.step_time_s = pipeline_time + time.data_parallel + optimizer;
  const double devices = static_cast<double>(cluster.devices());
  const double batch = static_cast<double>(inputs_.global_batch);
  prediction.tokens_per_s = batch * static_cast<double>(spec.seq_len) / prediction.step_time_s;
  prediction.model_tflops_per_device =
      model_flops_per_step(spec, inputs_.global_batch) / prediction.step_time_s / devices / 1e12;
  prediction.hardware_tflops_per_device =
      hardware_flops_per_step(spec, inputs_.global_batch, layout.recompute) /
      prediction.step_time_s / devices / 1e12;
  prediction.mfu = prediction.model_tflops_per_device / cluster.device.peak_tflops;
  return prediction;
}

Prediction predict_layout(const PlanInputs& inputs, const PlanLayout& layout) {
  const PlanLayout resolved = resolve_layout(layout, inputs.cluster.devices());
  const std::vector<std::string> problems =
      layout_problems(inputs.model, resolved, inputs.cluster.devices(), inputs.global_batch);
  if (problems.size() == 1) throw UserError(str("--layout: ", problems.front()));
  if (!problems.empty()) {
    std::string message = str("--layout has ", problems.size(), " problems:");
    for (const std::string& problem : problems) message += "\n  - " + problem;
    throw UserError(message);
  }
  CostModel model(inputs);
  return model.predict(resolved);
}

}  // namespace strata
