// A Hugging Face model directory's config.json as strata sees it: which architecture it names,
// and the ModelConfig (sizes) and BlockSpec (what a block is made of) that run the same model.
// Every key that would make the model compute something strata does not (sliding-window
// attention, another rope scaling, an unknown architecture) is refused with a UserError that
// names the key, never silently dropped (docs/models.md).
#pragma once
#include <nlohmann/json.hpp>
#include <string>

#include "strata/core/config.h"
#include "strata/model/block_spec.h"

namespace strata {

// The families strata reads and writes, by their transformers class names.
enum class HfArchitecture {
  gpt2,     // GPT2LMHeadModel
  llama,    // LlamaForCausalLM (Llama 1, 2, 3, 3.1)
  qwen2,    // Qwen2ForCausalLM
  mistral,  // MistralForCausalLM
  mixtral,  // MixtralForCausalLM
};
const char* hf_architecture_class(HfArchitecture architecture);  // "LlamaForCausalLM", ...
const char* hf_model_type(HfArchitecture architecture);          // "llama", ...

struct HfModel {
  HfArchitecture architecture = HfArchitecture::llama;
  // The sizes; seq_len is the longest context the model was trained for
  // (max_position_embeddings, GPT-2's n_positions).
  ModelConfig model;
  BlockSpec block;
};

// True when `dir` holds a config.json and no strata state.json: a Hugging Face model.
bool is_hf_directory(const std::string& dir);

// The ids generation_config.json names as eos_token_id (one id or a list; Llama 3 Instruct
// ends a turn with either of two), or config.json when there is no generation_config.json (as
// Hugging Face's GenerationConfig reads them); empty when the key is absent. UserError naming
// the file for anything else.
std::vector<int64_t> hf_eos_token_ids(const std::string& dir);

// Reads dir/config.json. UserError naming the file and key for a missing file, a missing or
// ill-typed key, an architecture strata does not run, or an option it cannot express.
HfModel read_hf_config(const std::string& dir);
// The same from parsed JSON; `origin` names it in messages.
HfModel hf_model_from_json(const nlohmann::json& config, const std::string& origin);

// The config.json of `model` and `block` as `architecture` (the inverse of hf_model_from_json):
// the keys of `base` (the config.json the model came from, or {}) are kept and every key
// strata knows is written. `torch_dtype` is "float32", "bfloat16" or "float16". UserError
// with the reason when the model has something the architecture cannot hold.
nlohmann::json hf_config_json(HfArchitecture architecture, const ModelConfig& model,
                              const BlockSpec& block, const std::string& torch_dtype,
                              nlohmann::json base = nlohmann::json::object());

// The architecture a strata model is written as: mixtral with experts, gpt2 for LayerNorm,
// learned positions and GELU, qwen2 for q/k/v biases, else llama. UserError with the reason
// when no architecture holds it (a mix of the families' conventions).
HfArchitecture hf_architecture_for(const ModelConfig& model, const BlockSpec& block);

// The block a run's [model] table builds: block_spec_of(config.model), or with model.init
// the block of that Hugging Face model (whose sizes must be the table's: with_hf_model).
BlockSpec run_block_spec(const Config& config);

// `config` with the [model] table of the Hugging Face model model.init names (no change when
// it is empty): the sizes, norm, positions, activation, tie and experts come from its
// config.json. model.seq_len stays the run's (rotary positions; at most the model's context)
// or becomes n_positions (learned positions, whose table has that many rows).
Config with_hf_model(Config config);

}  // namespace strata
