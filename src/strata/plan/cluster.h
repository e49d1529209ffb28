// Hardware profiles for the planner: how many devices, how fast each multiplies matrices and
// moves memory, and how fast the links between them are. Read from a TOML file, a built-in
// preset (a100-80gb, h100-80gb, h200: 8-GPU nodes with NVLink inside and InfiniBand between),
// or the `local` profile that `strata plan calibrate` writes for this machine.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

namespace strata {

struct DeviceProfile {
  std::string name;
  double peak_tflops = 0;           // dense matrix-multiply rate in `precision`, TFLOP/s
  double memory_gb = 0;             // usable memory per device, GB = 1e9 bytes
  double memory_bandwidth_gbs = 0;  // device memory, GB/s
  // GB/s that the elementwise kernels with arithmetic (norms, softmax, activation functions,
  // cross-entropy) move; < 0: memory_bandwidth_gbs, as on GPUs, where they are memory-bound.
  // On CPUs they are compute-bound and calibrate measures them.
  double elementwise_gbs = -1;
  // Fraction of peak_tflops that the transformer's matrix multiplies reach (kernel and
  // shape efficiency). 1 for a calibrated profile, whose peak is already a measured rate.
  double matmul_efficiency = 1.0;
  // The same for the attention core's batched head_dim-sized matmuls (QK^T, attention x V),
  // which run well below big GEMMs; < 0: the same as matmul_efficiency.
  double attention_efficiency = -1;
  // The blockwise kernel's (model.attention = "blockwise", FlashAttention-style): the fraction
  // of peak_tflops its tile products reach, its fused softmax included, counting only the FLOPs
  // it executes (transformer.h, attention_core_flops). < 0: attention_efficiency.
  double blockwise_attention_efficiency = -1;
  // Shape: a matrix multiply whose smallest dimension on the rank is d (rows of tokens, the
  // weight's in or out width / tp) runs at matmul_efficiency * d / (d + matmul_half_dim) of
  // peak_tflops, so thin tensor-parallel shards run below big GEMMs. 0: every shape at
  // matmul_efficiency (a calibrated CPU profile).
  double matmul_half_dim = 0;
  // Fixed time of every kernel (launch gap, ramp-up and tail), microseconds: the cost model
  // counts the kernels of each layer pass (cost_model.cpp, kLayerKernels*). 0: none.
  double kernel_overhead_us = 0;
  // What training runs in on this device: "bf16" = mixed precision (16-bit weights and
  // activations, fp32 master weights and Adam state); "fp32" = everything in float32, as the
  // CPU runtime of this release trains.
  std::string precision = "bf16";

  double elementwise_rate_gbs() const {
    return elementwise_gbs >= 0 ? elementwise_gbs : memory_bandwidth_gbs;
  }
  double attention_matmul_efficiency() const {
    return attention_efficiency >= 0 ? attention_efficiency : matmul_efficiency;
  }
  double blockwise_attention_rate() const {
    return blockwise_attention_efficiency >= 0 ? blockwise_attention_efficiency
                                               : attention_matmul_efficiency();
  }
  // The fraction of peak a multiply with smallest dimension d reaches.
  double matmul_shape_efficiency(double d) const {
    return matmul_efficiency * (matmul_half_dim > 0 ? d / (d + matmul_half_dim) : 1.0);
  }
};

struct NetworkProfile {
  double intra_node_gbs = 0;  // per device and direction, inside a node (NVLink, shared memory)
  double inter_node_gbs = 0;  // per device and direction, between nodes (its share of the NICs)
  double latency_us = 0;      // per message between nodes
  double intra_node_latency_us = -1;  // per message inside a node; < 0: the same as latency_us

  double intra_latency_us() const {
    return intra_node_latency_us >= 0 ? intra_node_latency_us : latency_us;
  }
};

struct ClusterProfile {
  std::string name;  // the preset name, "local", or the file it was read from
  int64_t nodes = 1;
  int64_t devices_per_node = 1;
  DeviceProfile device;
  NetworkProfile network;
  // Empty, or the one line `strata plan` shows on stderr for a file that left out device
  // efficiency keys: which it took from a calibrated preset, or that the prediction is an upper
  // bound (parse_cluster).
  std::string efficiency_note;

  int64_t devices() const { return nodes * devices_per_node; }
  double memory_bytes() const { return device.memory_gb * 1e9; }
};

// TOML text -> profile. Sections [cluster] nodes, devices_per_node; [device] name,
// peak_tflops, memory_gb, memory_bandwidth_gbs (+ optional elementwise_gbs, matmul_efficiency,
// attention_efficiency, blockwise_attention_efficiency, matmul_half_dim, kernel_overhead_us,
// precision);
// [network] intra_node_gbs, inter_node_gbs, latency_us (+ optional intra_node_latency_us).
// Throws UserError naming the origin and every missing, unknown or out-of-range key.
// Of the device efficiency keys the presets calibrate (matmul_efficiency,
// blockwise_attention_efficiency, matmul_half_dim, kernel_overhead_us) that the file leaves
// out, a device whose name names a calibrated preset's chip (calibrated_preset_for) takes the
// preset's values; another keeps the ideal defaults. Either way efficiency_note says so.
ClusterProfile parse_cluster(const std::string& toml_text, const std::string& origin);

// The preset whose chip a device name names, case aside ("H100-80GB", "nvidia h100" ->
// h100-80gb; a preset's chip is its name up to the first '-'); "" when none does.
std::string calibrated_preset_for(const std::string& device_name);

// A preset name (cluster_preset_names()), "local" (local_profile_path(), written by
// `strata plan calibrate`), or a TOML file. Throws UserError saying which names and files exist.
ClusterProfile load_cluster(const std::string& name_or_path);

// The profile as TOML that parse_cluster reads back to the same values, every efficiency key
// written (so a calibrated profile read back takes nothing from a preset).
std::string cluster_to_toml(const ClusterProfile& cluster);

const std::vector<std::string>& cluster_preset_names();
// The TOML text of a preset (the same as configs/clusters/NAME.toml); "" for another name.
std::string cluster_preset_toml(const std::string& name);

// Where `strata plan calibrate` writes the local profile and `--cluster local` reads it:
// $STRATA_CACHE_DIR/clusters/local.toml, else $XDG_CACHE_HOME/strata/clusters/local.toml,
// else $HOME/.cache/strata/clusters/local.toml.
std::string local_profile_path();

}  // namespace strata
