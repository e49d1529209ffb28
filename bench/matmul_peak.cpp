// The float32 matmul rate this machine reaches through strata's products (kernels/matmul.h:
// the product its linear layers run), the yardstick for MFU: the one matmul-peak probe
// (kernels/matmul_peak.h) exactly as the trainer's MFU and `strata plan calibrate` run it
// ("probe": the layer shapes, fastest of three calls), the same probe on single larger shapes,
// including the benchmark model's MLP, for 1 and 2 threads, and ATen's matmul (OpenBLAS on
// Debian) for comparison ("aten-" rows). One JSON object per line, each a measurement made at
// that row's thread count.
//
// The trainer keeps its probe's first result for the whole process, so calling it again after
// at::set_num_threads would repeat the first row's number; here the probe runs afresh for each
// thread count.
//
// --dtype bf16 measures the same products in bfloat16 (train.precision = "bf16"'s peak).
//
// Before measuring at a thread count, the product probe (kernels/product_probe.h) chooses the
// route of these forward products at that thread count, as a run does at start-up (not cached:
// each invocation probes); a "route" row names the choice.
//
//   matmul_peak [--threads 1,2] [--tokens 2048] [--d-model 768] [--dtype fp32|bf16]
#include <ATen/ATen.h>
#include <ATen/Parallel.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <sstream>
#include <string>
#include <vector>

#include "strata/kernels/matmul_peak.h"
#include "strata/kernels/product_probe.h"

namespace {

using Clock = std::chrono::steady_clock;

struct Shape {
  const char* name;
  int64_t m, k, n;  // (m, k) @ (k, n)
};

// Best of three timed trials of one call after one untimed warm-up call. A trial repeats the
// call until it lasts 0.2 s, which keeps small shapes above the clock's resolution.
double seconds_per_call(const std::function<void()>& product) {
  product();
  double best = 0;
  for (int trial = 0; trial < 3; ++trial) {
    int64_t calls = 0;
    const auto start = Clock::now();
    double elapsed = 0;
    do {
      product();
      ++calls;
      elapsed = std::chrono::duration<double>(Clock::now() - start).count();
    } while (elapsed < 0.2);
    best = trial == 0 ? elapsed / calls : std::min(best, elapsed / calls);
  }
  return best;
}

// ATen's matmul of (m, k) @ (k, n), for comparison, in GFLOP/s.
double aten_gflops(const Shape& shape, at::ScalarType dtype) {
  auto a = at::randn({shape.m, shape.k}).to(dtype), b = at::randn({shape.k, shape.n}).to(dtype);
  auto c = at::empty({shape.m, shape.n}, a.options());
  return 2.0 * shape.m * shape.k * shape.n / seconds_per_call([&] { at::mm_out(c, a, b); }) / 1e9;
}

// One row; a shape's sizes when the row measured one shape.
void print_row(int threads, const char* dtype_name, const char* name, double gflops,
               const Shape* shape = nullptr) {
  std::printf("{\"threads\": %d, \"dtype\": \"%s\", \"shape\": \"%s\", ", threads, dtype_name,
              name);
  if (shape != nullptr) {
    std::printf("\"m\": %lld, \"k\": %lld, \"n\": %lld, ", static_cast<long long>(shape->m),
                static_cast<long long>(shape->k), static_cast<long long>(shape->n));
  }
  std::printf("\"gflops\": %.2f}\n", gflops);
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
    std::vector<strata::ProductShape> forwards;
    for (const strata::MatmulShape& shape : strata::matmul_peak_shapes()) {
      forwards.push_back({shape.m, shape.n, shape.k, false, true});
    }
    for (const Shape& shape : shapes) forwards.push_back({shape.m, shape.n, shape.k, false, true});
    const strata::ProductProbe probe = strata::probe_products(dtype, forwards);
    probe.use();
    for (const strata::ProbedClass& probed : probe.classes) {
      std::printf("{\"threads\": %d, \"dtype\": \"%s\", \"shape\": \"route\", \"route\": \"%s\"}\n",
                  threads, dtype_name, strata::route_name(probed.route).c_str());
    }
    print_row(threads, dtype_name, "probe", strata::measure_matmul_peak(dtype) / 1e9);
    for (const Shape& shape : shapes) {
      const double flops =
          strata::measure_matmul_peak(dtype, seconds_per_call, {{shape.m, shape.k, shape.n}});
      print_row(threads, dtype_name, shape.name, flops / 1e9, &shape);
    }
    const Shape aten = {"aten-square-1024", 1024, 1024, 1024};
    print_row(threads, dtype_name, aten.name, aten_gflops(aten, dtype), &aten);
  }
  return 0;
}
