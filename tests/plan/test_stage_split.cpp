// parallel.pp_layers = "auto" (plan/stage_split.h): the split balanced by time, costed by the cost
// model or by a measured layer profile where it applies; the planner pricing it and its search
// choosing it for a model whose head outweighs its layers; the config's "auto" resolved into
// the list; the layer profile read back as written.
#include <gtest/gtest.h>

#include <numeric>

#include "expect_error.h"
#include "strata/core/error.h"
#include "strata/plan/layer_profile.h"
#include "strata/plan/search.h"
#include "strata/plan/stage_model.h"
#include "strata/plan/stage_split.h"
#include "test_configs.h"
#include "test_support.h"

namespace strata {
namespace {

// Vocabulary 32000 and d_model 256 (the issue's model): its head and loss cost several layers.
ModelConfig vocabulary_heavy(int64_t n_layers) {
  return testing::gpt_config(32000, 256, n_layers, 8, 128);
}

// A CPU of 2 ranks as `strata plan calibrate` describes one (on a GPU preset the launch cost
// of a kernel outweighs a d_model 256 layer's work, and the head's few kernels cost little).
ClusterProfile cpu_ranks(int64_t devices) {
  ClusterProfile cluster = parse_cluster(R"([cluster]
nodes = 1
devices_per_node = 2
[device]
name = "test cpu"
peak_tflops = 0.1
memory_gb = 16.0
memory_bandwidth_gbs = 20.0
elementwise_gbs = 5.0
precision = "fp32"
[network]
intra_node_gbs = 5.0
inter_node_gbs = 5.0
latency_us = 5.0
)",
                                         "test cpu");
  cluster.devices_per_node = devices;
  return cluster;
}

PlanInputs inputs_for(const ModelConfig& model, int64_t devices) {
  PlanInputs inputs = plan_inputs(transformer_of(model), cpu_ranks(devices), 8);
  inputs.precision = Precision::fp32;
  return inputs;
}

PlanLayout pipeline(int64_t pp, PipelineSchedule schedule = PipelineSchedule::one_f_one_b,
                    int64_t vpp = 1) {
  PlanLayout layout;
  layout.pp = pp;
  layout.dp = 1;
  layout.micro_batch = 1;
  layout.schedule = schedule;
  layout.vpp = vpp;
  layout.pp_layers_auto = true;
  return layout;
}

TEST(AutoSplit, TheHeadCostsLayersOnTheLastStage) {
  const PlanInputs inputs = inputs_for(vocabulary_heavy(8), 2);
  const PlanLayout layout = pipeline(2);
  const SplitCosts seconds = split_costs(inputs, layout);
  EXPECT_GT(seconds.head, 3 * seconds.layer) << "the head and loss of 32000 x 256";
  EXPECT_GT(seconds.embedding, 0);
  EXPECT_LT(seconds.embedding, seconds.head);
  const AutoSplit split = auto_split(inputs, layout);
  EXPECT_EQ(split.layers, balanced_split(8, stage_placement(layout), seconds));
  EXPECT_LT(split.layers.back(), split.layers.front());
  EXPECT_CONTAINS(split.source, "the cost model, cluster profile");
}

// zb-v puts the first and the last virtual stage on rank 0: its two chunks together hold fewer
// layers than rank 1's.
TEST(AutoSplit, VShapeChargesEmbeddingAndHeadToRankZero) {
  const PlanInputs inputs = inputs_for(vocabulary_heavy(8), 2);
  const std::vector<int64_t> layers =
      auto_split(inputs, pipeline(2, PipelineSchedule::zb_v, 2)).layers;
  ASSERT_EQ(layers.size(), 4u);
  EXPECT_LT(layers[0] + layers[3], layers[1] + layers[2]);
  EXPECT_EQ(std::accumulate(layers.begin(), layers.end(), int64_t{0}), 8);
}

// A measured profile splits by its seconds where it was measured for the model, precision and
// micro batch (on one rank, no recomputation); anywhere else the cost model does.
TEST(AutoSplit, AMeasuredProfileAppliesWhereItWasMeasured) {
  PlanInputs inputs = inputs_for(vocabulary_heavy(8), 2);
  LayerProfile measured;
  measured.model = layer_profile_model(inputs.model);
  measured.precision = Precision::fp32;
  measured.micro_batch = 1;
  measured.seconds = {1.0, 0.0, 0.0};  // extras cost nothing: an even split
  inputs.layer_profile = measured;
  const AutoSplit split = auto_split(inputs, pipeline(2));
  EXPECT_EQ(split.layers, (std::vector<int64_t>{4, 4}));
  EXPECT_EQ(split.source, "the measured layer profile");
  PlanLayout other_batch = pipeline(2);
  other_batch.micro_batch = 2;
  EXPECT_CONTAINS(auto_split(inputs, other_batch).source, "the cost model");
  PlanLayout split_over_tp = pipeline(2);
  split_over_tp.tp = 2;
  EXPECT_FALSE(layer_profile_applies(measured, inputs.model, Precision::fp32, split_over_tp));
  EXPECT_FALSE(layer_profile_applies(measured, inputs.model, Precision::bf16, pipeline(2)));
  EXPECT_FALSE(layer_profile_applies(measured,
                                     transformer_of(testing::gpt_config(32000, 512, 8, 8, 128)),
                                     Precision::fp32, pipeline(2)))
      << "another model";
}

// The planner prices pp_layers=auto with the split the runtime will run, which beats the FLOP
// split here (the loss's passes over the logits cost time the FLOPs do not count), and the
// search picks it.
TEST(AutoSplit, ThePlannerPricesAndSearchesTheBalancedSplit) {
  const PlanInputs inputs = inputs_for(vocabulary_heavy(24), 2);
  CostModel model(inputs);
  PlanLayout by_flops = pipeline(2);
  by_flops.pp_layers_auto = false;
  const Prediction automatic = model.predict(pipeline(2));
  const Prediction flops = model.predict(by_flops);
  EXPECT_EQ(automatic.stage_layers, auto_split(inputs, pipeline(2)).layers);
  ParallelConfig runtime;
  runtime.pp = 2;
  EXPECT_EQ(flops.stage_layers, stage_layers(runtime, inputs.model)) << "the runtime's default";
  EXPECT_NE(automatic.stage_layers, flops.stage_layers);
  EXPECT_LT(automatic.step_time_s, flops.step_time_s);
  EXPECT_CONTAINS(automatic.split_source, "the cost model");

  SearchOptions options;
  options.allowed = [](const PlanLayout& layout) {
    return layout.pp == 2 && layout.schedule == PipelineSchedule::one_f_one_b &&
           layout.recompute == Recompute::none && !layout.sequence_parallel;
  };
  const SearchResult result = search_layouts(inputs, options);
  ASSERT_FALSE(result.top.empty());
  EXPECT_TRUE(result.top.front().prediction.layout.pp_layers_auto)
      << layout_to_string(result.top.front().prediction.layout);
}

TEST(AutoSplit, ResolvesAConfigsAutoIntoItsList) {
  Config config;
  config.model = vocabulary_heavy(8);
  config.parallel.pp = 2;
  config.parallel.dp = 1;
  config.parallel.micro_batch = 1;
  config.train.global_batch = 8;
  config.parallel.pp_layers = PipelineLayers{true, {}};
  const ClusterProfile cluster = inputs_for(config.model, 2).cluster;
  std::string note;
  const Config resolved = resolve_pp_layers(config, cluster, std::nullopt, &note);
  EXPECT_FALSE(resolved.parallel.pp_layers.automatic);
  PlanLayout layout = pipeline(2);
  EXPECT_EQ(resolved.parallel.pp_layers.layers,
            auto_split(inputs_for(config.model, 2), layout).layers);
  EXPECT_CONTAINS(note, "parallel.pp_layers = \"auto\": [");
  EXPECT_CONTAINS(note, "the head and loss");
  EXPECT_NO_THROW(validate_config(resolved, 2));
  Config given = config;
  given.parallel.pp_layers = PipelineLayers{false, {5, 3}};
  EXPECT_TRUE(resolve_pp_layers(given, cluster, std::nullopt, &note) == given);
}

TEST(LayerProfile, ReadsBackAsWrittenAndNamesWhatIsWrong) {
  testing::TempDir dir;
  const std::string path = dir.file("cache/local_layers.toml");
  EXPECT_FALSE(load_layer_profile(path).has_value()) << "no file yet";
  LayerProfile profile;
  profile.model = layer_profile_model(transformer_of(vocabulary_heavy(4)));
  profile.precision = Precision::bf16;
  profile.micro_batch = 4;
  profile.seconds = {0.0125, 0.003, 0.1 + 0.2};
  save_layer_profile(path, profile);
  const std::optional<LayerProfile> back = load_layer_profile(path);
  ASSERT_TRUE(back.has_value());
  EXPECT_EQ(back->model, profile.model);
  EXPECT_EQ(back->precision, Precision::bf16);
  EXPECT_EQ(back->micro_batch, 4);
  EXPECT_EQ(back->seconds.layer, 0.0125);
  EXPECT_EQ(back->seconds.head, 0.1 + 0.2);
  testing::write_bytes(path, "model = \"x\"\nprecision = \"fp32\"\nmicro_batch = 1\nlayer_s = 1\n");
  EXPECT_CONTAINS(testing::user_error([&] { load_layer_profile(path); }),
                  "the layer profile has no 'embedding_s'; run `strata plan calibrate "
                  "--profile-layers` again");
}

}  // namespace
}  // namespace strata
