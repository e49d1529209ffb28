// config.json <-> (ModelConfig, BlockSpec). Key names and defaults are those of transformers'
// configuration classes (GPT2Config, LlamaConfig, Qwen2Config, MistralConfig, MixtralConfig):
// a key a file leaves out means that class's default.
#include "strata/hf/hf_config.h"

#include <filesystem>
#include <fstream>

#include "strata/core/error.h"

namespace strata {
namespace {

struct ArchitectureName {
  HfArchitecture architecture;
  const char* class_name;
  const char* model_type;
};
constexpr ArchitectureName kArchitectures[] = {
    {HfArchitecture::gpt2, "GPT2LMHeadModel", "gpt2"},
    {HfArchitecture::llama, "LlamaForCausalLM", "llama"},
    {HfArchitecture::qwen2, "Qwen2ForCausalLM", "qwen2"},
    {HfArchitecture::mistral, "MistralForCausalLM", "mistral"},
    {HfArchitecture::mixtral, "MixtralForCausalLM", "mixtral"},
};

std::string supported_classes() {
  std::string out;
  for (const auto& name : kArchitectures)
    out += (out.empty() ? "" : ", ") + std::string(name.class_name);
  return out;
}

// Reads the keys of one config.json, naming the file and key in every error.
class ConfigReader {
 public:
  ConfigReader(const nlohmann::json& config, std::string origin)
      : config_(config), origin_(std::move(origin)) {}

  template <typename T>
  T required(const std::string& key) const {
    if (!config_.contains(key) || config_.at(key).is_null()) {
      throw UserError(str(origin_, ": the key \"", key, "\" is missing"));
    }
    return get<T>(key);
  }
  template <typename T>
  T optional(const std::string& key, T fallback) const {
    if (!config_.contains(key) || config_.at(key).is_null()) return fallback;
    return get<T>(key);
  }
  bool present(const std::string& key) const {
    return config_.contains(key) && !config_.at(key).is_null();
  }
  const nlohmann::json& at(const std::string& key) const { return config_.at(key); }
  [[noreturn]] void refuse(const std::string& key, const std::string& why) const {
    throw UserError(str(origin_, ": \"", key, "\" = ", config_.value(key, nlohmann::json()).dump(),
                        " is not supported: ", why));
  }
  const std::string& origin() const { return origin_; }

 private:
  template <typename T>
  T get(const std::string& key) const {
    try {
      return config_.at(key).get<T>();
    } catch (const nlohmann::json::exception&) {
      throw UserError(str(origin_, ": the key \"", key, "\" has the wrong type (",
                          config_.at(key).dump(), ")"));
    }
  }

