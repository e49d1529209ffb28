// The cost model: per pipeline rank, the parameters, activations and per-microbatch times of
// the layers it holds (stage_model.h); then the schedule simulator for the pipeline, and the
// data-parallel phase (its gradient reduction overlapping each stage's last backward and the
// pipeline's drain) and the optimizer after it.
#include "strata/plan/cost_model.h"

#include <algorithm>
#include <cmath>

#include "strata/core/config.h"
#include "strata/core/error.h"
#include "strata/core/stages.h"
#include "strata/pipeline/generators.h"
#include "strata/pipeline/simulator.h"
#include "strata/plan/collectives.h"
#include "strata/plan/stage_model.h"
#include "strata/plan/stage_split.h"

namespace strata {
namespace {

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

// The stage whose device holds the most (the first of equals).
int64_t fullest_of(const std::vector<StageMemory>& memories) {
  size_t fullest = 0;
  for (size_t rank = 1; rank < memories.size(); ++rank) {
    if (memories[rank].memory.total() > memories[fullest].memory.total()) fullest = rank;
  }
  return static_cast<int64_t>(fullest);
}

// Which link each kind of communication crosses.
LinkSpans link_spans(const PlanLayout& layout, int64_t devices_per_node) {
  LinkSpans links;
  links.tensor_parallel = group_span(1, layout.tp, devices_per_node).crosses_nodes();
  links.context_parallel = group_span(layout.tp, layout.cp, devices_per_node).crosses_nodes();
  links.expert = group_span(layout.tp, layout.ep, devices_per_node).crosses_nodes();
  links.data_parallel =
      group_span(layout.tp, layout.dp * layout.cp, devices_per_node).crosses_nodes();
  links.pipeline =
      group_span(layout.tp * layout.cp * layout.dp, layout.pp, devices_per_node).crosses_nodes();
  return links;
}

// The pipeline's part of the step: the busiest stage, the pipeline time with and without the
// activation transfers, the schedule's bubble and when each stage ends its last backward.
struct PipelineTiming {
  int64_t busiest = 0;
  double time = 0, no_transfer_time = 0;
  double bubble_fraction = 0;
  std::vector<double> stage_end;
};

// Without `simulate` (the lower bound) the pipeline is its busiest stage's work and a stage
// ends with its own work; else the schedule simulator times it, adding its runs to
// `simulations`.
PipelineTiming time_pipeline(const PlanLayout& layout, const std::vector<StageModel>& models,
                             int64_t microbatches, bool simulate, int64_t& simulations) {
  const double per_step = static_cast<double>(microbatches);
  PipelineTiming timing;
  std::vector<StageCosts> costs(layout.pp);
  for (int64_t rank = 0; rank < layout.pp; ++rank) {
    costs[rank].forward = models[rank].forward();
    costs[rank].backward_input = models[rank].backward_input();
    costs[rank].backward_weight = models[rank].weight_compute;
    costs[rank].transfer = models[rank].transfer;
    if (models[rank].per_microbatch() > models[timing.busiest].per_microbatch()) {
      timing.busiest = rank;
    }
  }
  timing.time = per_step * models[timing.busiest].per_microbatch();
  timing.stage_end.resize(layout.pp);
  for (int64_t rank = 0; rank < layout.pp; ++rank) {
    timing.stage_end[rank] = per_step * models[rank].per_microbatch();
  }
  timing.no_transfer_time = timing.time;
  if (layout.pp > 1 && simulate) {
    const Schedule schedule = make_schedule(layout, microbatches);
    std::vector<StageCosts> without_transfer = costs;
    for (StageCosts& cost : without_transfer) cost.transfer = 0;
    const SimulationResult ideal = simulate_schedule(schedule, without_transfer);
    const SimulationResult real = simulate_schedule(schedule, costs);
    simulations += 2;
    timing.no_transfer_time = ideal.step_time;
    timing.time = real.step_time;
    for (int64_t rank = 0; rank < layout.pp; ++rank) {
      timing.stage_end[rank] = real.per_stage[rank].end;
    }
    timing.bubble_fraction = ideal.bubble_fraction;
  }
  return timing;
}

// The busiest stage's work by kind; the rest of the pipeline time is bubble and transfers.
void set_pipeline_time(Prediction& prediction, const StageModel& stage,
                       const PipelineTiming& pipeline) {
  const double per_step = static_cast<double>(prediction.microbatches);
  TimeBreakdown& time = prediction.time;
  time.compute = per_step * (stage.forward_compute + stage.input_compute + stage.weight_compute);
  time.compute_parts = stage.parts * per_step;
  time.tensor_parallel = per_step * (stage.forward_tp + stage.backward_tp);
  time.context_parallel = per_step * (stage.forward_cp + stage.backward_cp);
  prediction.context_parallel_bytes = per_step * stage.cp_bytes;
  time.expert_all_to_all = per_step * (stage.forward_ep + stage.backward_ep);
  time.pipeline_bubble =
      std::max(0.0, pipeline.no_transfer_time - per_step * stage.per_microbatch());
  time.pipeline_p2p = std::max(0.0, pipeline.time - pipeline.no_transfer_time);
  prediction.bubble_fraction = pipeline.bubble_fraction;
}

// What the data-parallel phase of one stage reads.
struct ReductionTerms {
  const PlanLayout& layout;
  const NetworkProfile& network;
  StateBytesPerParameter bytes_per;
  double memory_rate;       // bytes per second
  double microbatches;      // per step
  GroupSpan replica_group;  // the dense parameters' replicas, dp * cp
  GroupSpan expert_group;   // the experts' replicas, dp * cp / ep
};

// A stage's gradient reduction, in seconds.
struct GradientReduction {
  double overlapped = 0;  // the gradient reduction proper, which overlaps the last backward
  double reduce = 0;      // before the gradient norm, after the last backward
  double after = 0;       // ZeRO's parameter gathers and the synchronizing small sums
};

// ZeRO-3's per-microbatch gathers, in zero_gather's type (int8: a float scale per 256), in
// bytes.
double gathered_bytes(double params, double weights, GatherCompression compression) {
  double gathered = weights;
  if (compression == GatherCompression::bf16) gathered = std::min(weights, 2 * params);
  if (compression == GatherCompression::int8) gathered = (1 + 4.0 / 256) * params;
  return gathered;
}

// The reduction of `params` parameters over `group` in the layout's compression, and ZeRO's
// gathers of them. `powersgd_share` is the fraction of their elements PowerSGD sends.
void add_group_reduction(GradientReduction& reduction, double params, const GroupSpan& group,
                         double powersgd_share, const ReductionTerms& terms) {
  const PlanLayout& layout = terms.layout;
  const NetworkProfile& network = terms.network;
  const double grads = terms.bytes_per.grads * params, weights = terms.bytes_per.weights * params;
  switch (layout.compression) {
    case GradientCompression::none:
    case GradientCompression::bf16: {
      const double sent =
          layout.compression == GradientCompression::bf16 ? std::min(grads, 2 * params) : grads;
      if (layout.zero == 0) {
        // The runtime copies every gradient into one flat buffer and back around the
        // all-reduce.
        reduction.overlapped += all_reduce_seconds(network, group, sent);
        reduction.reduce += 4 * grads / terms.memory_rate;
      } else {
        reduction.overlapped += reduce_scatter_seconds(network, group, sent);
      }
      break;
    }
    case GradientCompression::powersgd:
      // Two all-reduces (P and Q) of fp32 factors; error feedback reads and writes the
      // residual and the gradient (3 passes); ZeRO-1/2 still gather the weights (below).
      reduction.reduce += all_reduce_seconds(network, group, 4 * powersgd_share * params) +
                          3 * 4 * params / terms.memory_rate;
      break;
    case GradientCompression::onebit:
      // Signs packed 8 per byte and a float32 scale per 256 through the two phases
      // (worker -> server -> worker: an all-reduce's volume); encoding with error feedback
      // on both sides, 4 passes.
      reduction.reduce += all_reduce_seconds(network, group, params * (1.0 / 8 + 4.0 / 256)) +
                          4 * 4 * params / terms.memory_rate;
      break;
  }
  // ZeRO-1/2 gather the updated parameters once; ZeRO-3 gathers each unit before its
  // forward and its backward instead, every microbatch.
  if (layout.zero == 1 || layout.zero == 2) {
    reduction.after += all_gather_seconds(network, group, weights);
  }
  if (layout.zero == 3) {
    const double gathered = gathered_bytes(params, weights, layout.zero_gather);
    reduction.after += terms.microbatches * 2 * all_gather_seconds(network, group, gathered);
  }
}

// One stage's gradient reduction: its dense and its expert parameters over their replicas,
// PowerSGD's factor products, the tied embedding's sum and the loss's.
GradientReduction stage_gradient_reduction(const StageModel& model, const DeviceProfile& device,
                                           const ReductionTerms& terms) {
  GradientReduction reduction;
  // PowerSGD's share of the elements that travel: its matrices as factors, the rest whole.
  const double stage_params = model.dense_params + model.expert_params;
  const double powersgd_share =
      stage_params > 0
          ? (model.powersgd_elements + stage_params - model.powersgd_matrix_params) / stage_params
          : 1.0;
  for (const auto& [params, group] : {std::make_pair(model.dense_params, terms.replica_group),
                                      std::make_pair(model.expert_params, terms.expert_group)}) {
    if (group.size <= 1 || params <= 0) continue;
    add_group_reduction(reduction, params, group, powersgd_share, terms);
  }
  if (terms.layout.compression == GradientCompression::powersgd) {
    reduction.reduce +=
        model.powersgd_flops / (device.peak_tflops * 1e12 * device.matmul_efficiency);
  }
  // The tied embedding's sum waits for both end stages; the mean loss is averaged over the
  // replicas: one small all-reduce.
  reduction.after +=
      model.tied_embedding_sync + all_reduce_seconds(terms.network, terms.replica_group, 8);
  return reduction;
}

// After the pipeline: every stage reduces its gradients over its replicas, then (once the
// gradient norm is agreed over all ranks) steps its optimizer. The reduction proper overlaps
// the stage's last backward bucket by bucket (data_parallel_exposed), and a stage that ends
// its last backward before the pipeline's end hides that much more of it. Sets the time's
// data_parallel and optimizer.
void set_data_parallel_time(TimeBreakdown& time, const PlanInputs& inputs, const PlanLayout& layout,
                            const std::vector<StageModel>& models, const PipelineTiming& pipeline,
                            int64_t microbatches) {
  const ClusterProfile& cluster = inputs.cluster;
  const int64_t replicas = layout.dp * layout.cp;
  const ReductionTerms terms{
      layout,
      cluster.network,
      state_bytes_per_parameter(inputs.precision),
      cluster.device.memory_bandwidth_gbs * 1e9,
      static_cast<double>(microbatches),
      group_span(layout.tp, replicas, cluster.devices_per_node),
      group_span(layout.tp * layout.ep, replicas / layout.ep, cluster.devices_per_node)};
  const double dense_shards = layout.zero >= 1 ? static_cast<double>(replicas) : 1.0;
  const double expert_shards = layout.zero >= 1 ? static_cast<double>(replicas / layout.ep) : 1.0;
  double hidden_part = 0, after_part = 0, optimizer = 0;
  for (int64_t rank = 0; rank < layout.pp; ++rank) {
    const StageModel& model = models[rank];
    const double slack = std::max(0.0, pipeline.time - pipeline.stage_end[rank]);
    const GradientReduction reduction = stage_gradient_reduction(model, cluster.device, terms);
    const double stage_params = model.dense_params + model.expert_params;
    const double exposed = data_parallel_exposed(
        reduction.overlapped,
        reduction_buckets(terms.bytes_per.grads * stage_params, model.layers + 1, layout.zero),
        model.backward_input() + model.weight_compute);
    hidden_part = std::max(hidden_part, std::max(0.0, exposed + reduction.reduce - slack));
    after_part = std::max(after_part, reduction.after);
    const double local = model.dense_params / dense_shards + model.expert_params / expert_shards;
    optimizer = std::max(
        optimizer, optimizer_bytes_per_parameter(inputs.precision) * local / terms.memory_rate);
  }
  time.data_parallel = hidden_part + after_part;
  time.optimizer = optimizer;
}

// Tokens per second and the FLOP rates per device of the predicted step.
void set_throughput(Prediction& prediction, const PlanInputs& inputs) {
  const TransformerSpec& spec = inputs.model;
  const double devices = static_cast<double>(inputs.cluster.devices());
  const double batch = static_cast<double>(inputs.global_batch);
  const double step = prediction.step_time_s;
  prediction.tokens_per_s = batch * static_cast<double>(spec.seq_len) / step;
  prediction.model_tflops_per_device =
      model_flops_per_step(spec, inputs.global_batch) / step / devices / 1e12;
  prediction.hardware_tflops_per_device =
      hardware_flops_per_step(spec, inputs.global_batch, prediction.layout.recompute,
                              prediction.layout.cp) /
      step / devices / 1e12;
  prediction.mfu = prediction.model_tflops_per_device / inputs.cluster.device.peak_tflops;
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

std::vector<StageModel> CostModel::stages(const PlanLayout& layout) const {
  return stage_models(inputs_, layout, partition(layout));
}

std::vector<CostModel::StageShare> CostModel::stage_shares(const PlanLayout& layout) const {
  std::vector<StageShare> out;
  for (const StageModel& stage : stages(layout)) {
    out.push_back({stage.layers, stage.dense_params + stage.expert_params});
  }
  return out;
}

std::vector<int64_t> CostModel::partition(const PlanLayout& layout, std::string* source) const {
  if (layout.pp_layers_auto) {
    AutoSplit split = auto_split(inputs_, layout);
    if (source != nullptr) *source = split.source;
    return split.layers;
  }
  // The runtime's default (core/stages.h stage_layers).
  return balanced_split(inputs_.model.n_layers, stage_placement(layout),
                        flop_split_costs(inputs_.model));
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
    for (int64_t rank = 0; rank < layout.pp; ++rank) {
      inflight[rank] = result.per_stage[rank].peak_inflight_microbatches;
    }
  }
  return inflight_cache_.emplace(key, std::move(inflight)).first->second;
}

namespace {

// A stage's buffers: for the gradient reduction, ZeRO 0/1 reduce one flat copy of all
// gradients (the runtime concatenates them), ZeRO 2/3 reduce-scatter bucket by bucket; ZeRO-3
// gathers the parameters of the running layer and prefetches the next; a pipeline stage keeps
// a send and a receive buffer for activations and for gradients (`message` bytes each).
double stage_buffers(const StageModel& stage, const PlanLayout& layout,
                     const StateBytesPerParameter& bytes_per, double message) {
  double buffers = 0;
  const double gradient_bytes = bytes_per.grads * (stage.dense_params + stage.expert_params);
  if (layout.dp * layout.cp > 1) {
    buffers += layout.zero <= 1 ? gradient_bytes
                                : std::min(gradient_bytes, bytes_per.grads * kZeroBucketElements);
  }
  if (layout.zero == 3) buffers += 2 * bytes_per.weights * stage.largest_layer_params;
  if (layout.pp > 1) buffers += 4 * message;
  return buffers;
}

}  // namespace

std::vector<StageMemory> CostModel::stage_memory(const PlanLayout& layout,
                                                 const std::vector<StageModel>& models) {
  const int64_t microbatches = microbatches_of(layout, inputs_.global_batch);
  const std::vector<double>& inflight_counts = inflight_per_stage(layout, microbatches);
  const StateBytesPerParameter bytes_per = state_bytes_per_parameter(inputs_.precision);
  const int64_t replicas = layout.dp * layout.cp;
  const int64_t expert_replicas = replicas / layout.ep;
  const double tokens = static_cast<double>(layout.micro_batch * inputs_.model.seq_len) /
                        static_cast<double>(layout.cp);
  const double message =
      bytes_per.activation_element *
      (layout.sequence_parallel ? tokens / static_cast<double>(layout.tp) : tokens) *
      static_cast<double>(inputs_.model.d_model);

  std::vector<StageMemory> out(layout.pp);
  for (int64_t rank = 0; rank < layout.pp; ++rank) {
    const StageModel& stage = models[rank];
    const ModelStateBytes dense =
        model_state_bytes(stage.dense_params, layout.zero, replicas, inputs_.precision);
    const ModelStateBytes expert =
        model_state_bytes(stage.expert_params, layout.zero, expert_replicas, inputs_.precision);
    MemoryBreakdown& memory = out[rank].memory;
    out[rank].inflight = inflight_counts[rank];
    memory.params = dense.params + expert.params;
    memory.grads = dense.grads + expert.grads;
    memory.optimizer = dense.optimizer + expert.optimizer;
    memory.activations = inflight_counts[rank] * stage.activation_bytes + stage.working_set;
    memory.buffers = stage_buffers(stage, layout, bytes_per, message);
  }
  return out;
}

MemoryBreakdown CostModel::memory(const PlanLayout& layout, int64_t* fullest_stage,
                                  double* inflight) {
  const std::vector<StageMemory> memories = stage_memory(layout, stages(layout));
  const int64_t fullest = fullest_of(memories);
  if (fullest_stage != nullptr) *fullest_stage = fullest;
  if (inflight != nullptr) *inflight = memories[fullest].inflight;
  return memories[fullest].memory;
}

Prediction CostModel::predict(const PlanLayout& layout) { return predict(layout, true); }

Prediction CostModel::predict_lower_bound(const PlanLayout& layout) {
  return predict(layout, false);
}

Prediction CostModel::predict(const PlanLayout& layout, bool simulate_pipeline) {
  const ClusterProfile& cluster = inputs_.cluster;
  const int64_t microbatches = microbatches_of(layout, inputs_.global_batch);
  Prediction prediction;
  prediction.layout = layout;
  prediction.microbatches = microbatches;

  prediction.stage_layers = partition(layout, &prediction.split_source);
  const std::vector<StageModel> models = stage_models(inputs_, layout, prediction.stage_layers);
  const std::vector<StageMemory> memories = stage_memory(layout, models);
  for (int64_t rank = 0; rank < layout.pp; ++rank) {
    prediction.stages.push_back(
        {models[rank].layers, memories[rank].memory.total(), memories[rank].inflight,
         static_cast<double>(microbatches) * models[rank].per_microbatch()});
  }
  prediction.fullest_stage = fullest_of(memories);
  prediction.memory = memories[prediction.fullest_stage].memory;
  prediction.inflight_microbatches = memories[prediction.fullest_stage].inflight;
  prediction.memory_capacity = cluster.memory_bytes();
  prediction.fits = prediction.memory.total() <= prediction.memory_capacity;
  prediction.links = link_spans(layout, cluster.devices_per_node);
  prediction.tp_spans_nodes = prediction.links.tensor_parallel;

  const PipelineTiming pipeline =
      time_pipeline(layout, models, microbatches, simulate_pipeline, simulations_);
  set_pipeline_time(prediction, models[pipeline.busiest], pipeline);
  set_data_parallel_time(prediction.time, inputs_, layout, models, pipeline, microbatches);
  prediction.step_time_s =
      pipeline.time + prediction.time.data_parallel + prediction.time.optimizer;
  set_throughput(prediction, inputs_);
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
