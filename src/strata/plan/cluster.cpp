// Reading and writing cluster profiles, and the built-in presets. Every problem in a file is
// collected, so one run reports all of them, each naming the file and the key.
#include "strata/plan/cluster.h"

#include <toml++/toml.h>

#include <algorithm>
#include <cctype>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iomanip>
#include <map>
#include <sstream>

#include "strata/core/error.h"

namespace strata {
namespace {

// Public numbers of the DGX-class systems (per GPU): 16-bit dense tensor-core peak, HBM size
// and bandwidth, NVLink bandwidth per direction, one InfiniBand NIC per GPU (A100: HDR
// 200 Gb/s, H100/H200: NDR 400 Gb/s). matmul_efficiency, matmul_half_dim and
// kernel_overhead_us of the A100 are fitted on the published Megatron-LM runs of
// configs/published/training_runs.toml (docs/planner.md): large GEMMs at 0.86 of peak, a
// GEMM with a 128-wide side at half that, 5 us per kernel. The H100 and H200 take the A100's
// shape and kernel terms (no published run calibrates them yet) and 0.7 of peak for large GEMMs.
// blockwise_attention_efficiency is FlashAttention-2's published forward + backward rate on
// causal attention with head_dim 128 (Dao 2023, arXiv 2307.08691: about 0.55 of the A100's
// peak, about 0.35 of the H100's without Hopper-specific kernels), not fitted here: the
// published runs used eager attention.
const std::map<std::string, std::string>& presets() {
  static const std::map<std::string, std::string> texts = {
      {"a100-80gb", R"(# NVIDIA DGX A100 80GB nodes: 8 A100-SXM4-80GB, NVLink 3, 8x HDR InfiniBand.
[cluster]
nodes = 1
devices_per_node = 8

[device]
name = "A100-SXM4-80GB"
peak_tflops = 312.0
memory_gb = 80.0
memory_bandwidth_gbs = 2039.0
matmul_efficiency = 0.86
blockwise_attention_efficiency = 0.55
matmul_half_dim = 128.0
kernel_overhead_us = 5.0
precision = "bf16"

[network]
intra_node_gbs = 300.0
inter_node_gbs = 25.0
latency_us = 5.0
intra_node_latency_us = 2.0
)"},
      {"h100-80gb", R"(# NVIDIA DGX H100 nodes: 8 H100-SXM5-80GB, NVLink 4, 8x NDR InfiniBand.
[cluster]
nodes = 1
devices_per_node = 8

[device]
name = "H100-SXM5-80GB"
peak_tflops = 989.0
memory_gb = 80.0
memory_bandwidth_gbs = 3350.0
matmul_efficiency = 0.7
blockwise_attention_efficiency = 0.35
matmul_half_dim = 128.0
kernel_overhead_us = 5.0
precision = "bf16"

[network]
intra_node_gbs = 450.0
inter_node_gbs = 50.0
latency_us = 5.0
intra_node_latency_us = 2.0
)"},
      {"h200", R"(# NVIDIA DGX H200 nodes: 8 H200-SXM-141GB, NVLink 4, 8x NDR InfiniBand.
[cluster]
nodes = 1
devices_per_node = 8

[device]
name = "H200-SXM-141GB"
peak_tflops = 989.0
memory_gb = 141.0
memory_bandwidth_gbs = 4800.0
matmul_efficiency = 0.7
blockwise_attention_efficiency = 0.35
matmul_half_dim = 128.0
kernel_overhead_us = 5.0
precision = "bf16"

[network]
intra_node_gbs = 450.0
inter_node_gbs = 50.0
latency_us = 5.0
intra_node_latency_us = 2.0
)"},
  };
  return texts;
}

using Problems = std::vector<std::string>;

// Reads one section's keys into the profile, noting missing, unknown and bad values.
class SectionReader {
 public:
  SectionReader(const toml::table& root, const std::string& section, const std::string& origin,
                Problems& problems)
      : section_(section), origin_(origin), problems_(problems) {
    const toml::node* node = root.get(section);
    if (node == nullptr) {
      problems_.push_back(str("[", section, "] is missing"));
      return;
    }
    table_ = node->as_table();
    if (table_ == nullptr) problems_.push_back(str("[", section, "] must be a table"));
  }

