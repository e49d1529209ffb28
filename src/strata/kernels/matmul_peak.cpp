// The matmul-peak probe (matmul_peak.h).
#include "strata/kernels/matmul_peak.h"

#include <algorithm>
#include <chrono>

#include "strata/kernels/matmul.h"

namespace strata {

std::vector<MatmulShape> matmul_peak_shapes() {
  return {{512, 512, 2048}, {512, 2048, 512}, {1024, 1024, 1024}};
}

double fastest_of_three_calls(const std::function<void()>& product) {
  using Clock = std::chrono::steady_clock;
  product();
  double fastest = 0;
  for (int trial = 0; trial < 3; ++trial) {
    const auto start = Clock::now();
    product();
    const double seconds = std::chrono::duration<double>(Clock::now() - start).count();
    fastest = trial == 0 ? seconds : std::min(fastest, seconds);
  }
  return fastest;
}

double measure_matmul_peak(at::ScalarType dtype, const ProductTimer& timer,
                           const std::vector<MatmulShape>& shapes) {
  at::NoGradGuard no_grad;
  double flops = 0, seconds = 0;
  for (const MatmulShape& shape : shapes) {
    const at::Tensor x = at::randn({shape.m, shape.k}).to(dtype);
    const at::Tensor weight = at::randn({shape.n, shape.k}).to(dtype);
    seconds += timer([&] { routed_product(x, weight, false, true); });
    flops += 2.0 * static_cast<double>(shape.m) * static_cast<double>(shape.k) *
             static_cast<double>(shape.n);
  }
  return flops / seconds;
}

}  // namespace strata
