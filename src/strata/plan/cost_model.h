// The planner's cost model: for a model, a cluster, a global batch and a layout, the memory of
// every device and the time of one training step, broken down the way a user asks about them.
// docs/planner.md states every term; in short:
//
// Time. Per microbatch and pipeline rank, a layer's matrix work takes FLOPs / (tp * cp) /
// (peak_tflops * matmul_efficiency) (the attention core at attention_efficiency, or the
// FLOPs the blockwise kernel executes at blockwise_attention_efficiency), FLOPs from
// transformer.h (forward F, input gradient B, weight gradient W); its elementwise work, in
// passes over memory (the backward twice the forward), moves residual adds, eager score masking and
// head copies at memory_bandwidth_gbs and norms, softmax and the activation function at
// elementwise_gbs; weight gradients are accumulated into .grad (3 x gradient bytes).
// Tensor-parallel all-reduces (2 forward, 2 backward per layer, of b*s*h elements; all-gather
// + reduce-scatter pairs of the same bytes under sequence parallelism) and expert all-to-alls
// are exposed: they sit between the matmuls that need them. Context-parallel exchanges
// (context_parallel.h): the ring's hops overlap the attention blocks, the all-gather and
// all-to-all collectives are exposed. Full recomputation repeats the forward (with its collectives)
// before the input gradient; selective recomputation repeats the attention core. The pipeline
// simulator (pipeline/simulator.h) runs the layout's schedule on these per-stage F, B, W and
// the activation transfer time, which gives the pipeline time, its bubble and each stage's
// peak in-flight microbatches. Data-parallel gradient reduction (one flat all-reduce, or
// ZeRO's reduce-scatter + all-gather) runs after the pipeline, not overlapped, as the runtime
// does; then the optimizer step, memory-bound. Collective times: collectives.h.
//
// Memory. Model state from model_state.h per ZeRO stage over the dp*cp replicas (expert
// weights over dp*cp/ep); activations from transformer.h (and the all-gather's gathered K/V,
// context_parallel.h) times the schedule's in-flight microbatches of each stage, plus the
// output layer's logits on the last stage and the recomputation working set; buffers for the
// gradient reduction and pipeline messages.
#pragma once
#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <tuple>
#include <vector>

#include "strata/plan/cluster.h"
#include "strata/plan/layer_profile.h"
#include "strata/plan/layout.h"
#include "strata/plan/model_state.h"
#include "strata/plan/transformer.h"