  void number(const std::string& key, double& value, bool required, double minimum,
              bool strictly_above) {
    known_.push_back(key);
    if (table_ == nullptr) return;
    const toml::node* node = table_->get(key);
    if (node == nullptr) {
      if (required) problems_.push_back(str(section_, ".", key, " is missing"));
      return;
    }
    std::optional<double> read = node->value<double>();
    if (!read || !node->is_number()) {
      problems_.push_back(str(section_, ".", key, " must be a number"));
      return;
    }
    const bool ok = strictly_above ? *read > minimum : *read >= minimum;
    if (!ok || !std::isfinite(*read)) {
      problems_.push_back(str(section_, ".", key, " (", *read, ") must be ",
                              strictly_above ? "> " : ">= ", minimum));
      return;
    }
    value = *read;
  }

  void integer(const std::string& key, int64_t& value) {
    known_.push_back(key);
    if (table_ == nullptr) return;
    const toml::node* node = table_->get(key);
    if (node == nullptr) {
      problems_.push_back(str(section_, ".", key, " is missing"));
      return;
    }
    std::optional<int64_t> read = node->value_exact<int64_t>();
    if (!read || *read < 1) {
      problems_.push_back(str(section_, ".", key, " must be a whole number >= 1"));
      return;
    }
    value = *read;
  }

  void text(const std::string& key, std::string& value, bool required,
            const std::vector<std::string>& allowed = {}) {
    known_.push_back(key);
    if (table_ == nullptr) return;
    const toml::node* node = table_->get(key);
    if (node == nullptr) {
      if (required) problems_.push_back(str(section_, ".", key, " is missing"));
      return;
    }
    std::optional<std::string> read = node->value_exact<std::string>();
    if (!read) {
      problems_.push_back(str(section_, ".", key, " must be a string"));
      return;
    }
    if (!allowed.empty() && std::find(allowed.begin(), allowed.end(), *read) == allowed.end()) {
      std::string list;
      for (size_t i = 0; i < allowed.size(); ++i) list += (i ? " or \"" : "\"") + allowed[i] + "\"";
      problems_.push_back(str(section_, ".", key, " must be ", list, ", got \"", *read, "\""));
      return;
    }
    value = *read;
  }

  bool has(const std::string& key) const {
    return table_ != nullptr && table_->get(key) != nullptr;
  }

  // Every key of the section that no reader asked for.
  void reject_unknown() {
    if (table_ == nullptr) return;
    for (const auto& [key, node] : *table_) {
      const std::string name(key.str());
      if (std::find(known_.begin(), known_.end(), name) != known_.end()) continue;
      std::string list;
      for (size_t i = 0; i < known_.size(); ++i) list += (i ? ", " : "") + known_[i];
      problems_.push_back(
          str(section_, ".", name, " is not a known key; [", section_, "] takes ", list));
    }
  }