  const nlohmann::json& config_;
  std::string origin_;
};

HfArchitecture architecture_of(const ConfigReader& reader) {
  std::string named;
  if (reader.present("architectures")) {
    auto classes = reader.required<std::vector<std::string>>("architectures");
    if (classes.size() != 1) {
      reader.refuse("architectures", "a model directory names exactly one architecture");
    }
    named = classes[0];
    for (const auto& name : kArchitectures) {
      if (named == name.class_name) return name.architecture;
    }
  } else if (reader.present("model_type")) {
    named = reader.required<std::string>("model_type");
    for (const auto& name : kArchitectures) {
      if (named == name.model_type) return name.architecture;
    }
  } else {
    throw UserError(str(reader.origin(), ": neither \"architectures\" nor \"model_type\" names ",
                        "the model's architecture"));
  }
  throw UserError(str(reader.origin(), ": the architecture ", named,
                      " is not one strata runs (supported: ", supported_classes(), ")"));
}

HfModel gpt2_model(const ConfigReader& reader) {
  HfModel hf;
  ModelConfig& model = hf.model;
  model.vocab_size = reader.required<int64_t>("vocab_size");
  model.d_model = reader.required<int64_t>("n_embd");
  model.n_layers = reader.required<int64_t>("n_layer");
  model.n_heads = reader.required<int64_t>("n_head");
  model.d_ff = reader.optional<int64_t>("n_inner", 4 * model.d_model);
  model.seq_len = reader.required<int64_t>("n_positions");
  model.tie_embeddings = reader.optional<bool>("tie_word_embeddings", true);
  const std::string activation = reader.optional<std::string>("activation_function", "gelu_new");
  if (activation != "gelu_new" && activation != "gelu_pytorch_tanh") {
    reader.refuse("activation_function",
                  "strata's GELU is the tanh approximation (gelu_new, gelu_pytorch_tanh)");
  }
  if (!reader.optional<bool>("scale_attn_weights", true)) {
    reader.refuse("scale_attn_weights", "strata scales attention scores by 1 / sqrt(head_dim)");
  }
  if (reader.optional<bool>("scale_attn_by_inverse_layer_idx", false)) {
    reader.refuse("scale_attn_by_inverse_layer_idx",
                  "strata scales attention scores by 1 / sqrt(head_dim) in every layer");
  }
  BlockSpec& block = hf.block;
  block.norm = Norm::layernorm;
  block.norm_eps = reader.optional<double>("layer_norm_epsilon", 1e-5);
  block.position = PositionEncoding::learned;
  block.activation = Activation::gelu;
  block.biases = LinearBiases{true, true, true, true, true, true};
  return hf;
}

RopeScaling rope_scaling_of(const ConfigReader& reader) {
  RopeScaling scaling;
  if (!reader.present("rope_scaling")) return scaling;
  const nlohmann::json& json = reader.at("rope_scaling");
  ConfigReader scaling_reader(json, reader.origin() + " rope_scaling");
  const std::string type = scaling_reader.present("rope_type")
                               ? scaling_reader.required<std::string>("rope_type")
                               : scaling_reader.optional<std::string>("type", "default");
  if (type == "default") return scaling;
  if (type != "llama3") {
    reader.refuse("rope_scaling", "the one rope scaling strata computes is rope_type \"llama3\"");
  }
  scaling.type = RopeScalingType::llama3;
  scaling.factor = scaling_reader.required<double>("factor");
  scaling.low_freq_factor = scaling_reader.required<double>("low_freq_factor");
  scaling.high_freq_factor = scaling_reader.required<double>("high_freq_factor");
  scaling.original_max_position_embeddings =
      scaling_reader.required<int64_t>("original_max_position_embeddings");
  return scaling;
}

// Llama and the families built on it: RMSNorm, rotary positions, SwiGLU, grouped-query heads.
HfModel llama_model(const ConfigReader& reader, HfArchitecture architecture) {
  HfModel hf;
  hf.architecture = architecture;
  ModelConfig& model = hf.model;
  model.vocab_size = reader.required<int64_t>("vocab_size");
  model.d_model = reader.required<int64_t>("hidden_size");
  model.n_layers = reader.required<int64_t>("num_hidden_layers");
  model.n_heads = reader.required<int64_t>("num_attention_heads");
  model.n_kv_heads = reader.optional<int64_t>("num_key_value_heads", model.n_heads);
  model.d_ff = reader.required<int64_t>("intermediate_size");
  model.seq_len = reader.required<int64_t>("max_position_embeddings");
  model.tie_embeddings = reader.optional<bool>("tie_word_embeddings", false);
  // Explicit when it is not hidden_size / num_attention_heads (Mistral NeMo's 128 at 5120 / 32).
  const int64_t head_dim = reader.optional<int64_t>("head_dim", 0);
  if (head_dim < 0) reader.refuse("head_dim", "a head dimension is positive");
  if (head_dim > 0 && head_dim * model.n_heads != model.d_model) model.head_dim_key = head_dim;
  if (reader.optional<std::string>("hidden_act", "silu") != "silu") {
    reader.refuse("hidden_act", "the gated MLP strata computes is SwiGLU (silu)");
  }
  // Qwen2 reads sliding_window only with use_sliding_window; Mistral and Mixtral whenever it
  // is set. A window at least the whole context changes nothing.
  const bool windowed = architecture == HfArchitecture::qwen2
                            ? reader.optional<bool>("use_sliding_window", false)
                            : reader.present("sliding_window");
  if (windowed && reader.optional<int64_t>("sliding_window", 0) < model.seq_len) {
    reader.refuse(architecture == HfArchitecture::qwen2 ? "use_sliding_window" : "sliding_window",
                  "strata's attention sees the whole context (no sliding window)");
  }
  BlockSpec& block = hf.block;
  block.norm = Norm::rmsnorm;
  block.norm_eps = reader.optional<double>("rms_norm_eps", 1e-6);
  block.position = PositionEncoding::rope;
  block.rope_theta = reader.optional<double>(
      "rope_theta", architecture == HfArchitecture::mixtral ? 1e6 : 10000.0);
  block.rope_scaling = rope_scaling_of(reader);
  block.activation = Activation::swiglu;
  LinearBiases& biases = block.biases;
  if (architecture == HfArchitecture::qwen2) biases.q = biases.k = biases.v = true;
  if (architecture == HfArchitecture::llama) {
    biases.q = biases.k = biases.v = biases.attention_out =
        reader.optional<bool>("attention_bias", false);
    biases.mlp_in = biases.mlp_out = reader.optional<bool>("mlp_bias", false);
  }
  if (architecture == HfArchitecture::mixtral) {
    MoeConfig& moe = block.moe;
    moe.num_experts = reader.required<int64_t>("num_local_experts");
    moe.top_k = reader.required<int64_t>("num_experts_per_tok");
    if (moe.top_k != 2) {
      reader.refuse("num_experts_per_tok",
                    "strata routes to 2 experts with Mixtral's renormalised weights (with 1 it "
                    "weights by the probability, as Switch does)");
    }
    moe.every = 1;
    moe.capacity_factor = 0.0;  // Mixtral drops no tokens
    moe.aux_loss_coef = reader.optional<double>("router_aux_loss_coef", 0.001);
    moe.z_loss_coef = 0.0;
    moe.activation = Activation::swiglu;
    if (reader.optional<double>("router_jitter_noise", 0.0) != 0.0) {
      reader.refuse("router_jitter_noise", "strata's router adds no noise");
    }
  }
  return hf;
}

}  // namespace

const char* hf_architecture_class(HfArchitecture architecture) {
  for (const auto& name : kArchitectures) {
    if (name.architecture == architecture) return name.class_name;
  }
  STRATA_CHECK(false, "unknown architecture");
}

const char* hf_model_type(HfArchitecture architecture) {
  for (const auto& name : kArchitectures) {
    if (name.architecture == architecture) return name.model_type;
  }
  STRATA_CHECK(false, "unknown architecture");
}

bool is_hf_directory(const std::string& dir) {
  return std::filesystem::is_regular_file(dir + "/config.json") &&
         !std::filesystem::exists(dir + "/state.json");
}

HfModel hf_model_from_json(const nlohmann::json& config, const std::string& origin) {
  if (!config.is_object()) throw UserError(str(origin, ": not a JSON object"));
  ConfigReader reader(config, origin);
  const HfArchitecture architecture = architecture_of(reader);
  HfModel hf =
      architecture == HfArchitecture::gpt2 ? gpt2_model(reader) : llama_model(reader, architecture);
  hf.architecture = architecture;
  hf.model = config_with_block(hf.model, hf.block);
  for (const auto& [key, value] :
       {std::pair<const char*, int64_t>{"vocab size", hf.model.vocab_size},
        {"hidden size", hf.model.d_model},
        {"layer count", hf.model.n_layers},
        {"head count", hf.model.n_heads},
        {"MLP width", hf.model.d_ff},
        {"context length", hf.model.seq_len}}) {
    if (value < 1) throw UserError(str(origin, ": the ", key, " (", value, ") must be positive"));
  }
  if (hf.model.head_dim_key == 0 && hf.model.d_model % hf.model.n_heads != 0) {
    throw UserError(str(origin, ": the hidden size (", hf.model.d_model,
                        ") is not divisible by the head count (", hf.model.n_heads, ")"));
  }
  if (hf.model.kv_heads() < 1 || hf.model.n_heads % hf.model.kv_heads() != 0) {
    throw UserError(str(origin, ": num_key_value_heads (", hf.model.kv_heads(),
                        ") must divide num_attention_heads (", hf.model.n_heads, ")"));
  }
  try {
    check_block_spec(hf.block);
  } catch (const UserError& error) {
    throw UserError(str(origin, ": ", error.what()));
  }
  return hf;
}

HfModel read_hf_config(const std::string& dir) {
  const std::string path = dir + "/config.json";
  std::ifstream in(path);
  if (!in) {
    throw UserError(str("no Hugging Face config.json at ", path,
                        " (a model directory holds config.json and model.safetensors)"));
  }
  nlohmann::json config;
  try {
    config = nlohmann::json::parse(in);
  } catch (const nlohmann::json::exception& error) {
    throw UserError(str(path, " is not JSON (", error.what(), ")"));
  }
  return hf_model_from_json(config, path);
}

std::vector<int64_t> hf_eos_token_ids(const std::string& dir) {
  // As Hugging Face's GenerationConfig: its own file, else the model's config.json.
  std::string path = dir + "/generation_config.json";
  if (!std::filesystem::exists(path)) path = dir + "/config.json";
  std::ifstream in(path);
  if (!in) return {};
  nlohmann::json config;
  try {
    config = nlohmann::json::parse(in);
  } catch (const nlohmann::json::exception& error) {
    throw UserError(str(path, " is not JSON (", error.what(), ")"));
  }
  if (!config.is_object() || !config.contains("eos_token_id") || config["eos_token_id"].is_null()) {
    return {};
  }
  const nlohmann::json& eos = config["eos_token_id"];
  const nlohmann::json ids = eos.is_array() ? eos : nlohmann::json::array({eos});
  std::vector<int64_t> out;
  for (const auto& id : ids) {
    STRATA_REQUIRE(id.is_number_integer() && id.get<int64_t>() >= 0, path,
                   ": eos_token_id must be a token id or a list of them, not ", eos.dump());
    out.push_back(id.get<int64_t>());
  }
  return out;
}

HfArchitecture hf_architecture_for(const ModelConfig& model, const BlockSpec& block) {
  const LinearBiases& b = block.biases;
  const bool any_bias = b.q || b.k || b.v || b.attention_out || b.mlp_in || b.mlp_out;
  const bool all_biases = b.q && b.k && b.v && b.attention_out && b.mlp_in && b.mlp_out;
  if (block.norm == Norm::layernorm || block.position == PositionEncoding::learned ||
      block.activation == Activation::gelu) {
    if (block.norm == Norm::layernorm && block.position == PositionEncoding::learned &&
        block.activation == Activation::gelu && all_biases && block.moe.num_experts == 0 &&
        model.kv_heads() == model.n_heads) {
      STRATA_REQUIRE(model.head_dim() * model.n_heads == model.d_model,
                     "this model has no Hugging Face architecture: GPT-2's heads are d_model / "
                     "n_heads wide (model.head_dim ",
                     model.head_dim(), " is not ", model.d_model, " / ", model.n_heads, ")");
      return HfArchitecture::gpt2;
    }
    throw UserError(
        "this model has no Hugging Face architecture: GPT-2 is LayerNorm, learned positions, "
        "GELU, biases on every projection and multi-head attention together, and the Llama "
        "family is RMSNorm, rotary positions and SwiGLU (write model.norm, model.pos and "
        "model.activation as one of them)");
  }
  if (block.moe.num_experts > 0) {
    const MoeConfig& moe = block.moe;
    if (any_bias || moe.every != 1 || moe.top_k != 2 || moe.activation != Activation::swiglu ||
        moe.capacity_factor != 0.0) {
      throw UserError(
          "this mixture of experts has no Hugging Face architecture: Mixtral has every layer "
          "an MoE (model.moe.every = 1) of SwiGLU experts (model.moe.activation), top-2 "
          "routing (model.moe.top_k = 2), no token dropped (model.moe.capacity_factor = 0) "
          "and no biases");
    }
    return HfArchitecture::mixtral;
  }
  if (b.q && b.k && b.v && !b.attention_out && !b.mlp_in && !b.mlp_out) {
    return HfArchitecture::qwen2;
  }
  const bool attention_alike = b.q == b.k && b.k == b.v && b.v == b.attention_out;
  if (!attention_alike || b.mlp_in != b.mlp_out) {
    throw UserError(
        "this model's biases fit no Hugging Face architecture (Qwen2: q, k and v; Llama: all "
        "four attention projections or none, both MLP projections or none)");
  }
  return HfArchitecture::llama;
}

nlohmann::json hf_config_json(HfArchitecture architecture, const ModelConfig& model,
                              const BlockSpec& block, const std::string& torch_dtype,
                              nlohmann::json base) {
  nlohmann::json& config = base;
  config["architectures"] = {hf_architecture_class(architecture)};
  config["model_type"] = hf_model_type(architecture);
  config["torch_dtype"] = torch_dtype;
  config["vocab_size"] = model.vocab_size;
  config["tie_word_embeddings"] = model.tie_embeddings;
  if (architecture == HfArchitecture::gpt2) {
    config["n_embd"] = model.d_model;
    config["n_layer"] = model.n_layers;
    config["n_head"] = model.n_heads;
    config["n_inner"] = model.ff_dim();
    config["n_positions"] = model.seq_len;
    config["n_ctx"] = model.seq_len;
    config["layer_norm_epsilon"] = block.norm_eps;
    config["activation_function"] = "gelu_new";
    config["scale_attn_weights"] = true;
    return config;
  }
  config["hidden_size"] = model.d_model;
  config["num_hidden_layers"] = model.n_layers;
  config["num_attention_heads"] = model.n_heads;
  config["num_key_value_heads"] = model.kv_heads();
  config["head_dim"] = model.head_dim();
  config["intermediate_size"] = model.ff_dim();
  // The context it came with (a fine-tune may have run shorter sequences), else the run's.
  config["max_position_embeddings"] =
      std::max(base.value("max_position_embeddings", int64_t{0}), model.seq_len);
  config["hidden_act"] = "silu";
  config["rms_norm_eps"] = block.norm_eps;
  config["rope_theta"] = block.rope_theta;
  const RopeScaling& scaling = block.rope_scaling;
  if (scaling.type == RopeScalingType::llama3) {
    config["rope_scaling"] = {
        {"rope_type", "llama3"},
        {"factor", scaling.factor},
        {"low_freq_factor", scaling.low_freq_factor},
        {"high_freq_factor", scaling.high_freq_factor},
        {"original_max_position_embeddings", scaling.original_max_position_embeddings}};
  } else {
    config["rope_scaling"] = nullptr;
  }
  if (architecture == HfArchitecture::llama) {
    config["attention_bias"] = block.biases.attention_out;
    config["mlp_bias"] = block.biases.mlp_in;
  }
  if (architecture == HfArchitecture::mistral || architecture == HfArchitecture::mixtral) {
    config["sliding_window"] = nullptr;
  }
  if (architecture == HfArchitecture::qwen2) config["use_sliding_window"] = false;
  if (architecture == HfArchitecture::mixtral) {
    config["num_local_experts"] = block.moe.num_experts;
    config["num_experts_per_tok"] = block.moe.top_k;
    config["router_aux_loss_coef"] = block.moe.aux_loss_coef;
  }
  return config;
}

BlockSpec run_block_spec(const Config& config) {
  const ModelConfig& model = config.model;
  if (config.model_init.empty()) return block_spec_of(model);
  const HfModel hf = read_hf_config(config.model_init);
  const ModelConfig& expected = hf.model;
  STRATA_REQUIRE(
      model.vocab_size == expected.vocab_size && model.d_model == expected.d_model &&
          model.n_layers == expected.n_layers && model.n_heads == expected.n_heads &&
          model.kv_heads() == expected.kv_heads() && model.head_dim() == expected.head_dim() &&
          model.ff_dim() == expected.ff_dim() && model.tie_embeddings == expected.tie_embeddings,
      "the [model] table does not describe the model.init model ", config.model_init,
      " (its sizes come from its config.json: read the config through with_hf_model)");
  BlockSpec block = hf.block;
  // A fine-tune's MoE training settings are the run's.
  block.moe.aux_loss_coef = model.moe.aux_loss_coef;
  block.moe.z_loss_coef = model.moe.z_loss_coef;
  return block;
}

Config with_hf_model(Config config) {
  if (config.model_init.empty()) return config;
  ModelConfig& model = config.model;
  const HfModel hf = read_hf_config(config.model_init);
  ModelConfig resolved = hf.model;
  resolved.attention = model.attention;
  resolved.init_std = model.init_std;
  resolved.moe.aux_loss_coef = model.moe.aux_loss_coef;
  resolved.moe.z_loss_coef = model.moe.z_loss_coef;
  if (hf.block.position == PositionEncoding::rope) {
    STRATA_REQUIRE(model.seq_len <= hf.model.seq_len, "model.seq_len (", model.seq_len,
                   ") exceeds the context of the model.init model ", config.model_init, " (",
                   hf.model.seq_len, ", max_position_embeddings in its config.json)");
    resolved.seq_len = model.seq_len;
  }
  model = resolved;
  return config;
}

}  // namespace strata
