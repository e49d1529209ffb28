// The one matmul-peak probe: the rate at which this process multiplies matrices the way the
// model does (routed_product, kernels/matmul.h: activations (m, k) times a linear layer's
// weight (n, k) transposed), on the shapes of a transformer layer. The trainer's MFU, `strata
// plan calibrate`'s peak and bench/matmul_peak all call it, so they measure the same products.
// They differ in the shapes and in how a call is timed: the trainer takes the fastest of its own
// run's forward shapes, each the best of three calls (train/trainer.h, run_peak_shapes);
// calibrate sums matmul_peak_shapes(), each the median trial of every rank at once, the
// slowest rank's.
#pragma once
#include <ATen/ATen.h>

#include <cstdint>
#include <functional>
#include <vector>

namespace strata {

struct MatmulShape {
  int64_t m, k, n;  // (m, k) times the transpose of a (n, k) weight

  bool operator==(const MatmulShape& other) const {
    return m == other.m && k == other.k && n == other.n;
  }
};

// tokens x d_model times the up-projection, the down-projection, and a square product:
// (512, 512) x (512, 2048), (512, 2048) x (2048, 512), (1024, 1024) x (1024, 1024).
std::vector<MatmulShape> matmul_peak_shapes();

// Seconds one call of `product` takes, as the caller times it.
using ProductTimer = std::function<double(const std::function<void()>& product)>;

// The default timer: one untimed warm-up call (threads, caches), then the fastest of three.
double fastest_of_three_calls(const std::function<void()>& product);

// FLOP/s of routed products of `dtype` over `shapes`: their FLOPs summed over the seconds the
// timer gives for one product of each, summed (random operands).
double measure_matmul_peak(at::ScalarType dtype = at::kFloat,
                           const ProductTimer& timer = fastest_of_three_calls,
                           const std::vector<MatmulShape>& shapes = matmul_peak_shapes());

}  // namespace strata
