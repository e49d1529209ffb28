// What `strata plan` prints: a prediction or a search result, as text for people or JSON for
// scripts. The JSON keys are the public interface (docs/planner.md).
#pragma once
#include <nlohmann/json.hpp>
#include <string>

#include "strata/plan/checkpoint_plan.h"
#include "strata/plan/search.h"
#include "strata/plan/serve_plan.h"

namespace strata {

// {"layout": {...}, "memory_per_device_bytes": {params, grads, optimizer, activations,
//  buffers, total}, "memory_capacity_bytes", "fullest_stage", "inflight_microbatches",
//  "step_time_s", "step_time_breakdown_s": {compute, tensor_parallel, context_parallel,
//  expert_all_to_all, pipeline_bubble, pipeline_p2p, data_parallel, optimizer},
//  "tokens_per_s", "model_tflops_per_device", "hardware_tflops_per_device", "mfu",
//  "bubble_fraction", "fits", "tp_spans_nodes", "compute_breakdown_s": {matmul, attention,
//  elementwise, kernels, recompute}, "links": {tensor_parallel, context_parallel,
//  expert_all_to_all, pipeline_p2p, data_parallel: "intra-node" | "inter-node"}, "stages"}
nlohmann::json prediction_to_json(const Prediction& prediction);

// The top layouts, fastest first: prediction_to_json plus "rank" (1-based) and "reason".
nlohmann::json search_to_json(const SearchResult& result);

// A heading naming model, cluster and batch, shared by both text reports.
std::string plan_heading(const PlanInputs& inputs);
// explain: also every part of the step (compute by kind, exposed communication by kind and the
// link it crosses, bubble, optimizer) with its share, largest first; for a search, of the first.
std::string prediction_to_text(const Prediction& prediction, const PlanInputs& inputs,
                               bool explain = false);
std::string search_to_text(const SearchResult& result, const PlanInputs& inputs,
                           bool explain = false);

// `--serve`: a serving layout's memory, KV cache and decode speed.
std::string serving_to_text(const ServePrediction& prediction);
nlohmann::json serving_to_json(const ServePrediction& prediction);

// `--mtbf-hours`: the checkpoint interval and throughput lost, synchronous and asynchronous.
std::string checkpoints_to_text(const CheckpointPlan& plan, const CheckpointCosts& costs);
nlohmann::json checkpoints_to_json(const CheckpointPlan& plan);

}  // namespace strata
