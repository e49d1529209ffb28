// Serving's memory and decode time. Notation: t tp, e bytes of a weight or KV element, T the
// engine step's tokens (serve.max_batch_tokens), M memory bytes/s.
#include "strata/plan/serve_plan.h"

#include <algorithm>
#include <cmath>

#include "strata/core/error.h"
#include "strata/plan/collectives.h"

namespace strata {
namespace {

constexpr double kBlockTokens = 16;            // serve/block_pool.h: the KV cache's block
constexpr double kDecodeKernelsPerLayer = 14;  // a layer's forward kernels (cost_model.cpp)

// KV heads one tp rank keeps: its share, or all of them when tp does not divide them (the
// runtime then replicates them, model/gpt.cpp).
double local_kv_heads(const TransformerSpec& spec, int64_t tp) {
  return spec.n_kv_heads % tp == 0 ? static_cast<double>(spec.n_kv_heads / tp)
                                   : static_cast<double>(spec.n_kv_heads);
}

}  // namespace

ServePrediction predict_serving(const PlanInputs& inputs, const PlanLayout& requested,
                                int64_t max_batch_tokens) {
  const TransformerSpec& spec = inputs.model;
  const ClusterProfile& cluster = inputs.cluster;
  STRATA_REQUIRE(
      requested.cp == 1 && requested.ep == 1 && requested.zero == 0 && requested.vpp == 1,
      "--serve: a serving layout is tp and pp (dp is the replicas); cp, ep, zero and "
      "vpp are training choices: leave them out");
  STRATA_REQUIRE(max_batch_tokens >= 1, "serve.max_batch_tokens must be >= 1");
  PlanLayout layout = resolve_layout(requested, cluster.devices());
  const std::vector<std::string> problems =
      layout_problems(spec, layout, cluster.devices(), layout.dp * layout.pp);
  if (!problems.empty()) throw UserError(str("--serve --layout: ", problems.front()));

  const double e = state_bytes_per_parameter(inputs.precision).activation_element;
  const double t = static_cast<double>(layout.tp), h = static_cast<double>(spec.d_model);
  const double T = static_cast<double>(max_batch_tokens);
  const double M = cluster.device.memory_bandwidth_gbs * 1e9;
  const double kv_per_layer =
      2 * local_kv_heads(spec, layout.tp) * static_cast<double>(spec.head_dim()) * e;

  ServePrediction out;
  out.layout = layout;
  out.memory_capacity = cluster.memory_bytes();
  const CostModel model(inputs);
  const std::vector<CostModel::StageShare> shares = model.stage_shares(layout);
  // The engine step's transient memory: fp32 logits of its tokens over the rank's vocabulary
  // share and one layer's activations of them (the residual, q/k/v, the MLP's widths).
  out.workspace_bytes =
      T *
      (4 * std::ceil(static_cast<double>(spec.vocab_size) / t) +
       e * (3 * h +
            (static_cast<double>(spec.q_width()) + 2 * static_cast<double>(spec.kv_width())) / t +
            2 * static_cast<double>(spec.d_ff) / t));
  // The fullest device decides: every rank holds the same number of blocks.
  for (const CostModel::StageShare& share : shares) {
    const double weights = e * share.params;
    const double kv_token = kv_per_layer * static_cast<double>(share.layers);
    const double left = out.memory_capacity - weights - out.workspace_bytes;
    const double tokens =
        kv_token > 0 ? std::floor(std::max(0.0, left) / kv_token / kBlockTokens) * kBlockTokens : 0;
    if (out.kv_bytes_per_token == 0 || tokens < out.kv_tokens) {
      out.weight_bytes = weights;
      out.kv_bytes_per_token = kv_token;
      out.kv_tokens = tokens;
      out.kv_cache_bytes = std::max(0.0, left);
    }
  }
  const double seq = static_cast<double>(spec.seq_len);
  const double blocks_per_sequence = std::ceil(seq / kBlockTokens) * kBlockTokens;
  out.sequences = static_cast<int64_t>(std::floor(out.kv_tokens / blocks_per_sequence));
  out.fits = out.sequences >= 1;
  out.decode_batch = std::min<int64_t>(out.sequences, max_batch_tokens);
  if (!out.fits) return out;

  // One decode step runs through every stage in turn (the engine broadcasts one plan; there are
  // no microbatches to overlap): each device reads its weights and the KV cache of the batch at
  // half the context on average, or multiplies, whichever is slower; every layer adds its
  // kernels and two tp all-reduces of the batch's hidden states; each stage boundary a message.
  const double B = static_cast<double>(out.decode_batch);
  const double R = cluster.device.peak_tflops * 1e12 * cluster.device.matmul_shape_efficiency(B);
  const double kernel = cluster.device.kernel_overhead_us * 1e-6;
  const GroupSpan tp_group = group_span(1, layout.tp, cluster.devices_per_node);
  const GroupSpan pp_group = group_span(layout.tp * layout.dp, layout.pp, cluster.devices_per_node);
  double step = 0;
  for (const CostModel::StageShare& share : shares) {
    const double layers = static_cast<double>(share.layers);
    const double memory = (e * share.params + B * (seq / 2) * kv_per_layer * layers) / M;
    const double compute = 2 * share.params * B / R;
    step += std::max(memory, compute) + layers * kDecodeKernelsPerLayer * kernel +
            layers * 2 * all_reduce_seconds(cluster.network, tp_group, B * h * e);
  }
  if (layout.pp > 1) {
    step += static_cast<double>(layout.pp - 1) *
            p2p_seconds(cluster.network, pp_group.crosses_nodes(), B * h * e);
  }
  out.decode_step_s = step;
  out.tokens_per_s = B / step * static_cast<double>(layout.dp);
  return out;
}

std::vector<ServePrediction> search_serving(const PlanInputs& inputs, int64_t max_batch_tokens) {
  std::vector<ServePrediction> fitting;
  const int64_t node = inputs.cluster.devices_per_node;
  for (int64_t tp = 1; tp <= node; ++tp) {
    for (int64_t pp = 1; tp * pp <= node && pp <= inputs.model.n_layers; ++pp) {
      if (node % (tp * pp) != 0) continue;
      PlanLayout layout;
      layout.tp = tp;
      layout.pp = pp;
      const PlanLayout resolved = resolve_layout(layout, inputs.cluster.devices());
      if (!layout_problems(inputs.model, resolved, inputs.cluster.devices(),
                           resolved.dp * resolved.pp)
               .empty()) {
        continue;
      }
      ServePrediction prediction = predict_serving(inputs, layout, max_batch_tokens);
      if (prediction.fits) fitting.push_back(prediction);
    }
  }
  STRATA_REQUIRE(!fitting.empty(), "--serve: no tp x pp inside a node of ",
                 inputs.cluster.devices_per_node,
                 " devices holds the weights and one sequence's KV cache; use devices with more "
                 "memory, a shorter model.seq_len or a smaller model");
  std::stable_sort(fitting.begin(), fitting.end(),
                   [](const ServePrediction& a, const ServePrediction& b) {
                     return a.tokens_per_s > b.tokens_per_s;
                   });
  return fitting;
}

}  // namespace strata
