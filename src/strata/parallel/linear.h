// y = x W^T (its products routed by kernels/matmul.h) with a backward whose weight-gradient half
// can be deferred: the zero-bubble pipeline schedules (Qi et al. 2023) run the input gradient (B)
// as soon as the next stage needs it and the weight gradient (W) later, in what would be bubble
// time.
//
// While a WeightGradQueue is active (see DeferWeightGrads), the backward of every linear
// computes dx = dy W at once and queues dW = dy^T x; WeightGradQueue::run() adds the queued
// products into the weights' .grad. Without an active queue the backward is the ordinary one.
#pragma once
#include <ATen/ATen.h>

#include <functional>
#include <vector>

namespace strata {

// x (..., in), weight (out, in) -> (..., out).
at::Tensor linear(const at::Tensor& x, const at::Tensor& weight);

class WeightGradQueue {
 public:
  void push(std::function<void()> work) { work_.push_back(std::move(work)); }
  void run();  // runs and clears the queued weight-gradient work, in order
  bool empty() const { return work_.empty(); }

 private:
  std::vector<std::function<void()>> work_;
};

// RAII: routes the weight gradients of every linear backward run in this scope to `queue`.
class DeferWeightGrads {
 public:
  explicit DeferWeightGrads(WeightGradQueue& queue);
  ~DeferWeightGrads();
  DeferWeightGrads(const DeferWeightGrads&) = delete;
  DeferWeightGrads& operator=(const DeferWeightGrads&) = delete;

 private:
  WeightGradQueue* previous_;
};

}  // namespace strata
