// The float32 matmul rate this machine reaches through libtorch, the yardstick for MFU: the
// trainer's own probe (strata::measure_matmul_peak_flops, 512^3) and larger GEMMs, including
// the benchmark model's MLP shape, for 1 and 2 threads. One JSON object per line.
//
//   matmul_peak [--threads 1,2] [--tokens 2048] [--d-model 768]
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

#include "strata/train/trainer.h"

namespace {

using Clock = std::chrono::steady_clock;

struct Shape {
  const char* name;
  int64_t m, k, n;  // (m, k) @ (k, n)
};

// Best of a few (m, k) @ (k, n) products after one untimed warm-up product; repeats inside a
// trial until it lasts 0.2 s, so small shapes are not timed at the clock's resolution.
double gemm_gflops(const Shape& shape) {
  auto a = at::randn({shape.m, shape.k}), b = at::randn({shape.k, shape.n});
  auto c = at::empty({shape.m, shape.n});
  at::mm_out(c, a, b);
  const double flops = 2.0 * shape.m * shape.k * shape.n;
  double best = 0;
  for (int trial = 0; trial < 3; ++trial) {
    int64_t products = 0;
    const auto start = Clock::now();
    double elapsed = 0;
    do {
      at::mm_out(c, a, b);
      ++products;
      elapsed = std::chrono::duration<double>(Clock::now() - start).count();
    } while (elapsed < 0.2);
    best = std::max(best, products * flops / elapsed);
  }
  return best / 1e9;
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
  for (int i = 1; i + 1 < argc; i += 2) {
    if (std::strcmp(argv[i], "--threads") == 0) {
      thread_counts = parse_list(argv[i + 1]);
    } else if (std::strcmp(argv[i], "--tokens") == 0) {
      tokens = std::atoll(argv[i + 1]);
    } else if (std::strcmp(argv[i], "--d-model") == 0) {
      d_model = std::atoll(argv[i + 1]);
    } else {
      std::fprintf(stderr, "matmul_peak: unknown option %s\n", argv[i]);
      return 2;
    }
  }
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
    std::printf("{\"threads\": %d, \"shape\": \"trainer-512\", \"gflops\": %.2f}\n", threads,
                strata::measure_matmul_peak_flops() / 1e9);
    std::fflush(stdout);
    for (const Shape& shape : shapes) {
      std::printf(
          "{\"threads\": %d, \"shape\": \"%s\", \"m\": %lld, \"k\": %lld, \"n\": %lld, "
          "\"gflops\": %.2f}\n",
          threads, shape.name, static_cast<long long>(shape.m), static_cast<long long>(shape.k),
          static_cast<long long>(shape.n), gemm_gflops(shape));
      std::fflush(stdout);
    }
  }
  return 0;
}
