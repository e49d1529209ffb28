// Small random Hugging Face models for the tests, written by tests/support/hf_models.py (run
// by Debian's python3 with python3-torch), and that script's independent fp32 reference of
// their logits.
#pragma once
#include <ATen/ATen.h>
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "strata/ckpt/safetensors.h"
#include "test_support.h"

namespace strata::testing {

// Writes a model of `arch` into `dir`; extra: "--variant gqa --dtype bf16 ...".
inline void make_hf_model(const std::string& arch, const std::string& dir,
                          const std::string& extra = "") {
  const std::string command = std::string(STRATA_TORCH_PYTHON) + " " + STRATA_HF_MODELS_SCRIPT +
                              " make --arch " + arch + " --out " + dir + " " + extra;
  std::string output;
  ASSERT_EQ(run_command(command, &output), 0) << command << "\n" << output;
}

// The reference logits (T, V) float32 of the model in `dir` for `ids`.
inline at::Tensor hf_reference_logits(const std::string& dir, const std::vector<int64_t>& ids) {
  TempDir out("strata-hf-logits");
  std::string list;
  for (int64_t id : ids) list += (list.empty() ? "" : ",") + std::to_string(id);
  const std::string command = std::string(STRATA_TORCH_PYTHON) + " " + STRATA_HF_MODELS_SCRIPT +
                              " logits --model " + dir + " --ids " + list + " --out " +
                              out.file("logits.safetensors");
  std::string output;
  EXPECT_EQ(run_command(command, &output), 0) << command << "\n" << output;
  return read_safetensors(out.file("logits.safetensors")).at("logits");
}

// The test prompt: token ids spread over a small vocabulary.
inline std::vector<int64_t> hf_test_ids() { return {3, 17, 42, 5, 77, 8, 61, 29, 11, 90, 1, 64}; }

// "" when `actual` is within 1e-4 of `expected`, relative to expected's largest magnitude.
inline std::string compare_to_reference(const at::Tensor& actual, const at::Tensor& expected) {
  const double scale = expected.abs().max().item<double>();
  return compare_tensors(actual.to(at::kFloat), expected, 1e-4, 1e-4 * scale);
}

}  // namespace strata::testing
