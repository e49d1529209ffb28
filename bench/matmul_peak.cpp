// The float32 matmul rate this machine reaches through strata's linear layers (parallel/
// linear.h: oneDNN's sgemm when libtorch brought it, else ATen's matmul), the yardstick for
// MFU: the trainer's own probe and larger GEMMs, including the benchmark model's MLP shape,
// for 1 and 2 threads, and ATen's matmul (OpenBLAS on Debian) for comparison ("aten-"
// rows). One JSON object per line, each a measurement made at that row's thread count.
//
// The trainer's probe (strata::measure_matmul_peak_flops: best of three single 1024^3
// products) keeps its first result for the whole process, so calling it again after
// at::set_num_threads would repeat the first row's number. The "trainer-probe-1024" rows
// therefore time the same products the same way here, afresh for each thread count.
//
// --dtype bf16 measures the same products in bfloat16 (train.precision = "bf16"'s peak).
//
//   matmul_peak [--threads 1,2] [--tokens 2048] [--d-model 768] [--dtype fp32|bf16]
#include <ATen/ATen.h>
#include <ATen/Parallel.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <sstream>
#include <string>
#include <vector>

#include "strata/parallel/linear.h"

namespace {

using Clock = std::chrono::steady_clock;

struct Shape {
  const char* name;
  int64_t m, k, n;  // (m, k) @ (k, n)
};

// Best of three timed trials of (m, k) @ (k, n) after one untimed warm-up product. A trial
// repeats the product until it lasts min_trial_seconds (0.2 s keeps small shapes above the
// clock's resolution); with 0 a trial is a single product, as the trainer's probe times it.
double gemm_gflops(const Shape& shape, double min_trial_seconds, bool through_aten,
                   at::ScalarType dtype) {
  at::NoGradGuard no_grad;
  auto a = at::randn({shape.m, shape.k}).to(dtype), b = at::randn({shape.k, shape.n}).to(dtype);
  const at::Tensor weight = b.t().contiguous();  // (n, k): a linear layer's weight
  auto c = at::empty({shape.m, shape.n}, a.options());
  auto multiply = [&] {
    if (through_aten) {
      at::mm_out(c, a, b);
    } else {
      c = strata::linear(a, weight);
    }
  };
  multiply();
  const double flops = 2.0 * shape.m * shape.k * shape.n;
  double best = 0;
  for (int trial = 0; trial < 3; ++trial) {
    int64_t products = 0;
    const auto start = Clock::now();
    double elapsed = 0;
    do {
      multiply();
      ++products;
      elapsed = std::chrono::duration<double>(Clock::now() - start).count();
    } while (elapsed < min_trial_seconds);
    best = std::max(best, products * flops / elapsed);
  }
  return best / 1e9;
}

void print_row(int threads, const char* dtype_name, const Shape& shape, double gflops) {
  std::printf(
      "{\"threads\": %d, \"dtype\": \"%s\", \"shape\": \"%s\", \"m\": %lld, \"k\": %lld, "
      "\"n\": %lld, \"gflops\": %.2f}\n",
      threads, dtype_name, shape.name, static_cast<long long>(shape.m),
      static_cast<long long>(shape.k), static_cast<long long>(shape.n), gflops);
  std::fflush(stdout);
}

std::vector<int> parse_list(const char* text) {
  std::vector<int> values;
  std::stringstream stream(text);
  std::string item;
  while (std::getline(stream, item, ',')) values.push_back(std::atoi(item.c_str()));
  return values;
}

}  // namespace

int main(int argc, char** argv) {
  std::vector<int> thread_counts = {1, 2};
  int64_t tokens = 2048, d_model = 768;  // the throughput benchmark: 8 x 256 tokens, C = 768
  at::ScalarType dtype = at::kFloat;
  const char* dtype_name = "fp32";
  for (int i = 1; i + 1 < argc; i += 2) {
    if (std::strcmp(argv[i], "--threads") == 0) {
      thread_counts = parse_list(argv[i + 1]);
    } else if (std::strcmp(argv[i], "--tokens") == 0) {
      tokens = std::atoll(argv[i + 1]);
    } else if (std::strcmp(argv[i], "--d-model") == 0) {
      d_model = std::atoll(argv[i + 1]);
    } else if (std::strcmp(argv[i], "--dtype") == 0 && std::strcmp(argv[i + 1], "fp32") == 0) {
      dtype = at::kFloat, dtype_name = "fp32";
    } else if (std::strcmp(argv[i], "--dtype") == 0 && std::strcmp(argv[i + 1], "bf16") == 0) {
      dtype = at::kBFloat16, dtype_name = "bf16";
    } else {
      std::fprintf(stderr, "matmul_peak: unknown option %s\n", argv[i]);
      return 2;
    }
  }
  const Shape trainer_probe = {"trainer-probe-1024", 1024, 1024, 1024};
  const std::vector<Shape> shapes = {
      {"square-1024", 1024, 1024, 1024},
      {"mlp-up", tokens, d_model, 4 * d_model},  // activations @ fc weight^T
      {"mlp-down", tokens, 4 * d_model, d_model},
  };
  for (int threads : thread_counts) {
    if (threads < 1) {
      std::fprintf(stderr, "matmul_peak: --threads wants positive counts\n");
      return 2;
    }
    at::set_num_threads(threads);
    print_row(threads, dtype_name, trainer_probe, gemm_gflops(trainer_probe, 0.0, false, dtype));
    for (const Shape& shape : shapes) {
      print_row(threads, dtype_name, shape, gemm_gflops(shape, 0.2, false, dtype));
    }
    const Shape aten = {"aten-square-1024", 1024, 1024, 1024};
    print_row(threads, dtype_name, aten, gemm_gflops(aten, 0.2, true, dtype));
  }
  return 0;
}
