// Text and JSON reports of the planner.
#include "strata/plan/report.h"

#include <algorithm>
#include <iomanip>
#include <sstream>

#include "strata/core/error.h"

namespace strata {
namespace {

std::string fixed(double value, int digits) {
  std::ostringstream out;
  out << std::fixed << std::setprecision(digits) << value;
  return out.str();
}

std::string gigabytes(double bytes) { return fixed(bytes / 1e9, bytes < 1e8 ? 3 : 1) + " GB"; }

std::string seconds(double value) {
  std::ostringstream out;
  out << std::setprecision(4) << value << " s";
  return out.str();
}

std::string percent(double fraction) { return fixed(100 * fraction, 1) + "%"; }

std::string count(double value) {
  std::ostringstream out;
  out << std::setprecision(4) << value;
  return out.str();
}

nlohmann::json mode_json(const CheckpointMode& mode) {
  return {{"stall_s", mode.stall_s},
          {"write_s", mode.write_s},
          {"interval_s", mode.interval_s},
          {"interval_steps", mode.interval_steps},
          {"lost_fraction", mode.lost_fraction}};
}

const char* link_name(bool crosses_nodes) { return crosses_nodes ? "inter-node" : "intra-node"; }

// Each part of the step with its share, largest first.
std::string explanation(const Prediction& prediction) {
  const TimeBreakdown& time = prediction.time;
  const ComputeBreakdown& parts = time.compute_parts;
  const LinkSpans& links = prediction.links;
  const double step = prediction.step_time_s;
  const PlanLayout& layout = prediction.layout;
  auto share = [step](double value) { return step > 0 ? value / step : 0.0; };
  struct Part {
    std::string name;
    double seconds;
    std::string detail;
  };
  std::vector<Part> list = {
      {"weight multiplies", parts.matmul, "q/k/v, projections, MLP and head at their shapes"},
      {"attention core", parts.attention, "QK^T and attention x V, as model.attention runs them"},
      {"elementwise", parts.elementwise, "norms, softmax, activations, residuals, loss, .grad"},
      {"kernel overhead", parts.kernels, "a fixed cost per kernel"},
      {"recomputation", parts.recompute, str("train.recompute = ", name_of(layout.recompute))},
      {"tensor-parallel communication", time.tensor_parallel,
       str("exposed, tp ", layout.tp, layout.sequence_parallel ? " with sequence parallelism" : "",
           ", ", link_name(links.tensor_parallel))},
      {"context-parallel communication", time.context_parallel,
       str("exposed, cp ", layout.cp, " ", name_of(layout.cp_comm), ", ",
           link_name(links.context_parallel))},
      {"expert all-to-all", time.expert_all_to_all,
       str("ep ", layout.ep, ", ", link_name(links.expert))},
      {"pipeline bubble", time.pipeline_bubble,
       str("pp ", layout.pp, ", ", schedule_label(layout), ", ", prediction.microbatches,
           " microbatches")},
      {"pipeline p2p", time.pipeline_p2p, str("what transfers add, ", link_name(links.pipeline))},
      {"data-parallel communication", time.data_parallel,
       str("left after the last backward, dp x cp ", layout.dp * layout.cp, " zero ", layout.zero,
           ", ", link_name(links.data_parallel))},
      {"optimizer", time.optimizer, "AdamW and clipping, memory-bound"},
  };
  std::stable_sort(list.begin(), list.end(),
                   [](const Part& a, const Part& b) { return a.seconds > b.seconds; });
  std::ostringstream out;
  out << "where the " << seconds(step) << " go (the busiest stage):\n";
  for (const Part& part : list) {
    if (part.seconds <= 0) continue;
    out << "  " << std::left << std::setw(32) << part.name << std::right << std::setw(12)
        << seconds(part.seconds) << std::setw(8) << percent(share(part.seconds)) << "  "
        << part.detail << "\n";
  }
  return out.str();
}

// "split: layers per virtual stage 7 1, balanced by time (costed by the cost model, ...);
// bubble 12.5%": the split the runtime would run and the schedule's predicted bubble.
std::string split_text(const Prediction& prediction) {
  std::string layers;
  for (const int64_t count : prediction.stage_layers) layers += str(" ", count);
  return str(
      "split: layers per virtual stage", layers,
      prediction.layout.pp_layers_auto
          ? str(", balanced by time (pp_layers=auto, costed by ", prediction.split_source, ")")
          : ", balanced by FLOPs (the default)",
      "; predicted bubble ", percent(prediction.bubble_fraction));
}

}  // namespace

nlohmann::json prediction_to_json(const Prediction& prediction) {
  const MemoryBreakdown& memory = prediction.memory;
  const TimeBreakdown& time = prediction.time;
  nlohmann::json stages = nlohmann::json::array();
  for (const StagePrediction& stage : prediction.stages) {
    stages.push_back({{"layers", stage.layers},
                      {"memory_bytes", stage.memory_bytes},
                      {"inflight_microbatches", stage.inflight_microbatches},
                      {"busy_s", stage.busy_s}});
  }
  return {
      {"layout", layout_to_json(prediction.layout, prediction.microbatches)},
      {"memory_per_device_bytes",
       {{"params", memory.params},
        {"grads", memory.grads},
        {"optimizer", memory.optimizer},
        {"activations", memory.activations},
        {"buffers", memory.buffers},
        {"total", memory.total()}}},
      {"memory_capacity_bytes", prediction.memory_capacity},
      {"fullest_stage", prediction.fullest_stage},
      {"inflight_microbatches", prediction.inflight_microbatches},
      {"step_time_s", prediction.step_time_s},
      {"context_parallel_bytes", prediction.context_parallel_bytes},
      {"step_time_breakdown_s",
       {{"compute", time.compute},
        {"tensor_parallel", time.tensor_parallel},
        {"context_parallel", time.context_parallel},
        {"expert_all_to_all", time.expert_all_to_all},
        {"pipeline_bubble", time.pipeline_bubble},
        {"pipeline_p2p", time.pipeline_p2p},
        {"data_parallel", time.data_parallel},
        {"optimizer", time.optimizer}}},
      {"tokens_per_s", prediction.tokens_per_s},
      {"model_tflops_per_device", prediction.model_tflops_per_device},
      {"hardware_tflops_per_device", prediction.hardware_tflops_per_device},
      {"mfu", prediction.mfu},
      {"bubble_fraction", prediction.bubble_fraction},
      {"fits", prediction.fits},
      {"tp_spans_nodes", prediction.tp_spans_nodes},
      {"compute_breakdown_s",
       {{"matmul", time.compute_parts.matmul},
        {"attention", time.compute_parts.attention},
        {"elementwise", time.compute_parts.elementwise},
        {"kernels", time.compute_parts.kernels},
        {"recompute", time.compute_parts.recompute}}},
      {"links",
       {{"tensor_parallel", link_name(prediction.links.tensor_parallel)},
        {"context_parallel", link_name(prediction.links.context_parallel)},
        {"expert_all_to_all", link_name(prediction.links.expert)},
        {"pipeline_p2p", link_name(prediction.links.pipeline)},
        {"data_parallel", link_name(prediction.links.data_parallel)}}},
      {"stages", stages},
      {"stage_layers", prediction.stage_layers},
      {"split_source", prediction.split_source},
  };
}

nlohmann::json search_to_json(const SearchResult& result) {
  nlohmann::json list = nlohmann::json::array();
  for (size_t i = 0; i < result.top.size(); ++i) {
    nlohmann::json entry = prediction_to_json(result.top[i].prediction);
    entry["rank"] = i + 1;
    entry["reason"] = result.top[i].reason;
    list.push_back(entry);
  }
  return list;
}

std::string plan_heading(const PlanInputs& inputs) {
  const TransformerSpec& model = inputs.model;
  const ClusterProfile& cluster = inputs.cluster;
  const ParameterCounts counts = parameter_counts(model);
  return str("model: ", count(counts.total / 1e9), "B parameters (", model.n_layers,
             " layers, d_model ", model.d_model, ", ", model.n_heads, " heads, seq ", model.seq_len,
             ", vocab ", model.vocab_size, "), ", name_of(inputs.precision),
             "\ncluster: ", cluster.name, ": ", cluster.nodes, " x ", cluster.devices_per_node, " ",
             cluster.device.name, " (", count(cluster.device.peak_tflops), " TFLOP/s, ",
             gigabytes(cluster.memory_bytes()), ")\nglobal batch: ", inputs.global_batch,
             " sequences (", inputs.global_batch * model.seq_len, " tokens) per step\n");
}

std::string prediction_to_text(const Prediction& prediction, const PlanInputs& inputs,
                               bool explain) {
  const MemoryBreakdown& memory = prediction.memory;
  const TimeBreakdown& time = prediction.time;
  std::ostringstream out;
  out << "layout: " << layout_to_string(prediction.layout) << " (" << prediction.microbatches
      << " microbatches per step)";
  if (prediction.tp_spans_nodes) out << "\n  note: the tensor-parallel group spans nodes";
  if (prediction.layout.pp > 1) out << "\n" << split_text(prediction);
  out << "\nmemory per device: " << gigabytes(memory.total()) << " of "
      << gigabytes(prediction.memory_capacity) << (prediction.fits ? ": fits" : ": DOES NOT FIT");
  if (prediction.layout.pp > 1) {
    out << " (stage " << prediction.fullest_stage << ", the fullest; layers per stage";
    for (const StagePrediction& stage : prediction.stages) out << " " << stage.layers;
    out << ")";
  }
  out << "\n  parameters   " << gigabytes(memory.params) << "\n  gradients    "
      << gigabytes(memory.grads) << "\n  optimizer    " << gigabytes(memory.optimizer)
      << "\n  activations  " << gigabytes(memory.activations) << " ("
      << count(prediction.inflight_microbatches)
      << (prediction.inflight_microbatches == 1 ? " microbatch" : " microbatches") << " in flight)"
      << "\n  buffers      " << gigabytes(memory.buffers)
      << "\nstep time: " << seconds(prediction.step_time_s) << "\n  compute             "
      << seconds(time.compute) << "\n  tensor-parallel     " << seconds(time.tensor_parallel);
  if (prediction.layout.cp > 1) {
    out << "\n  context-parallel    " << seconds(time.context_parallel) << " ("
        << name_of(prediction.layout.cp_comm) << ", "
        << gigabytes(prediction.context_parallel_bytes) << " sent per device)";
  }
  if (inputs.model.moe.enabled())
    out << "\n  expert all-to-all   " << seconds(time.expert_all_to_all);
  out << "\n  pipeline bubble     " << seconds(time.pipeline_bubble) << "\n  pipeline p2p        "
      << seconds(time.pipeline_p2p) << "\n  data-parallel       " << seconds(time.data_parallel)
      << "\n  optimizer           " << seconds(time.optimizer)
      << "\nthroughput: " << count(prediction.tokens_per_s) << " tokens/s; per device "
      << count(prediction.model_tflops_per_device) << " model TFLOP/s, "
      << count(prediction.hardware_tflops_per_device) << " hardware TFLOP/s; MFU "
      << percent(prediction.mfu) << "; bubble " << percent(prediction.bubble_fraction) << "\n";
  if (explain) out << explanation(prediction);
  return out.str();
}

std::string search_to_text(const SearchResult& result, const PlanInputs& inputs, bool explain) {
  std::ostringstream out;
  out << result.candidates << " valid layouts, " << result.fitting << " fit in "
      << gigabytes(inputs.cluster.memory_bytes()) << "; the fastest " << result.top.size() << ":\n";
  for (size_t i = 0; i < result.top.size(); ++i) {
    const Prediction& prediction = result.top[i].prediction;
    out << "\n#" << i + 1 << " " << seconds(prediction.step_time_s) << " per step, MFU "
        << percent(prediction.mfu) << ", " << gigabytes(prediction.memory.total()) << " per device";
    if (i > 0) out << " — behind #1 on " << result.top[i].reason;
    out << "\n" << prediction_to_text(prediction, inputs, explain && i == 0);
  }
  if (!result.lost.empty()) {
    out << "\nwhy the other layouts lost:\n";
    for (const LossGroup& group : result.lost) {
      out << "  " << group.reason << ": " << group.count << " layouts; best of them "
          << layout_to_string(group.example) << ": " << group.detail << "\n";
    }
  }
  return out.str();
}

std::string serving_to_text(const ServePrediction& prediction) {
  std::ostringstream out;
  const PlanLayout& layout = prediction.layout;
  out << "serving layout: tp=" << layout.tp << " pp=" << layout.pp << " (" << layout.dp
      << " replicas)\nmemory per device (the fullest): weights "
      << gigabytes(prediction.weight_bytes) << ", step workspace "
      << gigabytes(prediction.workspace_bytes) << ", KV cache "
      << gigabytes(prediction.kv_cache_bytes) << " of " << gigabytes(prediction.memory_capacity)
      << "\nKV cache: " << std::setprecision(4) << prediction.kv_bytes_per_token / 1024
      << " KiB per token per device, " << std::setprecision(8) << prediction.kv_tokens
      << " tokens, " << prediction.sequences << " sequences of the full length"
      << (prediction.fits ? "" : ": DOES NOT FIT")
      << "; serve.kv_cache_mb = " << prediction.kv_cache_mb() << "\n";
  if (prediction.fits) {
    out << "decode: " << prediction.decode_batch << " sequences per step, " << std::setprecision(4)
        << prediction.decode_step_s * 1e3 << " ms per step, " << prediction.tokens_per_s
        << " tokens/s over all replicas\n";
  }
  return out.str();
}

nlohmann::json serving_to_json(const ServePrediction& prediction) {
  return {{"tp", prediction.layout.tp},
          {"pp", prediction.layout.pp},
          {"replicas", prediction.layout.dp},
          {"weight_bytes", prediction.weight_bytes},
          {"workspace_bytes", prediction.workspace_bytes},
          {"kv_bytes_per_token", prediction.kv_bytes_per_token},
          {"kv_cache_bytes", prediction.kv_cache_bytes},
          {"kv_tokens", prediction.kv_tokens},
          {"sequences", prediction.sequences},
          {"kv_cache_mb", prediction.kv_cache_mb()},
          {"decode_batch", prediction.decode_batch},
          {"decode_step_s", prediction.decode_step_s},
          {"tokens_per_s", prediction.tokens_per_s},
          {"memory_capacity_bytes", prediction.memory_capacity},
          {"fits", prediction.fits}};
}

std::string checkpoints_to_text(const CheckpointPlan& plan, const CheckpointCosts& costs) {
  std::ostringstream out;
  out << "checkpoints (MTBF " << costs.mtbf_hours_per_node << " h per node: a failure every "
      << fixed(plan.job_mtbf_s / 3600, 2) << " h; " << costs.write_gbs_per_node
      << " GB/s of storage per node; restart " << costs.restart_s << " s; "
      << fixed(plan.bytes_per_device / 1e9, 2) << " GB per device):\n"
      << "  sync:   stalls " << fixed(plan.sync.stall_s, 2) << " s; every "
      << plan.sync.interval_steps << " steps (" << fixed(plan.sync.interval_s, 0)
      << " s, Young's interval); " << fixed(100 * plan.sync.lost_fraction, 2)
      << "% of throughput lost\n"
      << "  async:  stalls " << fixed(plan.async.stall_s, 3) << " s to snapshot, writes in "
      << fixed(plan.async.write_s, 2) << " s behind training; every " << plan.async.interval_steps
      << " steps (" << fixed(plan.async.interval_s, 0) << " s); "
      << fixed(100 * plan.async.lost_fraction, 2) << "% lost (checkpoint.async = true)\n";
  return out.str();
}

nlohmann::json checkpoints_to_json(const CheckpointPlan& plan) {
  return {{"bytes_per_device", plan.bytes_per_device},
          {"job_mtbf_s", plan.job_mtbf_s},
          {"sync", mode_json(plan.sync)},
          {"async", mode_json(plan.async)}};
}

}  // namespace strata
