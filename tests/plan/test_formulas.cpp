// The published formulas of shared/reference/formulas.md, reproduced from the cost model's own
// arithmetic: GPT parameter counts and FLOPs (Narayanan et al. 2021, 1.7B to 1T), activation
// bytes per layer (Korthikanti et al. 2022, every row), model-state memory per ZeRO stage
// (Rajbhandari et al. 2020, every cell of Table 1), and the schedules' in-flight microbatches
// and bubbles as the planner gets them from the pipeline simulator.
#include <gtest/gtest.h>

#include <cmath>
#include <string>
#include <vector>

#include "strata/core/stages.h"
#include "strata/model/gpt.h"
#include "strata/plan/cost_model.h"
#include "strata/plan/model_state.h"
#include "strata/plan/transformer.h"
#include "test_configs.h"

namespace strata {
namespace {

// Narayanan et al. 2021, Table 1: heads, hidden size, layers, and the parameter count the
// paper prints (billions); V = 51200, s = 2048.
struct GptRow {
  const char* name;
  int64_t heads, hidden, layers;
  double printed_billions;
};
const std::vector<GptRow> kGptTable = {
    {"1.7B", 24, 2304, 24, 1.7},      {"3.6B", 32, 3072, 30, 3.6},
    {"7.5B", 32, 4096, 36, 7.5},      {"18B", 48, 6144, 40, 18.4},
    {"39B", 64, 8192, 48, 39.1},      {"76B", 80, 10240, 60, 76.1},
    {"145B", 96, 12288, 80, 145.6},   {"310B", 128, 16384, 96, 310.1},
    {"530B", 128, 20480, 105, 529.6}, {"1T", 160, 25600, 128, 1008.0},
};

double relative_difference(double a, double b) { return std::abs(a - b) / std::abs(b); }

TEST(GptFormulas, ParametersMatchNarayananForEveryConfiguration) {
  for (const GptRow& row : kGptTable) {
    const TransformerSpec spec = megatron_gpt(row.layers, row.hidden, row.heads);
    const ParameterCounts counts = parameter_counts(spec);
    const double l = static_cast<double>(row.layers), h = static_cast<double>(row.hidden);
    const double V = 51200, s = 2048;
    // P = 12 l h^2 (1 + 13/(12h) + (V+s)/(12 l h)); the paper leaves out the final norm.
    const double formula = 12 * l * h * h * (1 + 13 / (12 * h) + (V + s) / (12 * l * h));
    const double counted = counts.total - counts.final_norm;
    EXPECT_LT(relative_difference(counted, formula), 1e-12)
        << row.name << ": counted " << counted << ", formula " << formula;
    // Rounded as the paper prints it.
    const double digits = row.printed_billions >= 1000 ? 1.0 : 0.1;
    EXPECT_NEAR(counted / 1e9, row.printed_billions, digits * 0.5 + 1e-9) << row.name;
  }
}

TEST(GptFormulas, ModelAndHardwareFlopsMatchKorthikanti) {
  for (const GptRow& row : kGptTable) {
    const TransformerSpec spec = megatron_gpt(row.layers, row.hidden, row.heads);
    const double B = 1536, s = 2048, V = 51200;
    const double l = static_cast<double>(row.layers), h = static_cast<double>(row.hidden);
    const double model = 72 * B * s * l * h * h * (1 + s / (6 * h) + V / (12 * h * l));
    const double full = 96 * B * s * l * h * h * (1 + s / (6 * h) + V / (16 * l * h));
    EXPECT_LT(relative_difference(model_flops_per_step(spec, 1536), model), 1e-12) << row.name;
    EXPECT_LT(relative_difference(hardware_flops_per_step(spec, 1536, Recompute::none), model),
              1e-12)
        << row.name;
    EXPECT_LT(relative_difference(hardware_flops_per_step(spec, 1536, Recompute::full), full),
              1e-12)
        << row.name;
    // Selective recomputation repeats only the attention core: 4 B s^2 h per layer.
    const double selective = model + 4 * B * s * s * h * l;
    EXPECT_LT(
        relative_difference(hardware_flops_per_step(spec, 1536, Recompute::selective), selective),
        1e-12)
        << row.name;
    // Per token: 6 Psi + 12 l h s, Psi the parameters (biases and norms make the difference).
    const double per_token = 6 * parameter_counts(spec).total + 12 * l * h * s;
    EXPECT_LT(relative_difference(model_flops_per_step(spec, 1) / s, per_token), 5e-3) << row.name;
  }
}

TEST(GptFormulas, LayerFlopsSplitIntoForwardInputGradAndWeightGrad) {
  const TransformerSpec spec = megatron_gpt(24, 2304, 24);
  const double b = 4, s = 2048, h = 2304;
  const PassFlops flops = layer_flops(spec, 4, false);
  EXPECT_DOUBLE_EQ(flops.forward, 24 * b * s * h * h + 4 * b * s * s * h);
  EXPECT_DOUBLE_EQ(flops.input_grad, 24 * b * s * h * h + 8 * b * s * s * h);
  EXPECT_DOUBLE_EQ(flops.weight_grad, 24 * b * s * h * h);
  EXPECT_DOUBLE_EQ(flops.total(), 3 * flops.forward);
}

// strata's models for the planner-against-runtime checks: dense GELU and SwiGLU, and mixtures
// of experts whose experts' activation (model.moe.activation) differs from the dense MLP's.
struct StrataModel {
  const char* name;
  Activation activation;
  int64_t experts;
  Activation expert_activation;
};
const StrataModel kStrataModels[] = {
    {"gelu", Activation::gelu, 0, Activation::gelu},
    {"swiglu", Activation::swiglu, 0, Activation::gelu},
    {"moe gelu", Activation::gelu, 4, Activation::gelu},
    {"moe gelu, swiglu experts", Activation::gelu, 4, Activation::swiglu},
    {"moe swiglu, gelu experts", Activation::swiglu, 4, Activation::gelu},
};

ModelConfig strata_model(const StrataModel& m) {
  ModelConfig model = testing::gpt_config(256, 512, 4, 8, 256);
  model.moe.num_experts = m.experts;
  model.moe.top_k = 2;
  model.moe.every = 2;
  model.moe.capacity_factor = 1.25;
  model.moe.activation = m.expert_activation;
  model.n_kv_heads = 2;
  model.activation = m.activation;
  model.d_ff = 1376;
  return model;
}

TEST(GptFormulas, StrataModelFlopsEqualTheTrainersCount) {
  // The trainer's MFU uses core/stages.h's count; the planner's must be the same number, for
  // dense models and for mixture-of-experts ones (transformer_of reads [model.moe]).
  for (const StrataModel& m : kStrataModels) {
    const ModelConfig model = strata_model(m);
    const TransformerSpec spec = transformer_of(model);
    EXPECT_LT(relative_difference(model_flops_per_step(spec, 3) / (3.0 * 256),
                                  training_flops_per_token(model.shape())),
              1e-12)
        << m.name;
  }
}

// model.head_dim wider than d_model / n_heads (q is n_heads * head_dim wide, as in Mistral NeMo):
// the planner counts the parameters the model holds and the FLOPs the trainer counts.
TEST(GptFormulas, ExplicitHeadDimIsCountedAsTheModelHoldsIt) {
  ModelConfig model = testing::gpt_config(256, 512, 2, 8, 256);
  model.n_kv_heads = 4;
  model.head_dim_key = 96;
  model.pos = PositionEncoding::rope;
  model.activation = Activation::swiglu;
  model.norm = Norm::rmsnorm;
  model.tie_embeddings = false;
  const TransformerSpec spec = transformer_of(model);
  EXPECT_EQ(spec.q_width(), 768);
  EXPECT_EQ(parameter_counts(spec).total,
            static_cast<double>(GPT(model, 1, at::kFloat).num_parameters()));
  EXPECT_LT(relative_difference(model_flops_per_step(spec, 3) / (3.0 * 256),
                                training_flops_per_token(model.shape())),
            1e-12);
  // Per token and layer: q/k/v (768 + 2 * 384) x 512 and out 768 x 512 multiplies, 3 MLP ones,
  // and the attention core's QK^T and AV over 256 keys at 768 wide.
  const double h = 512, q = 768, kv = 384, F = model.ff_dim(), s = 256, V = 256;
  EXPECT_DOUBLE_EQ(training_flops_per_token(model.shape()),
                   6 * (2 * ((q + 2 * kv) * h + q * h + 3 * h * F) + V * h) + 12 * 2 * s * q);
}

// Korthikanti et al. 2022, bytes per layer with 16-bit activations (their Table 2 and eq. 2-6).
TEST(ActivationFormulas, EveryRowOfKorthikanti) {
  struct Shape {
    int64_t layers, hidden, heads, seq, micro_batch;
  };
  for (const Shape shape : {Shape{96, 12288, 96, 2048, 1}, Shape{24, 2304, 24, 2048, 4},
                            Shape{128, 25600, 160, 2048, 2}, Shape{2, 512, 8, 256, 3}}) {
    const TransformerSpec spec =
        megatron_gpt(shape.layers, shape.hidden, shape.heads, 51200, shape.seq);
    const double s = static_cast<double>(shape.seq), b = static_cast<double>(shape.micro_batch);
    const double h = static_cast<double>(shape.hidden), a = static_cast<double>(shape.heads);
    for (int64_t tp : {1, 2, 4, 8}) {
      const double t = static_cast<double>(tp);
      auto bytes = [&](bool sp, Recompute recompute) {
        ActivationOptions options;
        options.tp = tp;
        options.sequence_parallel = sp;
        options.recompute = recompute;
        options.element_bytes = 2;
        return layer_activation_bytes(spec, shape.micro_batch, false, options);
      };
      const std::string where =
          " (h=" + std::to_string(shape.hidden) + ", t=" + std::to_string(tp) + ")";
      if (tp == 1) {
        EXPECT_DOUBLE_EQ(bytes(false, Recompute::none), s * b * h * (34 + 5 * a * s / h))
            << "none" << where;
      }
      EXPECT_DOUBLE_EQ(bytes(false, Recompute::none),
                       s * b * h * (10 + 24 / t + 5 * a * s / (h * t)))
          << "tensor parallel" << where;
      EXPECT_DOUBLE_EQ(bytes(false, Recompute::selective), s * b * h * (10 + 24 / t))
          << "tensor parallel + selective" << where;
      EXPECT_DOUBLE_EQ(bytes(false, Recompute::full), 2 * s * b * h) << "full recompute" << where;
      if (tp > 1) {
        EXPECT_DOUBLE_EQ(bytes(true, Recompute::none), s * b * h * (34 / t + 5 * a * s / (h * t)))
            << "tensor + sequence parallel" << where;
        EXPECT_DOUBLE_EQ(bytes(true, Recompute::selective), 34 * s * b * h / t)
            << "tensor + sequence parallel + selective" << where;
      }
    }
  }
}

TEST(ActivationFormulas, StrataHasNoDropoutAndTrainsInFp32) {
  // strata's GPT keeps no dropout masks and only the softmax output of the attention core:
  // with fp32 that is 4 * (4 + 12) sbh + 4 a s^2 b per layer for the plain GPT.
  TransformerSpec spec = megatron_gpt(2, 512, 8, 256, 256);
  spec.dropout = false;
  ActivationOptions options;
  options.element_bytes = 4;
  const double s = 256, b = 2, h = 512, a = 8;
  EXPECT_DOUBLE_EQ(layer_activation_bytes(spec, 2, false, options),
                   4 * s * b * h * 16 + 4 * a * s * s * b);
}

// The blockwise kernel keeps a float32 log-sum-exp per row and head instead of the s x s
// softmax (docs/parallelism.md's table); its output is the out-projection's input, counted
// with the layer. Selective recomputation leaves that core alone; under context parallelism the
// pieces keep their own copy of the output too, and selective recomputation drops both.
TEST(ActivationFormulas, BlockwiseKeepsItsLogSumExpNotTheScores) {
  TransformerSpec spec = megatron_gpt(2, 512, 8, 256, 256);
  spec.dropout = false;
  spec.attention = AttentionKernel::blockwise;
  ActivationOptions options;
  options.element_bytes = 4;
  options.tp = 2;
  const double s = 256, b = 2, h = 512, a = 8, t = 2;
  EXPECT_DOUBLE_EQ(attention_core_activation_bytes(spec, 2, options), 4 * a * s * b / t);
  const double none = layer_activation_bytes(spec, 2, false, options);
  options.recompute = Recompute::selective;
  EXPECT_DOUBLE_EQ(layer_activation_bytes(spec, 2, false, options), none);
  EXPECT_DOUBLE_EQ(hardware_flops_per_step(spec, 8, Recompute::selective),
                   hardware_flops_per_step(spec, 8, Recompute::none));

  options.cp = 2;
  const double core = (4 * s / 2 * b * h + 4 * a * s / 2 * b) / t;
  EXPECT_DOUBLE_EQ(attention_core_activation_bytes(spec, 2, options), core);
  const double selective = layer_activation_bytes(spec, 2, false, options);
  options.recompute = Recompute::none;
  EXPECT_DOUBLE_EQ(layer_activation_bytes(spec, 2, false, options), selective + core);
  EXPECT_GT(hardware_flops_per_step(spec, 8, Recompute::selective, 2),
            hardware_flops_per_step(spec, 8, Recompute::none, 2));
}

// The attention core as the kernels execute it: eager the full s x s (layer_flops' core, twice
// it backward); blockwise the causal tiles, (s + 64) / (2 s) of it, and 5 products backward
// for the forward's 2. Model FLOPs (layer_flops, MFU) are the same for both kernels.
TEST(GptFormulas, AttentionCoreFlopsOfEachKernel) {
  TransformerSpec spec = megatron_gpt(2, 512, 8, 256, 1024);
  const double core = layer_flops(spec, 2, false).attention_core_forward;
  EXPECT_DOUBLE_EQ(core, 4 * (2 * 1024.0) * 1024 * 512);
  const AttentionCoreFlops eager = attention_core_flops(spec, 2);
  EXPECT_DOUBLE_EQ(eager.forward, core);
  EXPECT_DOUBLE_EQ(eager.input_grad, 2 * core);
  TransformerSpec blockwise = spec;
  blockwise.attention = AttentionKernel::blockwise;
  const AttentionCoreFlops tiles = attention_core_flops(blockwise, 2);
  EXPECT_DOUBLE_EQ(tiles.forward, core * (1024.0 + 64) / 2048);
  EXPECT_DOUBLE_EQ(tiles.input_grad, 2.5 * tiles.forward);
  EXPECT_EQ(layer_flops(blockwise, 2, false).total(), layer_flops(spec, 2, false).total());
  blockwise.seq_len = 32;  // shorter than a diagonal block: the whole square
  EXPECT_DOUBLE_EQ(attention_core_flops(blockwise, 2).forward,
                   layer_flops(blockwise, 2, false).attention_core_forward);
}

// Rajbhandari et al. 2020, Table 1: GB per device for Psi = 7.5B, 128B, 1T with mixed-precision
// Adam, as printed (data parallel, ZeRO-1, ZeRO-2, ZeRO-3). The paper rounds or truncates to the
// digits shown, so a cell matches when the formula is within one unit of its last digit.
struct ZeroRow {
  double psi_billions;
  int64_t data_parallel;
  const char* printed[4];
};
const std::vector<ZeroRow> kZeroTable = {
    {7.5, 1, {"120", "120", "120", "120"}},
    {7.5, 4, {"120", "52.5", "41.3", "30"}},
    {7.5, 16, {"120", "35.6", "21.6", "7.5"}},
    {7.5, 64, {"120", "31.4", "16.6", "1.88"}},
    {7.5, 256, {"120", "30.4", "15.4", "0.47"}},
    {7.5, 1024, {"120", "30.1", "15.1", "0.12"}},
    {128, 1, {"2048", "2048", "2048", "2048"}},
    {128, 4, {"2048", "896", "704", "512"}},
    {128, 16, {"2048", "608", "368", "128"}},
    {128, 64, {"2048", "536", "284", "32"}},
    {128, 256, {"2048", "518", "263", "8"}},
    {128, 1024, {"2048", "513", "257", "2"}},
    {1000, 1, {"16000", "16000", "16000", "16000"}},
    {1000, 4, {"16000", "7000", "5500", "4000"}},
    {1000, 16, {"16000", "4750", "2875", "1000"}},
    {1000, 64, {"16000", "4187", "2218", "250"}},
    {1000, 256, {"16000", "4046", "2054", "62.5"}},
    {1000, 1024, {"16000", "4011", "2013", "15.6"}},
};

double last_digit_unit(const std::string& printed) {
  const size_t dot = printed.find('.');
  return dot == std::string::npos ? 1.0
                                  : std::pow(10.0, -static_cast<double>(printed.size() - dot - 1));
}

TEST(ZeroFormulas, EveryCellOfRajbhandariTable1) {
  for (const ZeroRow& row : kZeroTable) {
    for (int64_t zero = 0; zero <= 3; ++zero) {
      const double psi = row.psi_billions * 1e9;
      const double gigabytes =
          model_state_bytes(psi, zero, row.data_parallel, Precision::bf16).total() / 1e9;
      const std::string printed = row.printed[zero];
      EXPECT_LT(std::abs(gigabytes - std::stod(printed)), last_digit_unit(printed))
          << "Psi " << row.psi_billions << "B, N_d " << row.data_parallel << ", ZeRO stage " << zero
          << ": model " << gigabytes << " GB, paper " << printed;
    }
  }
}

TEST(ZeroFormulas, ClosedFormsPerStageAndPrecision) {
  const double psi = 1e9, n = 8;
  auto total = [&](int64_t zero, Precision precision) {
    return model_state_bytes(psi, zero, 8, precision).total();
  };
  EXPECT_DOUBLE_EQ(total(0, Precision::bf16), 16 * psi);
  EXPECT_DOUBLE_EQ(total(1, Precision::bf16), 4 * psi + 12 * psi / n);
  EXPECT_DOUBLE_EQ(total(2, Precision::bf16), 2 * psi + 14 * psi / n);
  EXPECT_DOUBLE_EQ(total(3, Precision::bf16), 16 * psi / n);
  EXPECT_DOUBLE_EQ(total(0, Precision::fp32), 16 * psi);
  EXPECT_DOUBLE_EQ(total(1, Precision::fp32), 8 * psi + 8 * psi / n);
  EXPECT_DOUBLE_EQ(total(2, Precision::fp32), 4 * psi + 12 * psi / n);
  EXPECT_DOUBLE_EQ(total(3, Precision::fp32), 16 * psi / n);
}

// The schedules through the planner: a deep model with a negligible head and embedding (vocab
// 2) on one node, so the stages cost nearly the same.
struct PipelineCase {
  PipelineSchedule schedule;
  int64_t pp, vpp, microbatches;
  double inflight_stage0;  // the formulas' column
};

Prediction predict_pipeline(const PipelineCase& c) {
  TransformerSpec spec = megatron_gpt(48, 1024, 16, 2, 1024);
  ClusterProfile cluster = load_cluster("h100-80gb");
  cluster.devices_per_node = c.pp;
  PlanLayout layout;
  layout.pp = c.pp;
  layout.vpp = c.vpp;
  layout.schedule = c.schedule;
  return predict_layout(plan_inputs(spec, cluster, c.microbatches), layout);
}

TEST(PipelineFormulas, InflightMicrobatchesOfEverySchedule) {
  for (const PipelineCase& c :
       {PipelineCase{PipelineSchedule::gpipe, 4, 1, 8, 8},
        PipelineCase{PipelineSchedule::one_f_one_b, 4, 1, 8, 4},
        PipelineCase{PipelineSchedule::one_f_one_b, 4, 1, 64, 4},
        PipelineCase{PipelineSchedule::zb_h1, 4, 1, 8, 4},
        PipelineCase{PipelineSchedule::interleaved_one_f_one_b, 4, 2, 8, 4 * (1 + 3.0 / 8)},
        PipelineCase{PipelineSchedule::interleaved_one_f_one_b, 4, 2, 64, 4 * (1 + 3.0 / 8)},
        PipelineCase{PipelineSchedule::interleaved_one_f_one_b, 4, 3, 12, 4 * (1 + 3.0 / 12)}}) {
    const Prediction prediction = predict_pipeline(c);
    ASSERT_EQ(prediction.stages.size(), static_cast<size_t>(c.pp));
    EXPECT_DOUBLE_EQ(prediction.stages[0].inflight_microbatches, c.inflight_stage0)
        << name_of(c.schedule) << " p=" << c.pp << " v=" << c.vpp << " m=" << c.microbatches;
    // 1F1B: stage r holds p - r; GPipe: all m on every stage; ZB-H1 defers weight
    // gradients, so later stages hold more, at most p.
    if (c.schedule == PipelineSchedule::zb_h1) {
      for (const StagePrediction& stage : prediction.stages)
        EXPECT_LE(stage.inflight_microbatches, c.pp);
    } else if (c.vpp == 1) {
      for (int64_t r = 0; r < c.pp; ++r) {
        const double expected = c.schedule == PipelineSchedule::gpipe ? c.microbatches : c.pp - r;
        EXPECT_DOUBLE_EQ(prediction.stages[r].inflight_microbatches, expected)
            << name_of(c.schedule) << " stage " << r;
      }
    }
  }
}

TEST(PipelineFormulas, BubbleFractionsOfEverySchedule) {
  const double p = 4, m = 8;
  const double gpipe = predict_pipeline({PipelineSchedule::gpipe, 4, 1, 8, 0}).bubble_fraction;
  const double one_f_one_b =
      predict_pipeline({PipelineSchedule::one_f_one_b, 4, 1, 8, 0}).bubble_fraction;
  const double interleaved =
      predict_pipeline({PipelineSchedule::interleaved_one_f_one_b, 4, 2, 8, 0}).bubble_fraction;
  const double zero_bubble =
      predict_pipeline({PipelineSchedule::zb_h1, 4, 1, 8, 0}).bubble_fraction;
  // Near-uniform stages: within a few percent of the closed forms.
  EXPECT_NEAR(gpipe, (p - 1) / (m + p - 1), 0.02);
  EXPECT_NEAR(one_f_one_b, (p - 1) / (m + p - 1), 0.02);
  // Interleaving divides the idle time by v: (p-1)/v / (m + (p-1)/v).
  EXPECT_NEAR(interleaved, (p - 1) / 2 / (m + (p - 1) / 2), 0.02);
  EXPECT_LT(zero_bubble, one_f_one_b);
}

}  // namespace
}  // namespace strata
