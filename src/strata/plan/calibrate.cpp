// The measurements of `strata plan calibrate`. Each one runs a few timed trials on every rank
// at once (a barrier starts each trial), keeps the median trial, and takes the slowest rank's
// rate, since a training step waits for its slowest rank.
#include "strata/plan/calibrate.h"

#include <ATen/ATen.h>
#include <ATen/Parallel.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <iomanip>
#include <sstream>
#include <vector>

#include "strata/core/error.h"
#include "strata/dist/comm.h"
#include "strata/kernels/attention.h"
#include "strata/kernels/gelu.h"
#include "strata/kernels/matmul_peak.h"
#include "strata/plan/transformer.h"

namespace strata {
namespace {

using Clock = std::chrono::steady_clock;
constexpr int kTrials = 5;
constexpr double kTrialSeconds = 0.5;  // each trial repeats its operation at least this long

double median(std::vector<double> values) {
  std::sort(values.begin(), values.end());
  return values[values.size() / 2];
}

// The largest value over ranks (the slowest rank's time).
double slowest(Comm& world, double seconds) {
  at::Tensor value = at::full({1}, seconds, at::kDouble);
  world.all_reduce(value, ReduceOp::Max);
  return value.item<double>();
}

double seconds_since(Clock::time_point start) {
  return std::chrono::duration<double>(Clock::now() - start).count();
}

// Median over trials of the seconds one call of `operation` takes, every rank timing at once.
// Every rank makes the same number of calls (agreed from a timed warm-up call), so operations
// that communicate stay matched.
template <typename Operation>
double seconds_per_call(Comm& world, Operation operation) {
  world.barrier();
  const auto warm_up = Clock::now();
  operation();  // also first-touches pages and opens MPI connections
  const double first = slowest(world, seconds_since(warm_up));
  const int64_t calls =
      std::clamp<int64_t>(static_cast<int64_t>(kTrialSeconds / std::max(first, 1e-7)), 1, 100000);
  std::vector<double> trials;
  for (int trial = 0; trial < kTrials; ++trial) {
    world.barrier();
    const auto start = Clock::now();
    for (int64_t call = 0; call < calls; ++call) operation();
    trials.push_back(seconds_since(start) / static_cast<double>(calls));
  }
  return median(trials);
}

// float32 products of the shapes a transformer layer runs, as the model routes them: the one
// matmul-peak probe (kernels/matmul_peak.h), timed here.
double measure_matmul_flops(Comm& world) {
  return measure_matmul_peak(at::kFloat, [&](const std::function<void()>& product) {
    return slowest(world, seconds_per_call(world, product));
  });
}

// The attention core's batched matmuls, QK^T and attention x V, for 16 (sequence, head) pairs of
// 256 tokens and head_dim 64.
double measure_attention_flops(Comm& world) {
  auto q = at::randn({16, 256, 64}), k = at::randn({16, 256, 64}), v = at::randn({16, 256, 64});
  auto scores = at::empty({16, 256, 256}), out = at::empty({16, 256, 64});
  const double seconds = slowest(world, seconds_per_call(world, [&] {
                                   at::bmm_out(scores, q, k.transpose(1, 2));
                                   at::bmm_out(out, scores, v);
                                 }));
  return 2 * (2.0 * 16 * 256 * 256 * 64) / seconds;
}

// The blockwise kernel (model.attention = "blockwise") forward and backward on 2 sequences of
// 512 tokens, 8 heads of 64, at the rate of the FLOPs it executes: the causal tiles, the
// backward's recomputed products included (transformer.h, attention_core_flops).
double measure_blockwise_attention_flops(Comm& world) {
  TransformerSpec spec;
  spec.seq_len = 512;
  spec.n_heads = 8;
  spec.d_model = 8 * 64;
  spec.attention = AttentionKernel::blockwise;
  const int64_t batch = 2;
  auto q = at::randn({batch, spec.n_heads, spec.seq_len, 64}), k = at::randn_like(q),
       v = at::randn_like(q), dout = at::randn_like(q);
  const double scale = 1.0 / 8.0;
  const double seconds =
      slowest(world, seconds_per_call(world, [&] {
                const AttentionForward forward = blockwise_attention_forward(q, k, v, scale);
                blockwise_attention_backward(dout, q, k, v, forward.out, forward.lse, scale);
              }));
  const AttentionCoreFlops flops = attention_core_flops(spec, batch);
  return (flops.forward + flops.input_grad) / seconds;
}

// c = a + b over 1M floats: 3 x 4 MB moved per call. Tensors of this size are what a model
// small enough to train on a CPU touches (a microbatch's activations, a weight matrix), so
// their rate, caches included, is the one that matters here.
double measure_memory_bandwidth(Comm& world) {
  constexpr int64_t elements = 1 << 20;
  auto a = at::randn({elements}), b = at::randn({elements}), c = at::empty({elements});
  const double seconds = slowest(world, seconds_per_call(world, [&] { at::add_out(c, a, b); }));
  return 3.0 * 4.0 * static_cast<double>(elements) / seconds;
}

// The elementwise kernels with arithmetic on the same 1M floats: LayerNorm, softmax over rows
// of 256 and tanh-GELU (the model's own, kernels/gelu.h), each reading and writing 4 MB. On a
// CPU they are compute-bound.
double measure_elementwise_rate(Comm& world) {
  constexpr int64_t rows = 4096, width = 256;
  auto a = at::randn({rows, width});
  auto weight = at::ones({width}), bias = at::zeros({width});
  at::Tensor c;
  const double seconds = slowest(world, seconds_per_call(world, [&] {
                                   c = at::layer_norm(a, {width}, weight, bias, 1e-5);
                                   c = at::softmax(a, -1);
                                   c = gelu_tanh(a);
                                 }));
  return 3 * 2 * 4.0 * static_cast<double>(rows * width) / seconds;
}

std::string cpu_model() {
  std::ifstream cpuinfo("/proc/cpuinfo");
  std::string line;
  while (std::getline(cpuinfo, line)) {
    if (line.rfind("model name", 0) == 0) {
      const size_t colon = line.find(':');
      if (colon != std::string::npos) return line.substr(line.find_first_not_of(' ', colon + 1));
    }
  }
  return "unknown CPU";
}

double physical_memory_bytes() {
  const long pages = sysconf(_SC_PHYS_PAGES), page_size = sysconf(_SC_PAGE_SIZE);
  return pages > 0 && page_size > 0 ? static_cast<double>(pages) * static_cast<double>(page_size)
                                    : 0.0;
}

std::string fixed(double value, int digits) {
  std::ostringstream out;
  out << std::fixed << std::setprecision(digits) << value;
  return out.str();
}

}  // namespace

CalibrationReport calibrate_local(Comm& world) {
  const int n = world.size();
  CalibrationReport report;
  report.threads_per_rank = at::get_num_threads();
  report.matmul_tflops = measure_matmul_flops(world) / 1e12;
  report.attention_tflops = measure_attention_flops(world) / 1e12;
  report.blockwise_attention_tflops = measure_blockwise_attention_flops(world) / 1e12;
  report.memory_bandwidth_gbs = measure_memory_bandwidth(world) / 1e9;
  report.elementwise_gbs = measure_elementwise_rate(world) / 1e9;

  if (n > 1) {
    // Latency: an 8-byte all-reduce is 2(n-1) ring steps of pure latency.
    at::Tensor word = at::zeros({1}, at::kDouble);
    const double small = slowest(world, seconds_per_call(world, [&] { world.all_reduce(word); }));
    const double alpha = small / (2.0 * (n - 1));
    // Bandwidth: a 16 MB all-reduce moves 2(n-1)/n of it per rank, after its latency.
    constexpr int64_t elements = 4 << 20;
    at::Tensor big = at::zeros({elements});
    const double large = slowest(world, seconds_per_call(world, [&] { world.all_reduce(big); }));
    const double bytes = 4.0 * static_cast<double>(elements);
    const double transfer = std::max(large - 2.0 * (n - 1) * alpha, 1e-9);
    report.allreduce_latency_us = alpha * 1e6;
    report.allreduce_bandwidth_gbs = 2.0 * (n - 1) / n * bytes / transfer / 1e9;

    // Point-to-point between ranks 0 and 1 (the others wait at the trial barriers).
    const int rank = world.rank();
    at::Tensor one = at::zeros({1});
    const double round_trip = slowest(world, seconds_per_call(world, [&] {
                                        if (rank == 0) {
                                          world.send(one, 1);
                                          world.recv(one, 1);
                                        } else if (rank == 1) {
                                          world.recv(one, 0);
                                          world.send(one, 0);
                                        }
                                      }));
    report.p2p_latency_us = round_trip / 2 * 1e6;
    const double message =
        slowest(world, seconds_per_call(world, [&] {
                  if (rank == 0) {
                    world.send(big, 1);
                    world.recv(one, 1);  // the acknowledgement bounds the time to the arrival
                  } else if (rank == 1) {
                    world.recv(big, 0);
                    world.send(one, 0);
                  }
                }));
    report.p2p_bandwidth_gbs = bytes / std::max(message - round_trip, 1e-9) / 1e9;
  }

  ClusterProfile& profile = report.profile;
  profile.name = "local";
  profile.nodes = 1;
  profile.devices_per_node = n;
  profile.device.name = str("local: ", cpu_model(), ", ", report.threads_per_rank,
                            report.threads_per_rank == 1 ? " thread" : " threads", " per rank");
  profile.device.peak_tflops = report.matmul_tflops;
  profile.device.memory_gb = physical_memory_bytes() / n / 1e9;
  profile.device.memory_bandwidth_gbs = report.memory_bandwidth_gbs;
  profile.device.elementwise_gbs = report.elementwise_gbs;
  profile.device.matmul_efficiency = 1.0;
  profile.device.attention_efficiency =
      std::min(1.0, report.attention_tflops / report.matmul_tflops);
  profile.device.blockwise_attention_efficiency =
      std::min(1.0, report.blockwise_attention_tflops / report.matmul_tflops);
  profile.device.precision = "fp32";
  if (n > 1) {
    profile.network.intra_node_gbs = report.allreduce_bandwidth_gbs;
    profile.network.inter_node_gbs = report.allreduce_bandwidth_gbs;
    profile.network.latency_us = report.allreduce_latency_us;
    profile.network.intra_node_latency_us = report.allreduce_latency_us;
  } else {
    profile.network.intra_node_gbs = report.memory_bandwidth_gbs;
    profile.network.inter_node_gbs = report.memory_bandwidth_gbs;
    profile.network.latency_us = 1.0;
  }
  return report;
}

std::string calibration_to_text(const CalibrationReport& report) {
  std::ostringstream out;
  const int n = static_cast<int>(report.profile.devices_per_node);
  out << "calibrated " << n << (n == 1 ? " rank" : " ranks") << " with " << report.threads_per_rank
      << (report.threads_per_rank == 1 ? " thread" : " threads") << " each:\n"
      << "  float32 matmul      " << fixed(report.matmul_tflops * 1e3, 2)
      << " GFLOP/s per rank (the slowest rank, all computing)\n"
      << "  attention matmuls   " << fixed(report.attention_tflops * 1e3, 2)
      << " GFLOP/s per rank (sets attention_efficiency "
      << fixed(report.profile.device.attention_efficiency, 3) << ")\n"
      << "  blockwise attention " << fixed(report.blockwise_attention_tflops * 1e3, 2)
      << " GFLOP/s per rank, forward + backward (sets blockwise_attention_efficiency "
      << fixed(report.profile.device.blockwise_attention_efficiency, 3) << ")\n"
      << "  memory bandwidth    " << fixed(report.memory_bandwidth_gbs, 2)
      << " GB/s per rank (c = a + b, all ranks at once)\n"
      << "  elementwise kernels " << fixed(report.elementwise_gbs, 2)
      << " GB/s per rank (LayerNorm, softmax, GELU; sets elementwise_gbs)\n";
  if (n > 1) {
    out << "  all-reduce          " << fixed(report.allreduce_latency_us, 2)
        << " us per ring step, " << fixed(report.allreduce_bandwidth_gbs, 2)
        << " GB/s (these set [network])\n"
        << "  point-to-point      " << fixed(report.p2p_latency_us, 2) << " us, "
        << fixed(report.p2p_bandwidth_gbs, 2) << " GB/s (ranks 0 and 1)\n";
  } else {
    out << "  one rank: no network measured; [network] set to the memory bandwidth and 1 us\n";
  }
  return out.str();
}

void save_local_profile(const std::string& path, const ClusterProfile& profile) {
  const std::filesystem::path target(path);
  std::error_code error;
  if (target.has_parent_path()) std::filesystem::create_directories(target.parent_path(), error);
  const std::string temporary = str(path, ".tmp.", getpid());
  {
    std::ofstream file(temporary);
    file << "# The local machine as measured by `strata plan calibrate`.\n"
         << cluster_to_toml(profile);
    file.close();
    STRATA_REQUIRE(file.good(), "cannot write the cluster profile '", temporary,
                   "'; give a path in a writable directory (--out, or STRATA_CACHE_DIR)");
  }
  std::filesystem::rename(temporary, target, error);
  STRATA_REQUIRE(!error, "cannot rename '", temporary, "' to '", path, "': ", error.message());
}

ClusterProfile local_profile_on_ranks(Comm& world, std::string* note) {
  const std::string path = local_profile_path();
  at::Tensor exists = at::zeros({1}, at::kInt);
  if (world.rank() == 0 && std::filesystem::is_regular_file(path)) exists.fill_(1);
  world.broadcast(exists, 0);
  ClusterProfile profile;
  if (exists.item<int>() == 1) {
    *note = str("planned with the local profile ", path);
    profile = load_cluster(path);
  } else {
    const CalibrationReport report = calibrate_local(world);
    if (world.rank() == 0) save_local_profile(path, report.profile);
    world.barrier();  // the file is complete before any rank goes on
    *note = str("measured this machine (no local profile yet) and saved it to ", path,
                "; `strata plan calibrate` measures it again");
    profile = report.profile;
  }
  // One machine, whatever number of ranks it was measured with.
  profile.name = "local";
  profile.nodes = 1;
  profile.devices_per_node = std::max<int64_t>(profile.devices_per_node, world.size());
  return profile;
}

}  // namespace strata
