// The cost model's pieces and how they add up: collective times by the links a group spans,
// memory and time breakdowns that sum to their totals, what each layout choice changes, the
// search over a 175B GPT on 1024 A100s (fast, only fitting layouts, tp inside nodes), and the
// layout `parallel.auto` picks.
#include <gtest/gtest.h>

#include <ctime>

#include "expect_error.h"
#include "strata/core/error.h"
#include "strata/plan/collectives.h"
#include "strata/plan/cost_model.h"
#include "strata/plan/search.h"
#include "test_configs.h"

namespace strata {
namespace {

NetworkProfile test_network() {
  NetworkProfile network;
  network.intra_node_gbs = 100;  // 1e11 B/s
  network.inter_node_gbs = 10;   // 1e10 B/s
  network.latency_us = 10;
  network.intra_node_latency_us = 1;
  return network;
}

TEST(Collectives, GroupSpanFollowsRankOrder) {
  // 8 devices per node: tp=8 fills a node, a dp group spaced 8 apart has one member per node,
  // a dp group spaced 2 apart has 4 members in each node.
  GroupSpan tp = group_span(1, 8, 8);
  EXPECT_EQ(tp.nodes, 1);
  EXPECT_EQ(tp.members_per_node, 8);
  GroupSpan wide_tp = group_span(1, 16, 8);
  EXPECT_EQ(wide_tp.nodes, 2);
  EXPECT_TRUE(wide_tp.crosses_nodes());
  GroupSpan dp = group_span(8, 16, 8);
  EXPECT_EQ(dp.nodes, 16);
  EXPECT_EQ(dp.members_per_node, 1);
  GroupSpan mixed = group_span(2, 16, 8);
  EXPECT_EQ(mixed.nodes, 4);
  EXPECT_EQ(mixed.members_per_node, 4);
}

TEST(Collectives, AlphaBetaTimes) {
  const NetworkProfile network = test_network();
  const double N = 1e9;
  // Inside a node, a ring of 4: 2*3 steps of 1 us, 2*3/4 of N at 1e11 B/s.
  EXPECT_DOUBLE_EQ(all_reduce_seconds(network, group_span(1, 4, 8), N), 6e-6 + 1.5 * N / 1e11);
  EXPECT_DOUBLE_EQ(reduce_scatter_seconds(network, group_span(1, 4, 8), N), 3e-6 + 0.75 * N / 1e11);
  EXPECT_DOUBLE_EQ(all_gather_seconds(network, group_span(1, 4, 8), N), 3e-6 + 0.75 * N / 1e11);
  // One member per node: the plain ring over the inter-node link.
  EXPECT_DOUBLE_EQ(all_reduce_seconds(network, group_span(8, 4, 8), N), 6 * 10e-6 + 1.5 * N / 1e10);
  // 2 nodes x 4 members: intra phases on the full data, inter phase on a quarter each.
  const double phase = (3 * 1e-6 + 0.75 * N / 1e11) + (1 * 10e-6 + 0.5 * (N / 4) / 1e10);
  EXPECT_DOUBLE_EQ(all_reduce_seconds(network, group_span(2, 8, 8), N), 2 * phase);
  // all-to-all over 2 nodes x 2 members: 1 intra peer, 2 remote peers.
  EXPECT_DOUBLE_EQ(all_to_all_seconds(network, group_span(4, 4, 8), N),
                   1e-6 + 0.25 * N / 1e11 + 2 * 10e-6 + 0.5 * N / 1e10);
  EXPECT_DOUBLE_EQ(p2p_seconds(network, true, N), 10e-6 + N / 1e10);
  EXPECT_DOUBLE_EQ(p2p_seconds(network, false, N), 1e-6 + N / 1e11);
  EXPECT_EQ(all_reduce_seconds(network, group_span(1, 1, 8), N), 0.0);
}

TransformerSpec gpt_175b() { return megatron_gpt(96, 12288, 96, 51200, 2048); }

ClusterProfile a100_nodes(int64_t nodes) {
  ClusterProfile cluster = load_cluster("a100-80gb");
  cluster.nodes = nodes;
  return cluster;
}

TEST(CostModel, MemoryOfOneDeviceIsTheModelStateAndOneMicrobatch) {
  TransformerSpec spec = megatron_gpt(4, 1024, 16, 50304, 1024);
  spec.dropout = false;
  ClusterProfile cluster = a100_nodes(1);
  cluster.devices_per_node = 1;
  const Prediction prediction = predict_layout(plan_inputs(spec, cluster, 8), PlanLayout{});
  const double psi = parameter_counts(spec).total;
  EXPECT_DOUBLE_EQ(prediction.memory.params, 2 * psi);
  EXPECT_DOUBLE_EQ(prediction.memory.grads, 2 * psi);
  EXPECT_DOUBLE_EQ(prediction.memory.optimizer, 12 * psi);
  EXPECT_DOUBLE_EQ(prediction.memory.buffers, 0.0);
  ActivationOptions options;
  const double layers = 4 * layer_activation_bytes(spec, 1, false, options);
  const double n = 1024, h = 1024, V = 50304;
  const double head = 2 * n * h + 2 * n * h + 2 * 4 * n * V;  // norm input, head input, logits
  EXPECT_DOUBLE_EQ(prediction.memory.activations, layers + head);
  EXPECT_EQ(prediction.microbatches, 8);
  EXPECT_EQ(prediction.layout.dp, 1);
}

TEST(CostModel, BreakdownsAddUpAndMetricsFollow) {
  const PlanInputs inputs = plan_inputs(gpt_175b(), a100_nodes(128), 1536);
  PlanLayout layout = parse_layout("tp=8,pp=8,zero=1,recompute=selective,sequence_parallel=true");
  const Prediction prediction = predict_layout(inputs, layout);
  EXPECT_EQ(prediction.layout.dp, 16);
  EXPECT_EQ(prediction.layout.schedule, PipelineSchedule::one_f_one_b);
  EXPECT_EQ(prediction.microbatches, 96);
  EXPECT_NEAR(prediction.time.total(), prediction.step_time_s, 1e-9 * prediction.step_time_s);
  const MemoryBreakdown& memory = prediction.memory;
  EXPECT_GT(memory.params, 0);
  EXPECT_GT(memory.activations, 0);
  EXPECT_GT(memory.buffers, 0);
  EXPECT_GT(prediction.time.pipeline_bubble, 0);
  EXPECT_GT(prediction.time.tensor_parallel, 0);
  EXPECT_GT(prediction.time.data_parallel, 0);
  // Throughput against the closed forms, not the cost model's own arithmetic: model FLOPs per
  // step 72 B s l h^2 (1 + s/(6h) + V/(12 l h)) (Narayanan et al. 2021, without recomputation),
  // spread over all 1024 devices, against the A100's 312 TFLOP/s; selective recomputation adds
  // the attention core's forward, 4 B s^2 h per layer, to the FLOPs the hardware runs.
  const double B = 1536, s = 2048, l = 96, h = 12288, V = 51200, devices = 1024;
  const double model_flops = 72 * B * s * l * h * h * (1 + s / (6 * h) + V / (12 * l * h));
  const double hardware_flops = model_flops + 4 * B * s * s * h * l;
  const double device_seconds = prediction.step_time_s * devices;
  const double model_tflops = model_flops / device_seconds / 1e12;
  EXPECT_NEAR(prediction.model_tflops_per_device, model_tflops, 1e-9 * model_tflops);
  EXPECT_NEAR(prediction.mfu, model_tflops / 312, 1e-9 * model_tflops / 312);
  EXPECT_NEAR(prediction.hardware_tflops_per_device, hardware_flops / device_seconds / 1e12,
              1e-9 * hardware_flops / device_seconds / 1e12);
  // Every token of the global batch once per step: tokens/s times model FLOPs per token is the
  // model FLOP rate of all devices together.
  EXPECT_NEAR(prediction.tokens_per_s * (model_flops / (B * s)), model_tflops * devices * 1e12,
              1e-9 * model_tflops * devices * 1e12);
  // 1F1B stage 0 holds p microbatches; ZeRO-1 shards the 12 bytes of optimizer state over dp.
  EXPECT_EQ(prediction.fullest_stage, 0);
  EXPECT_DOUBLE_EQ(prediction.inflight_microbatches, 8);
  EXPECT_NEAR(memory.optimizer / memory.params, 12.0 / 2 / 16, 1e-12);
  // Megatron's published setup for this model reaches about 50% MFU; the model should too.
  EXPECT_GT(prediction.mfu, 0.3);
  EXPECT_LT(prediction.mfu, 0.7);
  EXPECT_TRUE(prediction.fits);
}

// The compute split --explain prints adds up to compute for every recomputation mode and stage
// shape; each efficiency term moves only its own part; the links say which groups leave a node.
TEST(CostModel, ComputeByKindAddsUpAndEachTermMovesItsPart) {
  for (const char* text : {"tp=8,pp=8,recompute=none", "tp=8,pp=8,recompute=selective",
                           "tp=4,pp=4,recompute=full,sequence_parallel=true", "tp=8"}) {
    const Prediction prediction =
        predict_layout(plan_inputs(gpt_175b(), a100_nodes(16), 256), parse_layout(text));
    const ComputeBreakdown& parts = prediction.time.compute_parts;
    EXPECT_NEAR(parts.total(), prediction.time.compute, 1e-9 * prediction.time.compute) << text;
    EXPECT_GT(parts.matmul, 0) << text;
    EXPECT_GT(parts.attention, 0) << text;
    EXPECT_GT(parts.elementwise, 0) << text;
    EXPECT_GT(parts.kernels, 0) << text;
    EXPECT_EQ(parts.recompute > 0, std::string(text).find("recompute=none") == std::string::npos &&
                                       std::string(text) != "tp=8")
        << text;
  }
  const PlanLayout layout = parse_layout("tp=8,pp=8");
  ClusterProfile plain = a100_nodes(16);
  plain.device.matmul_half_dim = 0;
  plain.device.kernel_overhead_us = 0;
  const Prediction base = predict_layout(plan_inputs(gpt_175b(), plain, 256), layout);
  EXPECT_EQ(base.time.compute_parts.kernels, 0);
  ClusterProfile shaped = plain;
  shaped.device.matmul_half_dim = 128;
  const Prediction thin = predict_layout(plan_inputs(gpt_175b(), shaped, 256), layout);
  // The narrowest multiply of a tp 8 shard is the out projection's h / 8 = 1536 wide.
  EXPECT_GT(thin.time.compute_parts.matmul, base.time.compute_parts.matmul * (1 + 128.0 / 12288));
  EXPECT_LT(thin.time.compute_parts.matmul, base.time.compute_parts.matmul * (1 + 128.0 / 1536));
  EXPECT_DOUBLE_EQ(thin.time.compute_parts.elementwise, base.time.compute_parts.elementwise);
  EXPECT_FALSE(base.links.tensor_parallel);
  EXPECT_TRUE(base.links.pipeline);  // 8 stages of 8 devices: one node each
  EXPECT_TRUE(base.links.data_parallel);
}

// model.attention = "blockwise" priced as its kernel runs: the causal tiles forward, 5
// products for the forward's 2 backward, at blockwise_attention_efficiency, with no s x s
// scores through memory or kept for the backward; selective recomputation repeats its forward.
TEST(CostModel, BlockwiseAttentionPricesItsTilesNotTheScores) {
  TransformerSpec eager = megatron_gpt(8, 4096, 32, 51200, 8192);
  eager.dropout = false;
  TransformerSpec blockwise = eager;
  blockwise.attention = AttentionKernel::blockwise;
  const ClusterProfile cluster = a100_nodes(1);
  const PlanLayout layout = parse_layout("tp=8,micro_batch=1");
  const Prediction slow = predict_layout(plan_inputs(eager, cluster, 8), layout);
  const Prediction fast = predict_layout(plan_inputs(blockwise, cluster, 8), layout);
  const double causal = (8192.0 + 64) / (2 * 8192);
  EXPECT_NEAR(fast.time.compute_parts.attention / slow.time.compute_parts.attention,
              (1 + 2.5) * causal / 0.55 / (3 / 0.86), 1e-9);
  EXPECT_LT(fast.time.compute_parts.elementwise, 0.5 * slow.time.compute_parts.elementwise);
  EXPECT_DOUBLE_EQ(fast.time.compute_parts.matmul, slow.time.compute_parts.matmul);
  EXPECT_LT(fast.memory.activations, 0.5 * slow.memory.activations);
  EXPECT_LT(fast.step_time_s, slow.step_time_s);
  EXPECT_DOUBLE_EQ(fast.model_tflops_per_device * fast.step_time_s,
                   slow.model_tflops_per_device * slow.step_time_s);  // the same model FLOPs

  // Selective recomputation leaves the blockwise core alone (it keeps only a log-sum-exp
  // besides the out-projection's input): priced as no recomputation.
  PlanLayout selective = layout;
  selective.recompute = Recompute::selective;
  const Prediction same = predict_layout(plan_inputs(blockwise, cluster, 8), selective);
  EXPECT_EQ(same.time.compute_parts.recompute, 0);
  EXPECT_DOUBLE_EQ(same.step_time_s, fast.step_time_s);
  EXPECT_DOUBLE_EQ(same.memory.activations, fast.memory.activations);
  // Under context parallelism the pieces keep their own output: selective drops it and repeats
  // the core, its tiles (each of the 8 layers, one microbatch per rank, split 8 ways).
  PlanLayout cp = parse_layout("tp=4,cp=2,micro_batch=1");
  const Prediction cp_none = predict_layout(plan_inputs(blockwise, cluster, 8), cp);
  cp.recompute = Recompute::selective;
  const Prediction repeated = predict_layout(plan_inputs(blockwise, cluster, 8), cp);
  const double core_forward =
      attention_core_flops(blockwise, 1).forward / 8 / (cluster.device.peak_tflops * 1e12 * 0.55);
  const double kernel = cluster.device.kernel_overhead_us * 1e-6;
  EXPECT_NEAR(repeated.time.compute_parts.recompute, 8 * 8 * (core_forward + kernel),
              1e-9 * repeated.time.compute_parts.recompute);
  EXPECT_LT(repeated.memory.activations, cp_none.memory.activations);
}

// [compression] priced in the data-parallel phase: over a 25 GB/s inter-node link the
// compressed exchanges pay (bf16 halves an fp32 run's gradient bytes; PowerSGD rank 4 and 1-bit
// Adam send a small fraction), int8 gathers cut ZeRO-3's per-microbatch gathers, and a layout
// with nothing to compress is refused.
TEST(CostModel, CompressionShrinksTheDataParallelPhaseWhereItTravels) {
  const TransformerSpec spec = megatron_gpt(24, 2048, 16, 51200, 2048);
  // Between nodes at a tenth of the preset's bandwidth the reduction far outlasts the last
  // backward it overlaps, so the dp phase is bound by the bytes that travel.
  auto dp_seconds = [&](const std::string& text, Precision precision) {
    PlanInputs inputs = plan_inputs(spec, a100_nodes(16), 16);
    inputs.cluster.network.inter_node_gbs /= 10;
    inputs.precision = precision;
    return predict_layout(inputs, parse_layout(text)).time.data_parallel;
  };
  const double none = dp_seconds("tp=8", Precision::fp32);
  EXPECT_NEAR(dp_seconds("tp=8,compression=bf16", Precision::fp32) / none, 0.5, 0.1);
  EXPECT_LT(dp_seconds("tp=8,compression=powersgd", Precision::fp32), 0.3 * none);
  EXPECT_LT(dp_seconds("tp=8,compression=onebit", Precision::fp32), 0.2 * none);
  // A higher rank sends more.
  EXPECT_GT(dp_seconds("tp=8,compression=powersgd,powersgd_rank=64", Precision::fp32),
            dp_seconds("tp=8,compression=powersgd,powersgd_rank=4", Precision::fp32));
  // In bf16 training the gradients already travel in 2 bytes: bf16 compression changes nothing.
  EXPECT_DOUBLE_EQ(dp_seconds("tp=8,compression=bf16", Precision::bf16),
                   dp_seconds("tp=8", Precision::bf16));
  EXPECT_LT(dp_seconds("tp=8,zero=3,zero_gather=int8", Precision::bf16),
            0.7 * dp_seconds("tp=8,zero=3", Precision::bf16));
  const PlanInputs inputs = plan_inputs(spec, a100_nodes(1), 8);
  EXPECT_THROW(predict_layout(inputs, parse_layout("tp=8,compression=onebit")), UserError);
  EXPECT_THROW(predict_layout(inputs, parse_layout("tp=4,zero_gather=int8")), UserError);
  EXPECT_EQ(layout_to_string(resolve_layout(parse_layout("tp=4,compression=powersgd"), 8)),
            "tp=4 pp=1 dp=2 cp=1 cp_comm=ring ep=1 vpp=1 zero=0 micro_batch=1 recompute=none "
            "sequence_parallel=false schedule=none compression=powersgd powersgd_rank=4");
}

// The runtime starts each bucket's reduction as the last backward completes it
// (data_parallel/gradient_reduction.h): what is left after the backward is the last bucket's
// reduction, or what the backward could not cover.
TEST(CostModel, TheGradientReductionOverlapsTheLastBackwardBucketByBucket) {
  EXPECT_DOUBLE_EQ(data_parallel_exposed(1.0, 1, 5.0), 1.0);   // one bucket: nothing overlaps
  EXPECT_DOUBLE_EQ(data_parallel_exposed(1.0, 4, 5.0), 0.25);  // a long backward: the last one
  EXPECT_DOUBLE_EQ(data_parallel_exposed(4.0, 4, 2.0), 2.5);   // 4 - 2 * 3/4
  // Against a bucket-by-bucket timeline: bucket i ready at i, each reduction 1.5.
  double end = 0;
  for (int i = 1; i <= 8; ++i) end = std::max(end, static_cast<double>(i)) + 1.5;
  EXPECT_DOUBLE_EQ(data_parallel_exposed(12.0, 8, 8.0), end - 8.0);

  // In a prediction: more tokens per microbatch lengthen the backward that hides the same
  // reduction (the 1.3B model on 16 nodes, dp 16); a stage that finishes its last backward
  // before the pipeline drains hides that much more (pp 4: the last stage finishes first).
  const TransformerSpec spec = megatron_gpt(24, 2048, 16, 51200, 2048);
  auto predict = [&](const std::string& text, int64_t global_batch) {
    return predict_layout(plan_inputs(spec, a100_nodes(16), global_batch), parse_layout(text));
  };
  const Prediction short_backward = predict("tp=8,micro_batch=1", 16);
  const Prediction long_backward = predict("tp=8,micro_batch=4", 64);
  EXPECT_GT(short_backward.time.data_parallel, 1.5 * long_backward.time.data_parallel);
  // The search prunes by the lower bound, which must stay below the prediction now that a
  // stage's drain time hides its reduction (the bound credits a stage only the time between
  // its own work and the busiest stage's).
  CostModel model(plan_inputs(spec, a100_nodes(16), 64));
  for (const char* text :
       {"tp=8,pp=4,micro_batch=1,schedule=1f1b", "tp=4,pp=4,zero=1,micro_batch=2,schedule=1f1b",
        "tp=2,pp=8,micro_batch=1,schedule=zb-h1", "tp=8,pp=2,zero=3,micro_batch=1,schedule=gpipe",
        "tp=4,pp=4,vpp=2,micro_batch=1,schedule=interleaved-1f1b"}) {
    const PlanLayout layout = resolve_layout(parse_layout(text), 128);
    const Prediction full = model.predict(layout);
    EXPECT_LE(model.predict_lower_bound(layout).step_time_s, full.step_time_s) << text;
    EXPECT_GT(full.time.data_parallel, 0.0) << text;
  }
}

TEST(CostModel, EachChoiceMovesTheRightTerm) {
  const PlanInputs inputs = plan_inputs(gpt_175b(), a100_nodes(128), 1536);
  auto predict = [&](const std::string& layout) {
    return predict_layout(inputs, parse_layout(layout));
  };
  const Prediction base = predict("tp=8,pp=8,micro_batch=1");
  // Recomputation trades activations for compute.
  const Prediction selective = predict("tp=8,pp=8,micro_batch=1,recompute=selective");
  const Prediction full = predict("tp=8,pp=8,micro_batch=1,recompute=full");
  EXPECT_LT(selective.memory.activations, base.memory.activations);
  EXPECT_LT(full.memory.activations, selective.memory.activations);
  EXPECT_GT(selective.time.compute, base.time.compute);
  EXPECT_GT(full.time.compute, selective.time.compute);
  EXPECT_GT(full.time.tensor_parallel,
            base.time.tensor_parallel);  // the forward's all-reduces again
  // Sequence parallelism divides the replicated activations, not the communication time.
  const Prediction sp = predict("tp=8,pp=8,micro_batch=1,sequence_parallel=true");
  EXPECT_LT(sp.memory.activations, base.memory.activations);
  // ZeRO shards model state, stage by stage.
  const Prediction zero1 = predict("tp=8,pp=8,micro_batch=1,zero=1");
  const Prediction zero2 = predict("tp=8,pp=8,micro_batch=1,zero=2");
  EXPECT_LT(zero1.memory.optimizer, base.memory.optimizer);
  EXPECT_EQ(zero1.memory.grads, base.memory.grads);
  EXPECT_LT(zero2.memory.grads, zero1.memory.grads);
  EXPECT_LT(zero1.time.optimizer, base.time.optimizer);
  // More pipeline stages at the same microbatches: a bigger bubble.
  const Prediction deep = predict("tp=8,pp=16,micro_batch=1");
  EXPECT_GT(deep.bubble_fraction, base.bubble_fraction);
  // Interleaving shrinks the bubble and holds more activations.
  const Prediction interleaved = predict("tp=8,pp=8,vpp=2,micro_batch=1");
  EXPECT_LT(interleaved.bubble_fraction, base.bubble_fraction);
  EXPECT_GT(interleaved.inflight_microbatches, base.inflight_microbatches);
  // ZB-V: a smaller bubble than ZB-H1's at 1F1B's peak activations, and no tied-embedding
  // all-reduce (both copies on rank 0).
  const Prediction zb_h1 = predict("tp=8,pp=8,micro_batch=1,schedule=zb-h1");
  const Prediction zb_v = predict("tp=8,pp=8,vpp=2,micro_batch=1,schedule=zb-v");
  EXPECT_LT(zb_v.bubble_fraction, zb_h1.bubble_fraction);
  EXPECT_LT(zb_h1.bubble_fraction, base.bubble_fraction);
  EXPECT_LE(zb_v.inflight_microbatches, 8 + 1e-9);  // p, 1F1B's stage 0
  // A tensor-parallel group across nodes is priced on the slow link and flagged.
  const Prediction wide = predict("tp=16,pp=4,micro_batch=1");
  EXPECT_TRUE(wide.tp_spans_nodes);
  EXPECT_FALSE(base.tp_spans_nodes);
  EXPECT_GT(wide.time.tensor_parallel, 2 * base.time.tensor_parallel);
}

TEST(CostModel, MixtureOfExpertsAddsAllToAllAndShardsExperts) {
  TransformerSpec spec = megatron_gpt(24, 2048, 16, 51200, 2048);
  spec.moe.num_experts = 16;
  spec.moe.top_k = 2;
  spec.moe.every = 2;
  const PlanInputs inputs = plan_inputs(spec, a100_nodes(4), 256);
  const Prediction ep1 = predict_layout(inputs, parse_layout("tp=2,ep=1,micro_batch=1,zero=1"));
  const Prediction ep8 = predict_layout(inputs, parse_layout("tp=2,ep=8,micro_batch=1,zero=1"));
  EXPECT_EQ(ep1.time.expert_all_to_all, 0.0);
  EXPECT_GT(ep8.time.expert_all_to_all, 0.0);
  EXPECT_LT(ep8.memory.params, ep1.memory.params);
  // An MoE layer: the dense layer's attention and norms, a router, 16 MLPs.
  const ParameterCounts counts = parameter_counts(spec);
  const double mlp = 2 * 4 * 2048.0 * 2048 + 4 * 2048 + 2048;  // weights and biases
  EXPECT_DOUBLE_EQ(counts.expert_params, 16 * mlp);
  EXPECT_DOUBLE_EQ(counts.moe_layer, counts.dense_layer - mlp + 2048 * 16 + 16 * mlp);
}

TEST(Search, Gpt175bOn1024A100sIsFastFitsAndKeepsTpInsideNodes) {
  const PlanInputs inputs = plan_inputs(gpt_175b(), a100_nodes(128), 1536);
  // CPU time of this (the only searching) thread: what the search costs, independent of how
  // many other processes share the machine's cores while the suite runs.
  const auto cpu_seconds = [] {
    timespec now{};
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &now);
    return static_cast<double>(now.tv_sec) + 1e-9 * static_cast<double>(now.tv_nsec);
  };
  const double start = cpu_seconds();
  SearchOptions options;
  options.top = 10;
  const SearchResult result = search_layouts(inputs, options);
  const double seconds = cpu_seconds() - start;
  // The bound, for an optimized build; sanitizer instrumentation (scripts/test.sh's
  // second build, at -O1) makes this search several times slower.
#if defined(__SANITIZE_ADDRESS__)
  const double limit = 120.0;
#else
  const double limit = 10.0;
#endif
  EXPECT_LT(seconds, limit) << "the search took " << seconds << " s of CPU time";
  ASSERT_EQ(result.top.size(), 10u);
  EXPECT_GT(result.candidates, result.fitting);
  for (size_t i = 0; i < result.top.size(); ++i) {
    const Prediction& prediction = result.top[i].prediction;
    EXPECT_TRUE(prediction.fits) << i;
    EXPECT_LE(prediction.memory.total(), 80e9) << i;
    EXPECT_LE(prediction.layout.tp, 8) << i;
    EXPECT_FALSE(prediction.tp_spans_nodes) << i;
    EXPECT_EQ(
        prediction.layout.tp * prediction.layout.pp * prediction.layout.dp * prediction.layout.cp,
        1024);
    if (i > 0) {
      EXPECT_GE(prediction.step_time_s, result.top[i - 1].prediction.step_time_s);
      EXPECT_FALSE(result.top[i].reason.empty());
    }
  }
  EXPECT_EQ(result.top[0].reason, "fastest");
  // The losers are accounted for, by reason, "does not fit" among them.
  int64_t lost = 0;
  bool no_fit = false;
  for (const LossGroup& group : result.lost) {
    lost += group.count;
    no_fit |= group.reason == "does not fit";
  }
  EXPECT_EQ(lost + static_cast<int64_t>(result.top.size()), result.candidates);
  EXPECT_TRUE(no_fit);
}

TEST(Search, CrossNodeTensorParallelOnlyWhenAsked) {
  const PlanInputs inputs = plan_inputs(megatron_gpt(8, 4096, 32, 51200, 2048), a100_nodes(2), 64);
  SearchOptions options;
  options.allowed = [](const PlanLayout& layout) { return layout.tp > 8; };
  EXPECT_THROW(search_layouts(inputs, options), UserError);  // no layout left
  options.allow_tp_across_nodes = true;
  const SearchResult wide = search_layouts(inputs, options);
  ASSERT_FALSE(wide.top.empty());
  EXPECT_EQ(wide.top[0].prediction.layout.tp, 16);
  EXPECT_TRUE(wide.top[0].prediction.tp_spans_nodes);
}

TEST(Search, NoLayoutFitsSaysWhatToChange) {
  ClusterProfile cluster = a100_nodes(1);
  testing::expect_user_error([&] { search_layouts(plan_inputs(gpt_175b(), cluster, 64)); },
                             {"no layout fits", "more devices", "80.0 GB"});
}

TEST(AutoLayout, PicksARunnableLayoutAndExplains) {
  Config config;
  config.model = testing::gpt_config(256, 512, 2, 8, 64);
  config.train.global_batch = 8;
  ClusterProfile cluster = load_cluster("h100-80gb");
  const AutoLayout choice = choose_layout(config, 2, cluster);
  const ParallelConfig& parallel = choice.config.parallel;
  EXPECT_EQ(parallel.tp * parallel.pp * parallel.dp * parallel.cp, 2);
  EXPECT_EQ(parallel.zero, 0);
  EXPECT_EQ(parallel.cp, 1);
  EXPECT_EQ(choice.prediction.layout.recompute, Recompute::none);
  EXPECT_EQ(config.train.global_batch % (parallel.dp * choice.config.parallel.micro_batch), 0);
  EXPECT_NO_THROW(validate_config(choice.config, 2));
  EXPECT_NE(choice.explanation.find("parallel.auto:"), std::string::npos) << choice.explanation;
  EXPECT_THROW(choose_layout(config, 12, cluster), UserError);  // 12 ranks: not whole 8-GPU nodes
}

}  // namespace
}  // namespace strata
