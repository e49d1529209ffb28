// Each stored tensor is assembled from the parameter boxes its table rows name, the inverse of
// loading: the box is cut out of the parameter, its expert dim dropped, transposed back for
// Conv1D, and written at its rows.
#include "strata/hf/hf_export.h"

#include <ATen/core/grad_mode.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <map>

#include "strata/ckpt/file_io.h"
#include "strata/ckpt/safetensors.h"
#include "strata/core/error.h"
#include "strata/hf/hf_config.h"
#include "strata/hf/hf_names.h"

namespace strata {
namespace {

namespace fs = std::filesystem;

// What a tokenizer is made of in a Hugging Face directory, copied along when present.
const char* const kTokenizerFiles[] = {
    "tokenizer.json",
    "tokenizer_config.json",
    "vocab.json",
    "merges.txt",
    "tokenizer.model",
    "special_tokens_map.json",
    "generation_config.json",
};

at::ScalarType dtype_of(const std::string& torch_dtype) {
  if (torch_dtype == "bfloat16") return at::kBFloat16;
  if (torch_dtype == "float16") return at::kHalf;
  return at::kFloat;
}

nlohmann::json read_json(const std::string& path) {
  std::ifstream in(path);
  try {
    return nlohmann::json::parse(in);
  } catch (const nlohmann::json::exception& error) {
    throw UserError(str(path, " is not JSON (", error.what(), ")"));
  }
}

// The stored tensor `name` assembled from its pieces.
at::Tensor assemble(GPT& model, const std::vector<const HfPiece*>& pieces, at::ScalarType dtype) {
  at::Tensor stored = at::empty(pieces.front()->hf_shape, at::TensorOptions().dtype(dtype));
  for (const HfPiece* piece : pieces) {
    at::Tensor box = model.parameter(piece->parameter).value.detach();
    const std::vector<int64_t> shape = piece->box_shape();
    for (size_t d = 0; d < shape.size(); ++d) {
      box = box.narrow(static_cast<int64_t>(d), piece->parameter_offsets[d], shape[d]);
    }
    if (shape.size() == piece->hf_shape.size() + 1) box = box.squeeze(0);
    at::Tensor view = piece->transposed ? stored.t() : stored;
    view.narrow(0, piece->hf_begin, piece->rows).copy_(box);
  }
  return stored;
}

}  // namespace

int64_t parse_byte_size(const std::string& text, const std::string& flag) {
  static const std::pair<const char*, double> kUnits[] = {
      {"KiB", 1024.0}, {"MiB", 1048576.0}, {"GiB", 1073741824.0},
      {"KB", 1e3},     {"MB", 1e6},        {"GB", 1e9},
      {"B", 1.0},      {"", 1.0}};
  for (const auto& [unit, scale] : kUnits) {
    const size_t length = std::string(unit).size();
    if (text.size() <= length || text.compare(text.size() - length, length, unit) != 0) continue;
    const std::string number = text.substr(0, text.size() - length);
    size_t used = 0;
    double value = 0;
    try {
      value = std::stod(number, &used);
    } catch (const std::exception&) {
      used = 0;
    }
    if (used == number.size() && std::isfinite(value) && value > 0) {
      return static_cast<int64_t>(std::llround(value * scale));
    }
    break;
  }
  throw UserError(
      str(flag, " must be a positive size such as 2GB, 500MB or 1GiB, got '", text, "'"));
}

std::string parse_torch_dtype(const std::string& text, const std::string& flag) {
  if (text == "fp32" || text == "float32") return "float32";
  if (text == "bf16" || text == "bfloat16") return "bfloat16";
  if (text == "fp16" || text == "float16") return "float16";
  throw UserError(str(flag, " must be fp32, bf16 or fp16, got '", text, "'"));
}

void export_hf_model(GPT& model, const std::string& out, const HfExportOptions& options,
                     const std::string& source_dir) {
  STRATA_CHECK(model.stage().first && model.stage().last, "export needs the whole model");
  if (fs::exists(out) && !(fs::is_directory(out) && fs::is_empty(out))) {
    throw UserError(str("the export directory ", out, " must be new or empty"));
  }
  nlohmann::json base = nlohmann::json::object();
  HfArchitecture architecture;
  if (source_dir.empty()) {
    architecture = hf_architecture_for(model.config(), model.block());
  } else {
    base = read_json(source_dir + "/config.json");
    architecture = read_hf_config(source_dir).architecture;
  }
  const std::string torch_dtype = !options.torch_dtype.empty()
                                      ? options.torch_dtype
                                      : base.value("torch_dtype", std::string("float32"));
  const at::ScalarType dtype = dtype_of(parse_torch_dtype(torch_dtype, "torch_dtype"));
  const nlohmann::json config =
      hf_config_json(architecture, model.config(), model.block(), torch_dtype, base);
  // What is written must read back as this model.
  hf_model_from_json(config, "the exported config.json");

  // Stored tensors in table order, each with its pieces.
  const HfTensorMap map = hf_tensor_map(architecture, model.config(), model.block(),
                                        architecture == HfArchitecture::gpt2 ? "transformer." : "");
  std::vector<std::string> order;
  std::map<std::string, std::vector<const HfPiece*>> pieces;
  for (const HfPiece& piece : map.pieces) {
    if (!pieces.count(piece.hf_name)) order.push_back(piece.hf_name);
    pieces[piece.hf_name].push_back(&piece);
  }
  // Shards: consecutive tensors while they fit.
  const int64_t element = static_cast<int64_t>(at::elementSize(dtype));
  std::vector<std::vector<std::string>> shards(1);
  int64_t shard_bytes = 0, total_bytes = 0;
  for (const std::string& name : order) {
    const int64_t bytes = numel_of(pieces[name].front()->hf_shape) * element;
    if (options.shard_size > 0 && shard_bytes > 0 && shard_bytes + bytes > options.shard_size) {
      shards.emplace_back();
      shard_bytes = 0;
    }
    shards.back().push_back(name);
    shard_bytes += bytes;
    total_bytes += bytes;
  }

  fs::create_directories(out);
  at::NoGradGuard no_grad;
  nlohmann::json weight_map = nlohmann::json::object();
  for (size_t shard = 0; shard < shards.size(); ++shard) {
    char file_name[64];
    std::snprintf(file_name, sizeof file_name, "model-%05zu-of-%05zu.safetensors", shard + 1,
                  shards.size());
    const std::string file = shards.size() == 1 ? "model.safetensors" : file_name;
    std::vector<std::pair<std::string, at::Tensor>> tensors;
    for (const std::string& name : shards[shard]) {
      tensors.emplace_back(name, assemble(model, pieces[name], dtype));
      weight_map[name] = file;
    }
    write_safetensors(out + "/" + file, tensors, {{"format", "pt"}});
  }
  if (shards.size() > 1) {
    const nlohmann::json index = {{"metadata", {{"total_size", total_bytes}}},
                                  {"weight_map", weight_map}};
    write_file_synced(out + "/model.safetensors.index.json", index.dump(2) + "\n");
  }
  write_file_synced(out + "/config.json", config.dump(2) + "\n");
  if (!source_dir.empty()) {
    for (const char* name : kTokenizerFiles) {
      const std::string from = source_dir + "/" + name;
      if (fs::exists(from)) fs::copy_file(from, out + "/" + name);
    }
  }
}

}  // namespace strata
