// Activation recomputation: a piece of the forward whose intermediate tensors are not kept for
// the backward. recomputed(inputs, f) runs f without recording autograd history and returns
// its output with a single autograd node as history, which keeps only the inputs. When the
// backward reaches that node it runs f again on them with history, back-propagates the
// incoming gradient through that graph (the gradients of f's parameters accumulate there, as
// in an ordinary backward) and hands on the inputs' gradients.
//
// f must compute the same values both times: strata's forward draws no random numbers, so
// there is no generator state to replay, and the second run is bit-identical. Collectives
// inside f run again in the backward, in the same order on every rank, as the forward ran
// them. f's second argument says which run it is (true: the recomputation), for side effects
// that must happen once (statistics).
#pragma once
#include <ATen/ATen.h>

#include <functional>
#include <vector>

namespace strata {

using RecomputedFunction =
    std::function<at::Tensor(const std::vector<at::Tensor>& inputs, bool recomputing)>;

// Without grad mode, or when no input requires grad, simply f(inputs, false).
at::Tensor recomputed(const std::vector<at::Tensor>& inputs, RecomputedFunction f);

}  // namespace strata