namespace strata {

struct PlanInputs {
  TransformerSpec model;
  ClusterProfile cluster;
  int64_t global_batch = 1;  // sequences per optimizer step
  Precision precision = Precision::bf16;
  // This machine's measured layer profile: where it applies (layer_profile_applies), layouts
  // with pp_layers=auto split their stages by it (stage_split.h).
  std::optional<LayerProfile> layer_profile;
};

// The inputs for a cluster, with the precision its device profile trains in.
PlanInputs plan_inputs(const TransformerSpec& model, const ClusterProfile& cluster,
                       int64_t global_batch);

struct MemoryBreakdown {
  double params = 0, grads = 0, optimizer = 0, activations = 0, buffers = 0;
  double total() const { return params + grads + optimizer + activations + buffers; }
};

// TimeBreakdown::compute by kind (their sum is compute).
struct ComputeBreakdown {
  double matmul = 0;     // the weight multiplies (q/k/v, projections, MLP, head) at their shapes
  double attention = 0;  // the attention core: eager's batched multiplies, or the blockwise kernel
  double elementwise = 0;  // norms, softmax, activations, residuals, loss, gradient accumulation
  double kernels = 0;      // the fixed cost of every kernel (kernel_overhead_us)
  double recompute = 0;    // everything recomputation repeats
  double total() const { return matmul + attention + elementwise + kernels + recompute; }
  ComputeBreakdown operator*(double factor) const {
    return {matmul * factor, attention * factor, elementwise * factor, kernels * factor,
            recompute * factor};
  }
};

// Which link each kind of communication crosses: false inside a node, true between nodes.
struct LinkSpans {
  bool tensor_parallel = false, context_parallel = false, expert = false, pipeline = false,
       data_parallel = false;
};

struct TimeBreakdown {
  double compute = 0;  // matrix and elementwise work of the busiest stage, recompute included
  ComputeBreakdown compute_parts;
  double tensor_parallel = 0;    // exposed tp collectives
  double context_parallel = 0;   // cp exchange of K/V not hidden behind attention
  double expert_all_to_all = 0;  // MoE dispatch and combine
  double pipeline_bubble = 0;    // the busiest stage's idle time in the schedule
  double pipeline_p2p = 0;       // what activation and gradient transfers add to the pipeline
  double data_parallel = 0;      // gradient reduction (and ZeRO gathers)
  double optimizer = 0;          // AdamW step and gradient clipping
  double total() const {
    return compute + tensor_parallel + context_parallel + expert_all_to_all + pipeline_bubble +
           pipeline_p2p + data_parallel + optimizer;
  }
};

// One pipeline stage (pipeline rank) of a prediction.
struct StagePrediction {
  int64_t layers = 0;                // transformer layers on this rank, all its chunks
  double memory_bytes = 0;           // its total memory
  double inflight_microbatches = 1;  // activation sets held at its peak (in whole-stage units)
  double busy_s = 0;                 // its work per step: m * (F + B + W)
};

struct Prediction {
  PlanLayout layout;  // resolved: dp and schedule explicit
  int64_t microbatches = 1;
  MemoryBreakdown memory;  // of the fullest device
  int64_t fullest_stage = 0;
  double memory_capacity = 0;        // bytes per device
  double inflight_microbatches = 1;  // activation sets the fullest stage holds at peak
  TimeBreakdown time;
  // What one device of the busiest stage sends per step for the cp exchanges (the bytes behind
  // time.context_parallel, hidden or not).
  double context_parallel_bytes = 0;
  double step_time_s = 0;
  double bubble_fraction = 0;  // the schedule's own bubble (idle of the idlest stage / step)
  double tokens_per_s = 0;
  double model_tflops_per_device = 0;     // model FLOPs (no recompute) per second per device
  double hardware_tflops_per_device = 0;  // FLOPs executed, recompute included
  double mfu = 0;                         // model TFLOP/s / peak_tflops
  bool fits = false;
  bool tp_spans_nodes = false;
  LinkSpans links;
  std::vector<StagePrediction> stages;  // one per pipeline rank
  std::vector<int64_t> stage_layers;    // layers of each virtual stage, as the runtime splits
  std::string split_source;             // pp_layers=auto: what the split was costed by
};

// The part of a stage's gradient reduction (reduction_s in all, over `buckets` equal buckets)
// left after its last backward (backward_s), which readies the buckets at an even pace and
// starts each bucket's reduction as it is ready: the runtime's overlap
// (data_parallel/gradient_reduction.h). One bucket overlaps nothing.
double data_parallel_exposed(double reduction_s, int64_t buckets, double backward_s);

// The cost model's view of one pipeline rank and of its memory (plan/stage_model.h).
struct StageModel;
struct StageMemory;

// The cost model of one (model, cluster, batch), with caches for the pipeline simulations a
// search repeats. Not thread-safe.
class CostModel {
 public:
  explicit CostModel(PlanInputs inputs);
  ~CostModel();

  const PlanInputs& inputs() const { return inputs_; }

  // Memory of the fullest device, and which stage that is. Runs the schedule only for its
  // in-flight counts (cached per schedule shape). The layout must be resolved and valid.
  MemoryBreakdown memory(const PlanLayout& layout, int64_t* fullest_stage = nullptr,
                         double* inflight = nullptr);
  // The full prediction. The layout must be resolved and valid (layout_problems empty).
  Prediction predict(const PlanLayout& layout);
  // The prediction with the pipeline taken as its busiest stage's work alone (no bubble, no
  // transfers, no simulation): a lower bound of predict(layout).step_time_s.
  Prediction predict_lower_bound(const PlanLayout& layout);

  // What one device of each pipeline stage holds: its transformer layers and parameters (its
  // layers / tp, experts / (tp * ep), the embedding on the first stage, the head on the last).
  struct StageShare {
    int64_t layers = 0;
    double params = 0;
  };
  std::vector<StageShare> stage_shares(const PlanLayout& layout) const;

  // Layers of each of the p * v virtual stages, as the runtime splits them: balanced by FLOPs,
  // or with pp_layers=auto by time (stage_split.h); `source` says which costs made the latter.
  std::vector<int64_t> partition(const PlanLayout& layout, std::string* source = nullptr) const;

  // Pipeline simulations run so far (a search's cost).
  int64_t simulations() const { return simulations_; }

 private:
  // The rank models of the layout, each rank's chunks as the runtime splits the layers.
  std::vector<StageModel> stages(const PlanLayout& layout) const;
  std::vector<StageMemory> stage_memory(const PlanLayout& layout,
                                        const std::vector<StageModel>& models);
  const std::vector<double>& inflight_per_stage(const PlanLayout& layout, int64_t microbatches);
  Prediction predict(const PlanLayout& layout, bool simulate_pipeline);

  PlanInputs inputs_;
  std::map<std::tuple<PipelineSchedule, int64_t, int64_t, int64_t>, std::vector<double>>
      inflight_cache_;
  int64_t simulations_ = 0;
};

// Checks the layout (UserError listing every problem and what to change), then predicts.
Prediction predict_layout(const PlanInputs& inputs, const PlanLayout& layout);

}  // namespace strata
