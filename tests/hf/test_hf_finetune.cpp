// The fine-tuning walk-through of docs/models.md through the binary: a Hugging
// Face model in
// ([model] init names it, the TOML names no shapes), trained, exported as the
// same architecture (Qwen2 keeps its q/k/v biases), and the export generates
// what the checkpoint generates. And model.init is validated before anything
// starts.
#include <gtest/gtest.h>

#include <fstream>
#include <nlohmann/json.hpp>

#include "hf_test_models.h"
#include "strata/core/config.h"
#include "strata/core/error.h"
#include "strata/hf/hf_config.h"
#include "strata/hf/hf_files.h"

namespace strata {
namespace {

using testing::TempDir;

const std::string kStrata = STRATA_BINARY;

TEST(HfFineTune, TrainExportGenerate) {
  TempDir dir("strata-hf-finetune");
  const std::string model = dir.file("qwen2");
  testing::make_hf_model("qwen2", model, "--dtype bf16");
  std::ofstream(dir.file("finetune.toml")) << "[model]\ninit = \"" << model << R"("
seq_len = 32
[train]
steps = 3
global_batch = 4
micro_batch = 2
warmup_steps = 1
lr = 1e-2
[data]
source = "synthetic"
[log]
progress = "none"
dir = ")" << dir.file("log") << R"("
[checkpoint]
dir = ")" << dir.file("ckpt") << "\"\n";
  std::string output;
  ASSERT_EQ(testing::run_command(kStrata + " config " + dir.file("finetune.toml"), &output), 0)
      << output;
  const HfModel hf = read_hf_config(model);
  EXPECT_NE(output.find("d_model = " + std::to_string(hf.model.d_model)), std::string::npos)
      << output;
  ASSERT_EQ(testing::run_command(kStrata + " train " + dir.file("finetune.toml"), &output), 0)
      << output;
  const std::string checkpoint = dir.file("ckpt/step_00000003");
  const std::string exported = dir.file("export");
  ASSERT_EQ(testing::run_command(
                kStrata + " export --checkpoint " + checkpoint + " --out " + exported, &output),
            0)
      << output;
  const HfModel written = read_hf_config(exported);
  EXPECT_EQ(written.architecture, HfArchitecture::qwen2);
  EXPECT_TRUE(written.block.biases.q && written.block.biases.k && written.block.biases.v);
  // bf16 like the model it came from, and trained: not the original weights.
  const at::Tensor before = HfTensorFiles(model).view("model.layers.0.self_attn.q_proj.weight");
  const at::Tensor after = HfTensorFiles(exported).view("model.layers.0.self_attn.q_proj.weight");
  EXPECT_EQ(after.scalar_type(), at::kBFloat16);
  EXPECT_FALSE(at::equal(before, after));

  // The exported directory holds no tokenizer files (the model came without them): prompts
  // are token ids, and the ids generated are compared.
  std::string from_checkpoint, from_export;
  const std::string sample =
      " --prompt-ids 48 --max-new-tokens 12 --temperature 0 --precision bf16 --json --ignore-eos";
  ASSERT_EQ(testing::run_command(kStrata + " generate --checkpoint " + checkpoint + sample,
                                 &from_checkpoint),
            0)
      << from_checkpoint;
  ASSERT_EQ(
      testing::run_command(kStrata + " generate --checkpoint " + exported + sample, &from_export),
      0)
      << from_export;
  EXPECT_EQ(nlohmann::json::parse(from_export)["generated_ids"],
            nlohmann::json::parse(from_checkpoint)["generated_ids"]);
  EXPECT_EQ(nlohmann::json::parse(from_export)["generated_ids"].size(), 12u);
}

TEST(HfFineTune, ModelInitIsValidated) {
  TempDir dir("strata-hf-finetune");
  Config config;
  config.model_init = dir.file("missing");
  try {
    validate_config(config, 1);
    ADD_FAILURE() << "validated";
  } catch (const UserError& error) {
    EXPECT_NE(std::string(error.what()).find("model.init"), std::string::npos) << error.what();
    EXPECT_NE(std::string(error.what()).find("no such directory"), std::string::npos)
        << error.what();
  }
  config.model_init = dir.path();
  try {
    validate_config(config, 1);
    ADD_FAILURE() << "validated";
  } catch (const UserError& error) {
    EXPECT_NE(std::string(error.what()).find("no config.json"), std::string::npos) << error.what();
  }
  EXPECT_THROW(with_hf_model(config), UserError);
}

}  // namespace
}  // namespace strata
