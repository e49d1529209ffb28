// The recomputation node: an autograd Node that keeps the inputs and the function, and runs a
// nested (reentrant) backward through the function's second run.
#include "strata/model/recompute.h"

#include <ATen/core/grad_mode.h>
#include <torch/csrc/autograd/autograd.h>
#include <torch/csrc/autograd/function.h>
#include <torch/csrc/autograd/functions/utils.h>

#include "strata/core/error.h"

namespace strata {
namespace {

class RecomputeNode final : public torch::autograd::Node {
 public:
  RecomputeNode(std::vector<at::Tensor> inputs, RecomputedFunction f)
      : inputs_(std::move(inputs)), f_(std::move(f)) {}

  torch::autograd::variable_list apply(torch::autograd::variable_list&& grads) override {
    STRATA_CHECK(!inputs_.empty(), "a recomputed piece ran its backward twice");
    std::vector<at::Tensor> leaves;
    for (const at::Tensor& input : inputs_) {
      leaves.push_back(input.detach().requires_grad_(input.requires_grad()));
    }
    inputs_.clear();  // the node's memory goes with its one backward
    at::Tensor output;
    {
      at::AutoGradMode enable(true);
      output = f_(leaves, true);
    }
    torch::autograd::backward({output}, {grads[0]});
    torch::autograd::variable_list input_grads;
    for (const at::Tensor& leaf : leaves) input_grads.push_back(leaf.grad());
    return input_grads;
  }

 private:
  std::vector<at::Tensor> inputs_;
  RecomputedFunction f_;
};

}  // namespace

at::Tensor recomputed(const std::vector<at::Tensor>& inputs, RecomputedFunction f) {
  bool needs_grad = false;
  for (const at::Tensor& input : inputs) needs_grad = needs_grad || input.requires_grad();
  if (!at::GradMode::is_enabled() || !needs_grad) return f(inputs, false);
  at::Tensor output;
  {
    at::NoGradGuard no_grad;
    output = f(inputs, false);
  }
  std::vector<at::Tensor> kept;  // the values only; requires_grad remembers which had history
  for (const at::Tensor& input : inputs) {
    kept.push_back(input.detach().requires_grad_(input.requires_grad()));
  }
  auto node = std::make_shared<RecomputeNode>(std::move(kept), std::move(f));
  node->set_next_edges(torch::autograd::collect_next_edges(inputs));
  torch::autograd::set_history(output, node);
  return output;
}

}  // namespace strata
