// Writing a strata model as a Hugging Face model directory (`strata export`): config.json of
// the matching architecture, the weights as safetensors with {"format": "pt"} metadata (one
// file, or shards and model.safetensors.index.json), named and laid out by the same table
// loading reads (hf/hf_names.h), and the tokenizer files of the model it came from.
#pragma once
#include <cstdint>
#include <string>

#include "strata/model/gpt.h"

namespace strata {

struct HfExportOptions {
  // Largest shard in bytes; the weights are split over several files past it (a tensor is
  // never split). 0 = one file.
  int64_t shard_size = 0;
  // "float32", "bfloat16" or "float16"; empty = the torch_dtype of the model it came from
  // (model.init), else float32.
  std::string torch_dtype;
};

// Writes `model` (the whole model, on this process) into the new or empty directory `out`.
// `source_dir` is the Hugging Face directory the model was loaded or fine-tuned from (empty
// for a model strata initialized): its architecture is kept (a Mistral stays a Mistral), its
// other config.json keys are carried over, and its tokenizer files are copied. UserError with
// the reason when `out` is not empty or the model fits no Hugging Face architecture.
void export_hf_model(GPT& model, const std::string& out, const HfExportOptions& options,
                     const std::string& source_dir = "");

// "2GB" -> 2e9 bytes; also KB, MB, GB (powers of 1000), KiB, MiB, GiB and plain bytes, as
// transformers' max_shard_size. UserError naming `flag` for anything else.
int64_t parse_byte_size(const std::string& text, const std::string& flag);

// "fp32" / "bf16" / "fp16" (or the torch_dtype spellings) -> the torch_dtype spelling.
std::string parse_torch_dtype(const std::string& text, const std::string& flag);

}  // namespace strata
