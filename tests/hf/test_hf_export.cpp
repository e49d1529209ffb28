// `strata export`: a Hugging Face model loaded and exported again is the same tensors bit for
// bit (one file or shards, every dtype), with its tokenizer files; a model strata initialized
// exports as its architecture and reloads with the same logits; a model no architecture holds
// is refused.
#include <gtest/gtest.h>

#include <filesystem>
#include <functional>
#include <set>

#include "hf_test_models.h"
#include "strata/ckpt/checkpoint.h"
#include "strata/core/error.h"
#include "strata/hf/hf_export.h"
#include "strata/hf/hf_load.h"
#include "strata/infer/generate.h"

namespace strata {
namespace {

using testing::make_hf_model;
using testing::TempDir;

// Every weight the source stores (its mask buffers and tied-head copies aside) equals the
// export's, bit for bit and dtype for dtype, and the export stores nothing else.
void expect_same_weights(const std::string& source, const std::string& exported) {
  HfTensorFiles original(source), written(exported);
  const HfTensorMap map = hf_tensor_map_of(original, read_hf_config(source));
  std::set<std::string> weights;
  for (const HfPiece& piece : map.pieces) weights.insert(piece.hf_name);
  for (const std::string& name : original.names()) {
    if (!weights.count(name)) continue;
    ASSERT_TRUE(written.contains(name)) << name;
    const at::Tensor a = original.view(name), b = written.view(name);
    EXPECT_EQ(a.scalar_type(), b.scalar_type()) << name;
    EXPECT_TRUE(at::equal(a, b)) << name;
  }
  EXPECT_EQ(written.names().size(), weights.size());
}

struct Case {
  std::string arch, options;
  friend std::ostream& operator<<(std::ostream& out, const Case& c) {
    return out << c.arch << " " << c.options;
  }
};

class HfRoundTrip : public ::testing::TestWithParam<Case> {};

TEST_P(HfRoundTrip, LoadThenExportIsBitForBit) {
  TempDir source("strata-hf"), out("strata-hf-export");
  make_hf_model(GetParam().arch, source.path(), GetParam().options);
  testing::write_bytes(source.file("tokenizer.json"), "{\"version\": \"1.0\"}");
  auto model = load_model_from_checkpoint(source.path(), nullptr, nullptr, Precision::fp32);
  export_hf_model(*model, out.path() + "/model", {}, source.path());
  const std::string exported = out.path() + "/model";
  expect_same_weights(source.path(), exported);
  EXPECT_EQ(testing::read_bytes(exported + "/tokenizer.json"), "{\"version\": \"1.0\"}");
  EXPECT_EQ(read_hf_config(exported).architecture, read_hf_config(source.path()).architecture);
}

INSTANTIATE_TEST_SUITE_P(
    Architectures, HfRoundTrip,
    ::testing::Values(Case{"gpt2", "--variant mask-buffers"}, Case{"gpt2", ""},
                      Case{"llama", "--variant gqa --variant llama3-rope --dtype bf16"},
                      Case{"llama", "--variant untied --shards 3"},
                      Case{"llama", "--variant head-dim --variant gqa"},
                      Case{"llama", "--variant attention-bias --variant mlp-bias"},
                      Case{"qwen2", "--dtype f16"}, Case{"mistral", ""},
                      Case{"mixtral", "--dtype bf16"}),
    [](const ::testing::TestParamInfo<Case>& info) {
      std::string name = info.param.arch + "_" + info.param.options;
      for (char& ch : name) {
        if (!std::isalnum(static_cast<unsigned char>(ch))) ch = '_';
      }
      return name;
    });

// The binary's flags: shards of at most --shard-size, in --dtype, listed by the index; the
// export loads back as the same model.
TEST(HfExport, ShardsAndDtypeFromTheCommandLine) {
  TempDir source("strata-hf"), out("strata-hf-export");
  make_hf_model("llama", source.path(), "--variant gqa");
  const std::string exported = out.path() + "/model";
  std::string output;
  ASSERT_EQ(
      testing::run_command(std::string(STRATA_BINARY) + " export --checkpoint " + source.path() +
                               " --out " + exported + " --shard-size 40KB --dtype bf16",
                           &output),
      0)
      << output;
  const nlohmann::json index =
      nlohmann::json::parse(testing::read_bytes(exported + "/model.safetensors.index.json"));
  std::set<std::string> files;
  for (const auto& [name, file] : index.at("weight_map").items()) files.insert(file);
  EXPECT_GT(files.size(), 2u);
  for (const std::string& file : files) {
    EXPECT_LE(std::filesystem::file_size(exported + "/" + file), 40000u + 4096u) << file;
  }
  HfTensorFiles written(exported);
  EXPECT_EQ(written.view("model.embed_tokens.weight").scalar_type(), at::kBFloat16);
  EXPECT_EQ(nlohmann::json::parse(testing::read_bytes(exported + "/config.json"))["torch_dtype"],
            "bfloat16");
  const at::Tensor stored = HfTensorFiles(source.path()).view("model.embed_tokens.weight");
  EXPECT_TRUE(at::equal(written.view("model.embed_tokens.weight"), stored.to(at::kBFloat16)));
}

// A strata checkpoint of a model strata initialized: exported as Llama (or GPT-2, Mixtral),
// reloaded from the export, the same logits.
TEST(HfExport, AStrataCheckpointReloadsWithTheSameLogits) {
  struct Native {
    std::string name;
    std::function<void(ModelConfig&)> shape;
    HfArchitecture expected;
  };
  const std::vector<Native> natives = {
      {"llama",
       [](ModelConfig& m) {
         m.pos = PositionEncoding::rope;
         m.norm = Norm::rmsnorm;
         m.activation = Activation::swiglu;
         m.n_kv_heads = 2;
         m.tie_embeddings = false;
       },
       HfArchitecture::llama},
      {"mixtral",
       [](ModelConfig& m) {
         m.pos = PositionEncoding::rope;
         m.norm = Norm::rmsnorm;
         m.activation = Activation::swiglu;
         m.moe.num_experts = 4;
         m.moe.activation = Activation::swiglu;
       },
       HfArchitecture::mixtral},
  };
  for (const Native& native : natives) {
    TempDir root("strata-ckpt"), out("strata-hf-export");
    Config config;
    config.model.vocab_size = 64;
    config.model.d_model = 32;
    config.model.n_layers = 2;
    config.model.seq_len = 16;
    native.shape(config.model);
    GPT model(config.model, 7, at::kFloat);
    std::vector<ShardedTensor> tensors;
    for (auto& parameter : model.parameters()) {
      for (auto& slice :
           sharded_slices(parameter.name, parameter.value.detach(), parameter.spec, true)) {
        tensors.push_back(std::move(slice));
      }
    }
    SingleProcessGroup group;
    const std::string checkpoint =
        save_checkpoint(root.path(), 1, tensors, {{"config", to_toml(config)}}, group);
    Config loaded_config;
    auto loaded = load_model_from_checkpoint(checkpoint, &loaded_config, nullptr, Precision::fp32);
    export_hf_model(*loaded, out.path() + "/model", {}, loaded_config.model_init);
    EXPECT_EQ(read_hf_config(out.path() + "/model").architecture, native.expected) << native.name;
    auto reloaded =
        load_model_from_checkpoint(out.path() + "/model", nullptr, nullptr, Precision::fp32);
    at::NoGradGuard no_grad;
    const at::Tensor tokens = at::arange(10, at::kLong).view({1, -1}) * 5;
    EXPECT_EQ(testing::compare_tensors(reloaded->logits(tokens), model.logits(tokens), 1e-6, 1e-6),
              "")
        << native.name;
  }
}

TEST(HfExport, AModelNoArchitectureHoldsIsRefused) {
  TempDir out("strata-hf-export");
  ModelConfig config;
  config.pos = PositionEncoding::rope;  // with LayerNorm and GELU: neither GPT-2 nor Llama
  GPT model(config, 1, at::kFloat);
  try {
    export_hf_model(model, out.path() + "/model", {});
    ADD_FAILURE() << "exported";
  } catch (const UserError& error) {
    EXPECT_NE(std::string(error.what()).find("no Hugging Face architecture"), std::string::npos)
        << error.what();
  }
  EXPECT_FALSE(std::filesystem::exists(out.path() + "/model"));
}

TEST(HfExport, SizesAndDtypesParse) {
  EXPECT_EQ(parse_byte_size("2GB", "--shard-size"), 2000000000);
  EXPECT_EQ(parse_byte_size("1.5MiB", "--shard-size"), 1572864);
  EXPECT_EQ(parse_byte_size("4096", "--shard-size"), 4096);
  EXPECT_THROW(parse_byte_size("2XB", "--shard-size"), UserError);
  EXPECT_THROW(parse_byte_size("-1GB", "--shard-size"), UserError);
  EXPECT_EQ(parse_torch_dtype("bf16", "--dtype"), "bfloat16");
  EXPECT_THROW(parse_torch_dtype("int8", "--dtype"), UserError);
}

}  // namespace
}  // namespace strata