 private:
  std::string section_, origin_;
  Problems& problems_;
  const toml::table* table_ = nullptr;
  std::vector<std::string> known_;
};

std::string read_file(const std::string& path) {
  std::ifstream file(path);
  STRATA_REQUIRE(file.good(), "cannot read cluster file '", path, "'");
  std::stringstream text;
  text << file.rdbuf();
  return text.str();
}

std::string preset_list() {
  std::string list;
  for (const auto& [name, text] : presets()) list += (list.empty() ? "" : ", ") + name;
  return list;
}

// The device efficiency keys the presets calibrate, and the field each one sets.
const std::vector<std::pair<std::string, double DeviceProfile::*>>& efficiency_fields() {
  static const std::vector<std::pair<std::string, double DeviceProfile::*>> fields = {
      {"matmul_efficiency", &DeviceProfile::matmul_efficiency},
      {"blockwise_attention_efficiency", &DeviceProfile::blockwise_attention_efficiency},
      {"matmul_half_dim", &DeviceProfile::matmul_half_dim},
      {"kernel_overhead_us", &DeviceProfile::kernel_overhead_us}};
  return fields;
}

std::string preset_chip(const std::string& preset) { return preset.substr(0, preset.find('-')); }

// A file without the efficiency keys would price its device at its peak: the calibrated preset
// of the same chip knows better; for another chip the note says the prediction is a bound.
void fill_missing_efficiency(const SectionReader& device, const std::string& origin,
                             ClusterProfile& cluster) {
  std::vector<std::string> missing;
  for (const auto& [key, field] : efficiency_fields()) {
    if (!device.has(key)) missing.push_back(key);
  }
  if (missing.empty()) return;
  const std::string preset = calibrated_preset_for(cluster.device.name);
  if (preset.empty()) {
    std::string chips;
    for (const std::string& name : cluster_preset_names()) {
      chips += (chips.empty() ? "" : ", ") + preset_chip(name);
    }
    std::string keys;
    for (const std::string& key : missing) keys += (keys.empty() ? "" : ", ") + key;
    cluster.efficiency_note =
        str("warning: ", origin, " sets no ", keys, " and device.name \"", cluster.device.name,
            "\" names no calibrated chip (", chips,
            "): they keep their ideal defaults (multiplies at peak, no shape or per-kernel cost), "
            "so the prediction is an upper bound on speed; set them (docs/planner.md, Cluster "
            "profiles)");
    return;
  }
  const DeviceProfile calibrated = parse_cluster(presets().at(preset), preset).device;
  std::string taken;
  for (const auto& [key, field] : efficiency_fields()) {
    if (std::find(missing.begin(), missing.end(), key) == missing.end()) continue;
    cluster.device.*field = calibrated.*field;
    taken += str(taken.empty() ? "" : ", ", key, " = ", calibrated.*field);
  }
  cluster.efficiency_note =
      str("note: ", origin, " leaves out device efficiency keys; took ", taken,
          " from the calibrated preset ", preset, " (device.name \"", cluster.device.name, "\")");
}

}  // namespace

ClusterProfile parse_cluster(const std::string& toml_text, const std::string& origin) {
  toml::table root;
  try {
    root = toml::parse(toml_text, origin);
  } catch (const toml::parse_error& error) {
    throw UserError(str(origin, ":", error.source().begin.line, ":", error.source().begin.column,
                        ": not valid TOML: ", error.description()));
  }
  ClusterProfile cluster;
  cluster.name = origin;
  Problems problems;
  for (const auto& [key, node] : root) {
    const std::string name(key.str());
    if (name != "cluster" && name != "device" && name != "network") {
      problems.push_back(str("[", name, "] is not a known section; a cluster file has [cluster], ",
                             "[device] and [network]"));
    }
  }
  SectionReader shape(root, "cluster", origin, problems);
  shape.integer("nodes", cluster.nodes);
  shape.integer("devices_per_node", cluster.devices_per_node);
  shape.reject_unknown();

  SectionReader device(root, "device", origin, problems);
  device.text("name", cluster.device.name, true);
  device.number("peak_tflops", cluster.device.peak_tflops, true, 0, true);
  device.number("memory_gb", cluster.device.memory_gb, true, 0, true);
  device.number("memory_bandwidth_gbs", cluster.device.memory_bandwidth_gbs, true, 0, true);
  device.number("elementwise_gbs", cluster.device.elementwise_gbs, false, 0, true);
  device.number("matmul_efficiency", cluster.device.matmul_efficiency, false, 0, true);
  device.number("attention_efficiency", cluster.device.attention_efficiency, false, 0, true);
  device.number("blockwise_attention_efficiency", cluster.device.blockwise_attention_efficiency,
                false, 0, true);
  device.number("matmul_half_dim", cluster.device.matmul_half_dim, false, 0, false);
  device.number("kernel_overhead_us", cluster.device.kernel_overhead_us, false, 0, false);
  device.text("precision", cluster.device.precision, false, {"bf16", "fp32"});
  device.reject_unknown();
  for (const auto& [key, value] :
       {std::make_pair("matmul_efficiency", cluster.device.matmul_efficiency),
        std::make_pair("attention_efficiency", cluster.device.attention_efficiency),
        std::make_pair("blockwise_attention_efficiency",
                       cluster.device.blockwise_attention_efficiency)}) {
    if (value > 1) {
      problems.push_back(
          str("device.", key, " (", value, ") must be <= 1 (a fraction of peak_tflops)"));
    }
  }

  SectionReader network(root, "network", origin, problems);
  network.number("intra_node_gbs", cluster.network.intra_node_gbs, true, 0, true);
  network.number("inter_node_gbs", cluster.network.inter_node_gbs, true, 0, true);
  network.number("latency_us", cluster.network.latency_us, true, 0, false);
  network.number("intra_node_latency_us", cluster.network.intra_node_latency_us, false, 0, false);
  network.reject_unknown();

  if (problems.size() == 1) throw UserError(str(origin, ": ", problems.front()));
  if (!problems.empty()) {
    std::string message = str(origin, ": the cluster file has ", problems.size(), " problems:");
    for (const std::string& problem : problems) message += "\n  - " + problem;
    throw UserError(message);
  }
  fill_missing_efficiency(device, origin, cluster);
  return cluster;
}

std::string calibrated_preset_for(const std::string& device_name) {
  std::string lower = device_name;
  std::transform(lower.begin(), lower.end(), lower.begin(),
                 [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
  for (const std::string& preset : cluster_preset_names()) {
    if (lower.find(preset_chip(preset)) != std::string::npos) return preset;
  }
  return "";
}

ClusterProfile load_cluster(const std::string& name_or_path) {
  STRATA_REQUIRE(!name_or_path.empty(), "--cluster is required: a preset (", preset_list(),
                 "), local, or a cluster TOML file");
  const auto preset = presets().find(name_or_path);
  if (preset != presets().end()) {
    ClusterProfile cluster = parse_cluster(preset->second, name_or_path);
    cluster.name = name_or_path;
    return cluster;
  }
  if (name_or_path == "local") {
    const std::string path = local_profile_path();
    STRATA_REQUIRE(std::filesystem::exists(path), "--cluster local: no local profile at ", path,
                   "; run `strata plan calibrate` first to measure this machine");
    ClusterProfile cluster = parse_cluster(read_file(path), path);
    cluster.name = "local";
    return cluster;
  }
  STRATA_REQUIRE(std::filesystem::is_regular_file(name_or_path), "--cluster '", name_or_path,
                 "' is neither a preset (", preset_list(),
                 "), nor local, nor a readable cluster TOML file");
  return parse_cluster(read_file(name_or_path), name_or_path);
}

std::string cluster_to_toml(const ClusterProfile& cluster) {
  std::ostringstream out;
  out << std::setprecision(17);
  auto number = [&out](const char* key, double value) {
    std::ostringstream text;
    text << std::setprecision(17) << value;
    std::string spelled = text.str();
    // TOML floats need a fraction or exponent.
    if (spelled.find_first_of(".eEn") == std::string::npos) spelled += ".0";
    out << key << " = " << spelled << "\n";
  };
  out << "[cluster]\nnodes = " << cluster.nodes
      << "\ndevices_per_node = " << cluster.devices_per_node << "\n\n[device]\n"
      << "name = " << toml::value<std::string>(cluster.device.name) << "\n";
  number("peak_tflops", cluster.device.peak_tflops);
  number("memory_gb", cluster.device.memory_gb);
  number("memory_bandwidth_gbs", cluster.device.memory_bandwidth_gbs);
  if (cluster.device.elementwise_gbs >= 0)
    number("elementwise_gbs", cluster.device.elementwise_gbs);
  number("matmul_efficiency", cluster.device.matmul_efficiency);
  if (cluster.device.attention_efficiency >= 0) {
    number("attention_efficiency", cluster.device.attention_efficiency);
  }
  number("blockwise_attention_efficiency", cluster.device.blockwise_attention_rate());
  number("matmul_half_dim", cluster.device.matmul_half_dim);
  number("kernel_overhead_us", cluster.device.kernel_overhead_us);
  out << "precision = \"" << cluster.device.precision << "\"\n\n[network]\n";
  number("intra_node_gbs", cluster.network.intra_node_gbs);
  number("inter_node_gbs", cluster.network.inter_node_gbs);
  number("latency_us", cluster.network.latency_us);
  if (cluster.network.intra_node_latency_us >= 0) {
    number("intra_node_latency_us", cluster.network.intra_node_latency_us);
  }
  return out.str();
}

const std::vector<std::string>& cluster_preset_names() {
  static const std::vector<std::string> names = [] {
    std::vector<std::string> list;
    for (const auto& [name, text] : presets()) list.push_back(name);
    return list;
  }();
  return names;
}

std::string cluster_preset_toml(const std::string& name) {
  const auto preset = presets().find(name);
  return preset == presets().end() ? std::string() : preset->second;
}

std::string local_profile_path() {
  const char* strata_cache = std::getenv("STRATA_CACHE_DIR");
  if (strata_cache != nullptr && *strata_cache != '\0') {
    return std::string(strata_cache) + "/clusters/local.toml";
  }
  const char* xdg = std::getenv("XDG_CACHE_HOME");
  if (xdg != nullptr && *xdg != '\0') return std::string(xdg) + "/strata/clusters/local.toml";
  const char* home = std::getenv("HOME");
  return std::string(home != nullptr && *home != '\0' ? home : ".") +
         "/.cache/strata/clusters/local.toml";
}

}  // namespace strata
