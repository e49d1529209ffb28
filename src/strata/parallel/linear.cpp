// The linear autograd function. The queue pointer is process-wide: the CPU autograd engine
// runs a backward on the thread that called it, and a rank runs one backward at a time.
//
// A float32 forward product x W^T of at most kSkinnyRows rows (a serving step's decode rows, a
// small batch) goes through kernels/skinny_gemm.h, which streams the weight once for all rows
// and gives each row the same bits whatever other rows share the call. The other float32 CPU
// products go through kernels/tile_gemm.h when oneDNN is loaded: oneDNN picks its kernels from
// the CPU, where Debian's OpenBLAS (behind ATen's matmul) may not know the CPU and run generic
// SSE3 kernels at a fifth of the speed (docs/performance.md). Other dtypes and devices, and a
// process without oneDNN, use ATen's matmul; fp16 on CPU, and bf16 on a CPU without AMX, are
// multiplied in float32 and rounded (multiplies_in_float32 below), so their few-row products
// take the few-row kernel too.
#include "strata/parallel/linear.h"

#include <torch/csrc/autograd/custom_function.h>

#include "strata/kernels/skinny_gemm.h"
#include "strata/kernels/tile_gemm.h"

namespace strata {
namespace {

WeightGradQueue* active_queue = nullptr;

using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

// 16-bit operands on CPU multiply in float32 and the product is rounded: a product of two
// 16-bit numbers is exact in float32, so this is what a bf16 GEMM accumulating in float32
// computes. Without AMX oneDNN's float32 sgemm runs about 3x faster than its bf16 GEMM (an
// AVX-512 BF16 Xeon, 2 threads: ~250 against ~80 GFLOP/s); with AMX its bf16 GEMM runs about
// 5x faster than float32 (the `matmul` record of docs/performance.md), so bf16 stays bf16
// there. libtorch 1.13 has no CPU float16 GEMM at all. A CUDA tensor multiplies natively.
bool multiplies_in_float32(const at::Tensor& a) {
  return a.is_cpu() && cpu_multiplies_in_float32(a.scalar_type());
}

bool onednn_loaded() {
  static const bool available = preferred_tile_gemm_backend() == TileGemmBackend::onednn;
  return available;
}

// a (M, K) @ op(b) with b (N, K) when b_transposed, else (K, N); row-major matrices.
at::Tensor product(const at::Tensor& a, const at::Tensor& b, bool a_transposed, bool b_transposed) {
  if (multiplies_in_float32(a)) {
    return product(a.to(at::kFloat), b.to(at::kFloat), a_transposed, b_transposed)
        .to(a.scalar_type());
  }
  const int64_t m = a.size(a_transposed ? 1 : 0), k = a.size(a_transposed ? 0 : 1);
  const int64_t n = b.size(b_transposed ? 0 : 1);
  // The raw-pointer kernels take float32 CPU matrices whose inner sizes agree; anything else
  // goes to ATen's matmul, which also names a mismatch.
  const bool raw = a.is_cpu() && b.is_cpu() && a.scalar_type() == at::kFloat &&
                   b.scalar_type() == at::kFloat && b.size(b_transposed ? 1 : 0) == k;
  const bool few_rows = raw && !a_transposed && b_transposed && m <= kSkinnyRows;
  if (!few_rows && (!raw || !onednn_loaded() || a.numel() == 0 || b.numel() == 0)) {
    return at::matmul(a_transposed ? a.t() : a, b_transposed ? b.t() : b);
  }
  const at::Tensor ac = a.contiguous(), bc = b.contiguous();
  at::Tensor out = at::empty({m, n}, ac.options());
  if (few_rows) {
    // The few rows of a serving step (one per decoding sequence), or of a small batch.
    skinny_gemm_nt(m, n, k, ac.data_ptr<float>(), k, bc.data_ptr<float>(), k, out.data_ptr<float>(),
                   n);
    return out;
  }
  tile_gemm(m, n, k, 1.0f, TileOperand<float>{ac.data_ptr<float>(), ac.size(1), a_transposed},
            TileOperand<float>{bc.data_ptr<float>(), bc.size(1), b_transposed}, 0.0f,
            out.data_ptr<float>(), n, TileGemmBackend::onednn);
  return out;
}

// x (..., K) times a (N, K) matrix transposed, or a (K, N) matrix: (..., N).
at::Tensor rows_times(const at::Tensor& x, const at::Tensor& matrix, bool transposed) {
  auto shape = x.sizes().vec();
  shape.back() = transposed ? matrix.size(0) : matrix.size(1);
  return product(x.reshape({-1, x.size(-1)}), matrix, false, transposed).view(shape);
}

// dW = dy^T x over all leading dims.
at::Tensor weight_grad(const at::Tensor& dy, const at::Tensor& x) {
  return product(dy.reshape({-1, dy.size(-1)}), x.reshape({-1, x.size(-1)}), true, false);
}

// dW accumulated into weight.grad.
void accumulate_weight_grad(at::Tensor weight, const at::Tensor& dy, const at::Tensor& x) {
  at::NoGradGuard no_grad;
  at::Tensor dw = weight_grad(dy, x);
  if (weight.grad().defined()) {
    weight.mutable_grad().add_(dw);
  } else {
    weight.mutable_grad() = dw;
  }
}

struct LinearFunction : torch::autograd::Function<LinearFunction> {
  static at::Tensor forward(AutogradContext* ctx, const at::Tensor& x, const at::Tensor& weight) {
    ctx->save_for_backward({x, weight});
    return rows_times(x, weight, true);
  }
  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    auto saved = ctx->get_saved_variables();
    const at::Tensor& x = saved[0];
    const at::Tensor& weight = saved[1];
    const at::Tensor& dy = grads[0];
    at::Tensor dx = ctx->needs_input_grad(0) ? rows_times(dy, weight, false) : at::Tensor();
    if (!ctx->needs_input_grad(1)) return {dx, at::Tensor()};
    if (active_queue != nullptr && weight.is_leaf()) {
      // Deferred: the weight is a leaf parameter, so its gradient can be added directly.
      active_queue->push([weight, dy, x] { accumulate_weight_grad(weight, dy, x); });
      return {dx, at::Tensor()};
    }
    return {dx, weight_grad(dy, x)};
  }
};

}  // namespace

bool cpu_multiplies_in_float32(at::ScalarType dtype) {
#if defined(__x86_64__) && defined(__GNUC__)
  static const bool amx = __builtin_cpu_supports("amx-bf16");
#else
  static const bool amx = false;
#endif
  return dtype == at::kHalf || (dtype == at::kBFloat16 && !amx);
}

at::Tensor linear(const at::Tensor& x, const at::Tensor& weight) {
  return LinearFunction::apply(x, weight);
}

void WeightGradQueue::run() {
  std::vector<std::function<void()>> work;
  work.swap(work_);
  for (auto& item : work) item();
}

DeferWeightGrads::DeferWeightGrads(WeightGradQueue& queue) : previous_(active_queue) {
  active_queue = &queue;
}

DeferWeightGrads::~DeferWeightGrads() { active_queue = previous_; }

}  // namespace strata
