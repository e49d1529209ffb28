// How the pipeline executor tells gradient code (data parallelism) where the step's backward
// work is, so that gradient reduction can start while later actions still run. A chunk's
// gradients are complete after its last gradient action of the step (B, B without weights,
// or W) in this rank's action list.
#pragma once

namespace strata {

class BackwardListener {
 public:
  virtual ~BackwardListener() = default;
  // Before that last action when it is a full backward (B): each layer's gradients are
  // complete as soon as autograd is done with the layer.
  virtual void last_backward_begins(int chunk) = 0;
  // After every backward (B, or B without weights) of a microbatch through the chunk.
  virtual void backward_done(int chunk) = 0;
  // After that last gradient action, whatever its kind.
  virtual void gradients_complete(int chunk) = 0;
};

}  // namespace strata
