// What the planner charges for context parallelism: each exchange's bytes against its closed
// form (docs/planner.md), the ring's overlap with the attention blocks (hidden on a fast link,
// exposed on a slow one), the all-gather's gathered K/V in memory, the search choosing cp for a
// sequence too long for one rank, and cp_comm in --layout.
#include <gtest/gtest.h>

#include <algorithm>
#include <string>

#include "expect_error.h"
#include "strata/plan/collectives.h"
#include "strata/plan/context_parallel.h"
#include "strata/plan/cost_model.h"
#include "strata/plan/search.h"

namespace strata {
namespace {

// 8 heads of 64 over 4 kv heads, a 1024-token sequence, the blockwise kernel context
// parallelism runs.
TransformerSpec small_gqa() {
  TransformerSpec spec;
  spec.attention = AttentionKernel::blockwise;
  spec.n_layers = 2;
  spec.d_model = 512;
  spec.n_heads = 8;
  spec.n_kv_heads = 4;
  spec.d_ff = 2048;
  spec.vocab_size = 1024;
  spec.seq_len = 1024;
  return spec;
}

ClusterProfile test_cluster(int64_t nodes, int64_t devices_per_node, double inter_node_gbs) {
  ClusterProfile cluster;
  cluster.name = "test";
  cluster.nodes = nodes;
  cluster.devices_per_node = devices_per_node;
  cluster.device.name = "G";
  cluster.device.peak_tflops = 100;
  cluster.device.memory_gb = 80;
  cluster.device.memory_bandwidth_gbs = 2000;
  cluster.network.intra_node_gbs = 100;
  cluster.network.inter_node_gbs = inter_node_gbs;
  cluster.network.latency_us = 10;
  cluster.network.intra_node_latency_us = 1;
  return cluster;
}

PlanLayout layout_of(const std::string& text) { return parse_layout(text); }

const ContextParallelComm kAllComms[] = {ContextParallelComm::ring, ContextParallelComm::all_gather,
                                         ContextParallelComm::all_to_all};

// b = 2, s = 1024, n = cp = 4, D = 64, H_t = 8 / tp, K_t = 4 / tp, e = 2 (bf16).
TEST(ContextParallelExchange, BytesOfEachExchangeAreItsFormula) {
  const TransformerSpec spec = small_gqa();
  const ClusterProfile cluster = test_cluster(1, 8, 10);
  const double b = 2, s = 1024, n = 4, D = 64, e = 2, H_t = 4, K_t = 2;
  PlanLayout layout = layout_of("tp=2,cp=4,micro_batch=2");
  EXPECT_EQ(kv_heads_per_tp_rank(spec, 2), 2);

  layout.cp_comm = ContextParallelComm::ring;
  const ContextParallelExchange ring =
      context_parallel_exchange(spec, layout, cluster, e, 1.0, 2.5);
  EXPECT_DOUBLE_EQ(ring.forward_bytes, (n - 1) * 2 * b * (s / n) * K_t * D * e);
  EXPECT_DOUBLE_EQ(ring.backward_bytes,
                   (n - 1) * 2 * b * (s / n) * K_t * D * e + n * 2 * b * (s / n) * K_t * D * 4);
  EXPECT_EQ(ring.recompute_bytes, 0.0);
  EXPECT_EQ(ring.activation_bytes, 0.0);

  layout.cp_comm = ContextParallelComm::all_gather;
  const ContextParallelExchange gather =
      context_parallel_exchange(spec, layout, cluster, e, 1.0, 2.5);
  EXPECT_DOUBLE_EQ(gather.forward_bytes, (n - 1) * 2 * b * (s / n) * K_t * D * e);
  EXPECT_DOUBLE_EQ(gather.backward_bytes, gather.forward_bytes);
  EXPECT_DOUBLE_EQ(gather.activation_bytes, 2 * b * s * K_t * D * e);
  // Nothing hides them: the collectives over the cp group (4 members spaced tp = 2 apart).
  const GroupSpan cp_group = group_span(2, 4, 8);
  EXPECT_DOUBLE_EQ(gather.forward_seconds,
                   all_gather_seconds(cluster.network, cp_group, 2 * b * s * K_t * D * e));
  EXPECT_DOUBLE_EQ(gather.backward_seconds,
                   reduce_scatter_seconds(cluster.network, cp_group, 2 * b * s * K_t * D * e));

  layout.cp_comm = ContextParallelComm::all_to_all;
  const ContextParallelExchange ulysses =
      context_parallel_exchange(spec, layout, cluster, e, 1.0, 2.5);
  // K_t = 2 < n = 4: the kv heads are repeated to 4 before the exchange.
  EXPECT_DOUBLE_EQ(ulysses.forward_bytes,
                   (n - 1) / n * b * (s / n) * (2 * H_t + 2 * std::max(K_t, n)) * D * e);
  EXPECT_DOUBLE_EQ(ulysses.backward_bytes, ulysses.forward_bytes);
  const double q_bytes = b * (s / n) * H_t * D * e, kv_bytes = b * (s / n) * n * D * e;
  EXPECT_DOUBLE_EQ(ulysses.forward_seconds,
                   2 * all_to_all_seconds(cluster.network, cp_group, q_bytes) +
                       2 * all_to_all_seconds(cluster.network, cp_group, kv_bytes));
  EXPECT_DOUBLE_EQ(ulysses.backward_seconds, ulysses.forward_seconds);
  EXPECT_EQ(ulysses.activation_bytes, 0.0);

  // At cp = 1 there is nothing to exchange.
  for (ContextParallelComm comm : kAllComms) {
    PlanLayout single = layout_of("tp=2,micro_batch=2");
    single.cp_comm = comm;
    const ContextParallelExchange none =
        context_parallel_exchange(spec, single, cluster, e, 1.0, 2.5);
    EXPECT_EQ(none.forward_bytes + none.backward_bytes + none.forward_seconds +
                  none.backward_seconds + none.activation_bytes,
              0.0)
        << name_of(comm);
  }
}

TEST(ContextParallelExchange, KvHeadsTpDoesNotDivideAreExpandedToTheQueryHeads) {
  TransformerSpec spec = small_gqa();
  spec.n_kv_heads = 1;  // tp = 2 does not divide it: each rank expands it to its 4 query heads
  EXPECT_EQ(kv_heads_per_tp_rank(spec, 2), 4);
  const ClusterProfile cluster = test_cluster(1, 8, 10);
  const double b = 1, s = 1024, n = 2, D = 64, e = 4, H_t = 4;
  PlanLayout layout = layout_of("tp=2,cp=2");
  const ContextParallelExchange ring =
      context_parallel_exchange(spec, layout, cluster, e, 1.0, 2.5);
  EXPECT_DOUBLE_EQ(ring.forward_bytes, (n - 1) * 2 * b * (s / n) * H_t * D * e);
  EXPECT_DOUBLE_EQ(ring.backward_bytes,
                   (n - 1) * 2 * b * (s / n) * H_t * D * e + n * 2 * b * (s / n) * H_t * D * 4);
  layout.cp_comm = ContextParallelComm::all_to_all;
  const ContextParallelExchange ulysses =
      context_parallel_exchange(spec, layout, cluster, e, 1.0, 2.5);
  EXPECT_DOUBLE_EQ(ulysses.forward_bytes, (n - 1) / n * b * (s / n) * (2 * H_t + 2 * H_t) * D * e);
}

// The ring hides a hop behind a step's blocks, 1 / n of the rank's causal attention forward
// and backward; the last dK/dV hop comes after the last block and is always seen.
TEST(ContextParallelExchange, RingOverlapsItsHopsWithTheBlocks) {
  const TransformerSpec spec = small_gqa();
  const double e = 2;
  // tp = 1, cp = 8, b = 2: a K/V block of 2 * 2 * 128 * 4 * 64 * 2 bytes, its dK/dV in fp32.
  const PlanLayout layout = layout_of("cp=8,micro_batch=2");
  const double kv_block = 2 * 2 * 128 * 4 * 64 * e, gradient_block = 2 * 2 * 128 * 4 * 64 * 4.0;

  // One node: 100 GB/s links. Blocks of 1 ms cover every hop.
  const ClusterProfile node = test_cluster(1, 8, 10);
  // 8 steps of 1 ms forward and 2 ms backward.
  const double core = 8 * 1e-3, core_backward = 8 * 2e-3;
  const ContextParallelExchange covered =
      context_parallel_exchange(spec, layout, node, e, core, core_backward);
  EXPECT_EQ(covered.forward_seconds, 0.0);
  EXPECT_DOUBLE_EQ(covered.backward_seconds, p2p_seconds(node.network, false, gradient_block));

  // The overlap condition, exactly: a hop no longer than its step's blocks is hidden.
  const double kv_hop = p2p_seconds(node.network, false, kv_block);
  EXPECT_EQ(
      context_parallel_exchange(spec, layout, node, e, 8 * kv_hop, 16 * kv_hop).forward_seconds,
      0.0);
  const double short_block = 0.5 * kv_hop;
  EXPECT_DOUBLE_EQ(
      context_parallel_exchange(spec, layout, node, e, 8 * short_block, 16 * short_block)
          .forward_seconds,
      7 * (kv_hop - short_block));

  // Two nodes of 4 with a 0.01 GB/s link between them: the ring crosses it, and every step
  // waits for its slowest hop.
  const ClusterProfile slow = test_cluster(2, 4, 0.01);
  ASSERT_TRUE(group_span(1, 8, 4).crosses_nodes());
  const ContextParallelExchange exposed =
      context_parallel_exchange(spec, layout, slow, e, core, core_backward);
  const double hop = p2p_seconds(slow.network, true, kv_block);
  const double gradient_hop = p2p_seconds(slow.network, true, gradient_block);
  const double forward_block = 1e-3, backward_block = 2e-3;
  ASSERT_GT(hop, backward_block);
  EXPECT_DOUBLE_EQ(exposed.forward_seconds, 7 * (hop - forward_block));
  // Step 0 sends K/V, steps 1-6 K/V and dK/dV, step 7 dK/dV; then the last dK/dV hop.
  EXPECT_DOUBLE_EQ(exposed.backward_seconds, (hop - backward_block) +
                                                 6 * (hop + gradient_hop - backward_block) +
                                                 (gradient_hop - backward_block) + gradient_hop);
  EXPECT_EQ(exposed.forward_bytes, covered.forward_bytes);  // the same bytes, slower

  // Through the whole cost model: the step charges every layer and microbatch of it.
  const PlanInputs inputs = plan_inputs(spec, slow, 4);
  const Prediction prediction = predict_layout(inputs, layout);
  const double m = 2, layers = 2;
  const AttentionCoreFlops core_flops = attention_core_flops(spec, 2);
  const ContextParallelExchange per_layer =
      context_parallel_exchange(spec, prediction.layout, slow, e, core_flops.forward / 8 / 100e12,
                                core_flops.input_grad / 8 / 100e12);
  EXPECT_GT(prediction.time.context_parallel, 0.0);
  EXPECT_DOUBLE_EQ(prediction.time.context_parallel,
                   m * layers * (per_layer.forward_seconds + per_layer.backward_seconds));
  EXPECT_DOUBLE_EQ(prediction.context_parallel_bytes,
                   m * layers * (per_layer.forward_bytes + per_layer.backward_bytes));
  EXPECT_NEAR(prediction.time.total(), prediction.step_time_s, 1e-9 * prediction.step_time_s);
}

TEST(ContextParallelExchange, RecomputationRepeatsWhatItDropped) {
  const TransformerSpec spec = small_gqa();
  const ClusterProfile slow = test_cluster(2, 4, 0.01);
  for (ContextParallelComm comm : kAllComms) {
    for (Recompute recompute : {Recompute::selective, Recompute::full}) {
      PlanLayout layout = layout_of("cp=8,micro_batch=2");
      layout.cp_comm = comm;
      layout.recompute = recompute;
      const ContextParallelExchange exchange =
          context_parallel_exchange(spec, layout, slow, 2, 1e-3, 2.5e-3);
      // Selective recomputation keeps the gathered or re-sharded inputs of the core; the ring
      // must fetch the other ranks' K/V again.
      const bool repeats = recompute == Recompute::full || comm == ContextParallelComm::ring;
      EXPECT_EQ(exchange.recompute_bytes, repeats ? exchange.forward_bytes : 0.0)
          << name_of(comm) << " " << name_of(recompute);
      EXPECT_EQ(exchange.recompute_seconds, repeats ? exchange.forward_seconds : 0.0)
          << name_of(comm) << " " << name_of(recompute);
    }
  }
}

// The all-gather keeps the whole sequence's K/V per layer; full recomputation only while a
// layer is recomputed.
TEST(ContextParallelExchange, AllGatherKeepsTheGatheredKeysAndValues) {
  const PlanInputs inputs = plan_inputs(small_gqa(), test_cluster(1, 8, 10), 8);
  const double gathered = 2 * 1 * 1024 * 2 * 64 * 2.0;  // 2 b s K_t D e at tp = 2
  const Prediction ring = predict_layout(inputs, layout_of("tp=2,cp=4,cp_comm=ring"));
  const Prediction gather = predict_layout(inputs, layout_of("tp=2,cp=4,cp_comm=all-gather"));
  EXPECT_DOUBLE_EQ(gather.memory.activations - ring.memory.activations, 2 * gathered);
  const Prediction ring_full =
      predict_layout(inputs, layout_of("tp=2,cp=4,cp_comm=ring,recompute=full"));
  const Prediction gather_full =
      predict_layout(inputs, layout_of("tp=2,cp=4,cp_comm=all-gather,recompute=full"));
  EXPECT_DOUBLE_EQ(gather_full.memory.activations - ring_full.memory.activations, gathered);
}

// A 160k-token sequence, one per step, on 16 devices: without context parallelism only tensor
// and pipeline parallelism split it (and a pipeline of one microbatch idles), so the fastest
// layout runs context parallelism. Under the eager kernel, whose scores alone outgrow a device
// (even tp = 8 with recomputation holds 107 GB of them), no layout fits: cp is not offered there,
// as context-parallel attention runs the blockwise kernel.
TEST(ContextParallelSearch, ChoosesContextParallelismForALongSequence) {
  TransformerSpec spec;
  spec.n_layers = 4;
  spec.d_model = 2048;
  spec.n_heads = 16;
  spec.n_kv_heads = 16;
  spec.d_ff = 8192;
  spec.vocab_size = 32000;
  spec.seq_len = 163840;
  spec.learned_positions = false;
  spec.attention = AttentionKernel::blockwise;  // the kernel context parallelism runs
  ClusterProfile cluster = load_cluster("h100-80gb");
  cluster.nodes = 2;
  const PlanInputs inputs = plan_inputs(spec, cluster, 1);

  SearchOptions without_cp;
  without_cp.allowed = [](const PlanLayout& layout) { return layout.cp == 1; };
  const SearchResult no_cp = search_layouts(inputs, without_cp);
  ASSERT_FALSE(no_cp.top.empty());

  const SearchResult result = search_layouts(inputs);
  ASSERT_FALSE(result.top.empty());
  const Prediction& best = result.top.front().prediction;
  EXPECT_GT(best.layout.cp, 1) << layout_to_string(best.layout);
  EXPECT_LT(best.step_time_s, 0.8 * no_cp.top.front().prediction.step_time_s)
      << layout_to_string(no_cp.top.front().prediction.layout);
  EXPECT_TRUE(best.fits);
  EXPECT_GT(best.context_parallel_bytes, 0.0);
  // Its exchange is the cheapest of those the rules allow for its sizes.
  for (ContextParallelComm comm : kAllComms) {
    PlanLayout other = best.layout;
    other.cp_comm = comm;
    if (!layout_problems(spec, other, cluster.devices(), 1).empty()) continue;
    CostModel model(inputs);
    const Prediction prediction = model.predict(other);
    if (!prediction.fits) continue;
    EXPECT_LE(best.step_time_s, prediction.step_time_s) << name_of(comm);
  }

  TransformerSpec eager = spec;
  eager.attention = AttentionKernel::eager;
  testing::expect_user_error([&] { search_layouts(plan_inputs(eager, cluster, 1)); },
                             {"no layout fits", "model.attention = \"blockwise\""});
}

TEST(ContextParallelLayout, CpCommRoundTripsThroughTheLayoutString) {
  for (ContextParallelComm comm : kAllComms) {
    PlanLayout layout = layout_of("tp=2,pp=2,cp=2,zero=1,micro_batch=2,recompute=selective");
    layout.cp_comm = comm;
    layout = resolve_layout(layout, 16);
    const std::string text = layout_to_string(layout);
    EXPECT_NE(text.find(str(" cp_comm=", name_of(comm), " ")), std::string::npos) << text;
    std::string as_flag = text;
    std::replace(as_flag.begin(), as_flag.end(), ' ', ',');
    const PlanLayout parsed = parse_layout(as_flag);
    EXPECT_EQ(parsed.cp_comm, comm) << as_flag;
    EXPECT_EQ(layout_to_string(parsed), text);
    EXPECT_EQ(layout_to_json(parsed, 4)["cp_comm"], name_of(comm));
  }
  EXPECT_EQ(layout_of("cp=2").cp_comm, ContextParallelComm::ring);
  testing::expect_user_error([] { layout_of("cp=2,cp_comm=ulysses"); },
                             {"cp_comm=ulysses must be ring, all-gather, all-to-all"});
}

// --layout is judged by the rule book: all-to-all splits each tp rank's heads over cp.
TEST(ContextParallelLayout, AllToAllNeedsHeadsThatSplitOverCp) {
  TransformerSpec spec = small_gqa();
  spec.n_heads = 12;
  spec.n_kv_heads = 12;
  spec.d_model = 768;
  const PlanInputs inputs = plan_inputs(spec, test_cluster(1, 8, 10), 8);
  testing::expect_user_error(
      [&] { predict_layout(inputs, layout_of("tp=2,cp=4,cp_comm=all-to-all")); },
      {"cp_comm=all-to-all re-shards each tp rank's 6 query heads and 6 kv heads "
       "(model.n_heads = 12, model.n_kv_heads = 12, over tp = 2) over cp (4)",
       "cp_comm=ring would work"});
  EXPECT_NO_THROW(predict_layout(inputs, layout_of("tp=2,cp=4,cp_comm=ring")));
  EXPECT_NO_THROW(predict_layout(inputs, layout_of("tp=2,cp=2,cp_comm=all-to-all")));
}

}  // namespace
}  // namespace strata
