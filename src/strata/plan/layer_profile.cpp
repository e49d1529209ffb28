// Reading and writing the measured layer profile (layer_profile.h).
#include "strata/plan/layer_profile.h"

#include <toml++/toml.h>

#include <filesystem>
#include <fstream>
#include <sstream>

#include "strata/core/atomic_file.h"
#include "strata/core/error.h"
#include "strata/plan/cluster.h"
#include "strata/plan/layout.h"

namespace strata {

std::string layer_profile_model(const TransformerSpec& model) {
  return str("vocab_size=", model.vocab_size, " d_model=", model.d_model,
             " n_heads=", model.n_heads, " n_kv_heads=", model.n_kv_heads, " d_ff=", model.d_ff,
             " seq_len=", model.seq_len, " gated_mlp=", model.gated_mlp,
             " num_experts=", model.moe.num_experts, " top_k=", model.moe.top_k,
             " every=", model.moe.every, " learned_positions=", model.learned_positions,
             " tied_embeddings=", model.tied_embeddings, " norm_bias=", model.norm_bias,
             " attention=", name_of(model.attention));
}

bool layer_profile_applies(const LayerProfile& profile, const TransformerSpec& model,
                           Precision precision, const PlanLayout& layout) {
  return profile.model == layer_profile_model(model) && profile.precision == precision &&
         profile.micro_batch == layout.micro_batch && layout.tp == 1 && layout.cp == 1 &&
         layout.recompute == Recompute::none;
}

std::string layer_profile_path() {
  return (std::filesystem::path(local_profile_path()).parent_path() / "local_layers.toml").string();
}

void save_layer_profile(const std::string& path, const LayerProfile& profile) {
  std::ostringstream text;
  text << "# One microbatch's forward and backward on this machine, measured by `strata plan "
          "calibrate --profile-layers`.\n"
       << "model = " << toml::value<std::string>(profile.model) << "\n"
       << "precision = " << toml::value<std::string>(name_of(profile.precision)) << "\n"
       << "micro_batch = " << profile.micro_batch << "\n"
       << "layer_s = " << toml::value<double>(profile.seconds.layer) << "\n"
       << "embedding_s = " << toml::value<double>(profile.seconds.embedding) << "\n"
       << "head_s = " << toml::value<double>(profile.seconds.head) << "\n";
  const std::filesystem::path target(path);
  std::error_code error;
  if (target.has_parent_path()) std::filesystem::create_directories(target.parent_path(), error);
  const std::string bytes = text.str();
  write_file_atomically(path, bytes.data(), bytes.size());
}

std::optional<LayerProfile> load_layer_profile(const std::string& path) {
  if (!std::filesystem::is_regular_file(path)) return std::nullopt;
  toml::table root;
  try {
    root = toml::parse_file(path);
  } catch (const toml::parse_error& error) {
    throw UserError(str(path, ": TOML syntax error: ", error.description(),
                        "; run `strata plan calibrate --profile-layers` again to rewrite it"));
  }
  auto required = [&](const char* key) -> const toml::node& {
    const toml::node* node = root.get(key);
    STRATA_REQUIRE(node != nullptr, path, ": the layer profile has no '", key,
                   "'; run `strata plan calibrate --profile-layers` again to rewrite it");
    return *node;
  };
  auto seconds = [&](const char* key) {
    const std::optional<double> value = required(key).value<double>();
    STRATA_REQUIRE(value && *value >= 0, path, ": ", key, " must be a number of seconds >= 0");
    return *value;
  };
  LayerProfile profile;
  const std::optional<std::string> model = required("model").value<std::string>();
  const std::optional<std::string> precision = required("precision").value<std::string>();
  const std::optional<int64_t> micro_batch = required("micro_batch").value<int64_t>();
  STRATA_REQUIRE(model && precision && micro_batch && *micro_batch >= 1, path,
                 ": model and precision must be strings and micro_batch a whole number >= 1");
  const std::optional<Precision> parsed = parse_choice<Precision>(*precision);
  STRATA_REQUIRE(parsed, path, ": precision must be ", spellings_joined<Precision>(), ", got '",
                 *precision, "'");
  profile.model = *model;
  profile.precision = *parsed;
  profile.micro_batch = *micro_batch;
  profile.seconds = {seconds("layer_s"), seconds("embedding_s"), seconds("head_s")};
  STRATA_REQUIRE(profile.seconds.layer > 0, path, ": layer_s must be > 0");
  return profile;
}

}  // namespace strata
