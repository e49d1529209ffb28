// Hugging Face model directories loaded into strata on one rank: per architecture and
// variant, logits equal to the independent reference (tests/support/hf_models.py) within 1e-4
// in fp32; refusals name the key; and the mutations a loader is prone to (a forgotten Conv1D
// transpose, q/k rows permuted for another RoPE pairing, k and v from the wrong heads) make
// the comparison fail.
#include <gtest/gtest.h>

#include <cstring>
#include <fstream>
#include <iterator>

#include "hf_test_models.h"

#include "strata/core/error.h"
#include "strata/hf/hf_config.h"
#include "strata/hf/hf_files.h"
#include "strata/hf/hf_load.h"
#include "strata/infer/generate.h"

namespace strata {
namespace {

using testing::compare_to_reference;
using testing::hf_reference_logits;
using testing::hf_test_ids;
using testing::make_hf_model;
using testing::TempDir;

at::Tensor strata_logits(GPT& model, const std::vector<int64_t>& ids) {
  at::NoGradGuard no_grad;
  return model.logits(at::tensor(ids, at::kLong).view({1, -1})).select(0, 0);
}

struct Case {
  std::string arch, options;
  friend std::ostream& operator<<(std::ostream& out, const Case& c) {
    return out << c.arch << " " << c.options;
  }
};

class HfLogits : public ::testing::TestWithParam<Case> {};

TEST_P(HfLogits, MatchTheReference) {
  const Case& c = GetParam();
  TempDir dir("strata-hf");
  make_hf_model(c.arch, dir.path(), c.options);
  auto model = load_model_from_checkpoint(dir.path(), nullptr, nullptr, Precision::fp32);
  const auto ids = hf_test_ids();
  EXPECT_EQ(compare_to_reference(strata_logits(*model, ids), hf_reference_logits(dir.path(), ids)),
            "");
}

INSTANTIATE_TEST_SUITE_P(
    Architectures, HfLogits,
    ::testing::Values(Case{"gpt2", ""}, Case{"gpt2", "--variant no-prefix --variant no-lm-head"},
                      Case{"gpt2", "--variant mask-buffers"}, Case{"llama", ""},
                      Case{"llama", "--variant inv-freq-buffers"}, Case{"llama", "--variant gqa"},
                      Case{"llama", "--variant llama3-rope"},
                      Case{"llama", "--variant untied --variant gqa"},
                      Case{"llama", "--variant attention-bias --variant mlp-bias --variant gqa"},
                      Case{"qwen2", ""}, Case{"qwen2", "--variant tied"}, Case{"mistral", ""},
                      Case{"mixtral", ""}, Case{"llama", "--dtype bf16 --shards 3 --variant gqa"},
                      Case{"qwen2", "--dtype f16 --shards 2"},
                      // heads wider than hidden_size / num_attention_heads (q is 128 x 64)
                      Case{"llama", "--variant head-dim --variant gqa"},
                      Case{"mistral", "--variant head-dim"}),
    [](const ::testing::TestParamInfo<Case>& info) {
      std::string name = info.param.arch + "_" + info.param.options;
      for (char& ch : name) {
        if (!std::isalnum(static_cast<unsigned char>(ch))) ch = '_';
      }
      return name;
    });

// A config.json strata cannot run is refused before any weight is read, naming the key.
TEST(HfRefusals, NameTheKey) {
  const std::vector<std::pair<Case, std::string>> refusals = {
      {{"llama", "--variant rope-yarn"}, "rope_scaling"},
      {{"mistral", "--variant sliding-window"}, "sliding_window"},
      {{"mixtral", "--variant sliding-window"}, "sliding_window"},
      {{"qwen2", "--variant sliding-window"}, "use_sliding_window"},
      {{"llama", "--variant unknown-arch"}, "FooForCausalLM"},
  };
  for (const auto& [c, key] : refusals) {
    TempDir dir("strata-hf");
    make_hf_model(c.arch, dir.path(), c.options);
    try {
      load_model_from_checkpoint(dir.path(), nullptr, nullptr, Precision::fp32);
      ADD_FAILURE() << c.arch << " " << c.options << " loaded";
    } catch (const UserError& error) {
      EXPECT_NE(std::string(error.what()).find(key), std::string::npos)
          << c.options << ": " << error.what();
    }
  }
}

// generation_config.json's eos_token_id (else config.json's): one id, a list, absent, or wrong
// (named).
TEST(HfGenerationConfig, EosTokenIds) {
  TempDir dir("strata-hf");
  EXPECT_TRUE(hf_eos_token_ids(dir.path()).empty()) << "no file";
  std::ofstream(dir.file("config.json")) << R"({"eos_token_id": 5})";
  EXPECT_EQ(hf_eos_token_ids(dir.path()), (std::vector<int64_t>{5})) << "config.json's";
  const std::string path = dir.file("generation_config.json");
  auto write = [&](const std::string& text) { std::ofstream(path) << text; };
  write(R"({"bos_token_id": 1, "eos_token_id": 2})");
  EXPECT_EQ(hf_eos_token_ids(dir.path()), (std::vector<int64_t>{2}));
  write(R"({"eos_token_id": [128001, 128008, 128009]})");
  EXPECT_EQ(hf_eos_token_ids(dir.path()), (std::vector<int64_t>{128001, 128008, 128009}));
  write(R"({"do_sample": true})");
  EXPECT_TRUE(hf_eos_token_ids(dir.path()).empty()) << "generation_config.json decides";
  for (const char* bad : {R"({"eos_token_id": "2"})", R"({"eos_token_id": [-1]})", "{"}) {
    write(bad);
    try {
      hf_eos_token_ids(dir.path());
      ADD_FAILURE() << bad << " was accepted";
    } catch (const UserError& error) {
      EXPECT_NE(std::string(error.what()).find("generation_config.json"), std::string::npos)
          << error.what();
    }
  }
}

// A stored tensor the architecture has no place for is refused rather than dropped.
TEST(HfRefusals, AnUnknownTensor) {
  TempDir dir("strata-hf");
  make_hf_model("llama", dir.path());
  auto tensors = read_safetensors(dir.file("model.safetensors"));
  tensors["model.layers.0.self_attn.o_proj.bias"] = at::zeros({64});
  write_safetensors(dir.file("model.safetensors"), {tensors.begin(), tensors.end()});
  try {
    load_model_from_checkpoint(dir.path(), nullptr, nullptr, Precision::fp32);
    ADD_FAILURE() << "loaded";
  } catch (const UserError& error) {
    EXPECT_NE(std::string(error.what()).find("model.layers.0.self_attn.o_proj.bias"),
              std::string::npos)
        << error.what();
  }
}

// A prompt from another model's tokenizer is refused before the embedding is indexed.
TEST(HfRefusals, APromptOutsideTheVocabulary) {
  TempDir dir("strata-hf");
  make_hf_model("qwen2", dir.path());
  auto model = load_model_from_checkpoint(dir.path(), nullptr, nullptr, Precision::fp32);
  const int64_t vocab = model->config().vocab_size;
  try {
    generate(*model, {1, vocab}, SamplingOptions{});
    ADD_FAILURE() << "generated";
  } catch (const UserError& error) {
    EXPECT_NE(std::string(error.what()).find("vocabulary [0, " + std::to_string(vocab) + ")"),
              std::string::npos)
        << error.what();
  }
}

// The format does not promise aligned tensors: a file whose data section starts 2 bytes off
// (its header padded to a length no writer we know uses) holds every float32 unaligned. Each
// is then read through a copy (HfTensorFiles::is_mapped is false), copied at once rather than
// with the mapped ones, and the model loads the same values.
TEST(HfFiles, UnalignedTensorsLoadThroughCopies) {
  TempDir aligned("strata-hf"), unaligned("strata-hf");
  make_hf_model("llama", aligned.path());
  make_hf_model("llama", unaligned.path());
  {
    std::ifstream in(aligned.file("model.safetensors"), std::ios::binary);
    std::string bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    uint64_t header_length = 0;
    std::memcpy(&header_length, bytes.data(), sizeof header_length);
    const uint64_t padded = header_length + 2;
    std::string out(reinterpret_cast<const char*>(&padded), sizeof padded);
    out += bytes.substr(8, header_length) + "  " + bytes.substr(8 + header_length);
    std::ofstream(unaligned.file("model.safetensors"), std::ios::binary) << out;
  }
  const std::string name = "model.layers.0.self_attn.q_proj.weight";
  const HfTensorFiles in_place(aligned.path()), copied(unaligned.path());
  EXPECT_TRUE(in_place.is_mapped(in_place.view(name)));
  ASSERT_EQ(copied.view(name).scalar_type(), at::kFloat);
  EXPECT_FALSE(copied.is_mapped(copied.view(name)));
  auto expected = load_model_from_checkpoint(aligned.path(), nullptr, nullptr, Precision::fp32);
  auto got = load_model_from_checkpoint(unaligned.path(), nullptr, nullptr, Precision::fp32);
  for (size_t i = 0; i < expected->parameters().size(); ++i) {
    EXPECT_TRUE(got->parameters()[i].value.equal(expected->parameters()[i].value))
        << expected->parameters()[i].name;
  }
}

// The whole model loaded through a (mutated) table, its logits against the reference.
std::string logits_through(const std::string& dir, const HfTensorMap& map) {
  const HfModel hf = read_hf_config(dir);
  GPT model(hf.model, hf.block, 1, at::kFloat);
  HfTensorFiles files(dir);
  load_hf_parameters(model, files, map);
  const auto ids = hf_test_ids();
  return compare_to_reference(strata_logits(model, ids), hf_reference_logits(dir, ids));
}

HfTensorMap table_of(const std::string& dir) {
  return hf_tensor_map_of(HfTensorFiles(dir), read_hf_config(dir));
}

TEST(HfMutations, ForgettingTheConv1DTransposeFails) {
  TempDir dir("strata-hf");
  make_hf_model("gpt2", dir.path());
  HfTensorMap map = table_of(dir.path());
  ASSERT_EQ(logits_through(dir.path(), map), "");
  int mutated = 0;
  for (HfPiece& piece : map.pieces) {
    // The square Conv1D weights load either way round; only the transpose makes them right.
    if (piece.transposed && piece.hf_shape[0] == piece.hf_shape[1]) {
      piece.transposed = false;
      ++mutated;
    }
  }
  ASSERT_GT(mutated, 0);
  EXPECT_NE(logits_through(dir.path(), map), "");
}

TEST(HfMutations, SwappingKeysAndValuesFails) {
  TempDir dir("strata-hf");
  make_hf_model("llama", dir.path(), "--variant gqa");
  HfTensorMap map = table_of(dir.path());
  const HfModel hf = read_hf_config(dir.path());
  const int64_t kv_rows = hf.model.kv_heads() * hf.model.head_dim();
  for (HfPiece& piece : map.pieces) {
    if (piece.parameter.find("attn.kv.weight") == std::string::npos) continue;
    piece.parameter_offsets[0] = piece.parameter_offsets[0] == 0 ? kv_rows : 0;
  }
  EXPECT_NE(logits_through(dir.path(), map), "");
}

// A table that splits k and v by the query head count (as if there were no grouped-query
// heads) does not fit the stored tensors: the shapes are refused before anything is read.
TEST(HfMutations, IgnoringTheKvHeadCountIsRefused) {
  TempDir dir("strata-hf");
  make_hf_model("llama", dir.path(), "--variant gqa");
  HfModel hf = read_hf_config(dir.path());
  ASSERT_LT(hf.model.kv_heads(), hf.model.n_heads);
  hf.model.n_kv_heads = 0;
  EXPECT_THROW(hf_tensor_map_of(HfTensorFiles(dir.path()), hf), UserError);
}

// HF's q and k rows are laid out for rotate-half RoPE, strata's own pairing: loading them as
// they are matches the reference (above), and permuting them as a loader for interleaved
// pairs would (Meta's original layout) breaks it.
TEST(HfMutations, PermutingQueryAndKeyRowsFails) {
  TempDir dir("strata-hf");
  make_hf_model("llama", dir.path(), "--variant gqa");
  const HfModel hf = read_hf_config(dir.path());
  auto model = load_model_from_checkpoint(dir.path(), nullptr, nullptr, Precision::fp32);
  const int64_t D = hf.model.head_dim(), C = hf.model.d_model;
  at::NoGradGuard no_grad;
  for (Parameter& parameter : model->parameters()) {
    if (parameter.name.find("attn.q.weight") == std::string::npos &&
        parameter.name.find("attn.kv.weight") == std::string::npos) {
      continue;
    }
    // (heads, 2, D/2, C) -> (heads, D/2, 2, C): rotate-half rows to interleaved ones.
    at::Tensor rows = parameter.value.detach();
    rows.copy_(rows.view({-1, 2, D / 2, C}).transpose(1, 2).reshape(rows.sizes()));
  }
  const auto ids = hf_test_ids();
  EXPECT_NE(compare_to_reference(strata_logits(*model, ids), hf_reference_logits(dir.path(), ids)),
            "");
}

}  // namespace
}  // namespace strata
