// The linear autograd function. The queue pointer is process-wide: the CPU autograd engine
// runs a backward on the thread that called it, and a rank runs one backward at a time. Every
// product, forward and backward, goes through kernels/matmul.h, which picks its kernel.
#include "strata/parallel/linear.h"

#include <torch/csrc/autograd/custom_function.h>

#include "strata/kernels/matmul.h"

namespace strata {
namespace {

WeightGradQueue* active_queue = nullptr;

using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

// x (..., K) times a (N, K) matrix transposed, or a (K, N) matrix: (..., N).
at::Tensor rows_times(const at::Tensor& x, const at::Tensor& matrix, bool transposed) {
  auto shape = x.sizes().vec();
  shape.back() = transposed ? matrix.size(0) : matrix.size(1);
  return routed_product(x.reshape({-1, x.size(-1)}), matrix, false, transposed).view(shape);
}

// dW = dy^T x over all leading dims.
at::Tensor weight_grad(const at::Tensor& dy, const at::Tensor& x) {
  return routed_product(dy.reshape({-1, dy.size(-1)}), x.reshape({-1, x.size(-1)}), true, false);
}

// dW accumulated into weight.grad, in place where the route allows (routed_product_add).
void accumulate_weight_grad(at::Tensor weight, const at::Tensor& dy, const at::Tensor& x) {
  at::NoGradGuard no_grad;
  if (weight.grad().defined()) {
    routed_product_add(weight.mutable_grad(), dy.reshape({-1, dy.size(-1)}),
                       x.reshape({-1, x.size(-1)}), true, false);
  } else {
    weight.mutable_grad() = weight_grad(dy, x);
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

at::Tensor linear(const at::Tensor& x, const at::Tensor& weight) {
  return LinearFunction::apply(x, weight);
}

void WeightGradQueue::run() {
  std::vector<std::function<void()>> work;
  work.swap(work_);
  // Each item's dy and x are freed as soon as its product has run, not after the last one.
  for (auto& item : work) {
    item();
    item = nullptr;
  }
}

DeferWeightGrads::DeferWeightGrads(WeightGradQueue& queue) : previous_(active_queue) {
  active_queue = &queue;
}

DeferWeightGrads::~DeferWeightGrads() { active_queue = previous_; }

}  // namespace strata
