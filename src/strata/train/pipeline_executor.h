// The pipeline executor: walks this rank's action list of a schedule (pipeline/schedule.h)
// on its model chunks, with blocking receives and non-blocking sends over the pp group.
// The same executor runs every layout: with pp = 1 the 1F1B list is simply F, B per
// microbatch.
//
// Bookkeeping per (microbatch, chunk): the chunk's input (a leaf that collects the input
// gradient, except on the first virtual stage whose input is token ids), its output, and the
// output gradient received from the next stage. A microbatch's activations are held from its
// forward until its backward (or, under zero-bubble, its deferred weight gradient) is done,
// and dropped right after: the executor counts the pairs in flight and reports the peak.
#pragma once
#include <ATen/ATen.h>
#include <torch/csrc/autograd/edge.h>

#include <functional>
#include <map>
#include <memory>
#include <vector>

#include "strata/model/gpt.h"
#include "strata/parallel/linear.h"
#include "strata/pipeline/backward_listener.h"
#include "strata/pipeline/schedule.h"

namespace strata {

class Comm;
class Trace;

struct PipelineStepStats {
  double loss = 0;            // mean of the microbatch losses (last stage only; 0 elsewhere)
  int64_t peak_inflight = 0;  // most (microbatch, chunk) activation sets held at once
  double wait_s = 0;          // time blocked in receives (this rank's bubble)
};

// One microbatch's tokens as this rank's chunks see them (micro_batch, tokens) int64 each:
// the first stage's input ids and the last stage's targets, and for every stage the input
// tokens' documents (data.document_mask; ForwardContext::documents), else undefined.
struct Microbatch {
  at::Tensor input, targets;
  at::Tensor documents;
};
using MicrobatchSource = std::function<Microbatch(int64_t microbatch)>;

class PipelineExecutor {
 public:
  // chunks[c] is this rank's chunk c (virtual stage schedule.virtual_stage(pp rank, c); a
  // message between two chunks of this rank is handed over without MPI). activation_shape is
  // one microbatch's activation between stages: (micro_batch, tokens per tp rank, d_model).
  // A schedule without backward actions (make_forward_only_schedule) runs forward only, for
  // evaluation: activations are dropped as soon as they are sent. trace may be null.
  PipelineExecutor(Schedule schedule, std::vector<GPT*> chunks, Comm& pp,
                   std::vector<int64_t> activation_shape, at::ScalarType dtype, Trace* trace);

  // Runs one step; microbatches(mb) returns microbatch mb's tokens.
  // The objective of each microbatch (its loss, and the MoE auxiliary losses) enters the
  // backward scaled by 1 / microbatches, so the gradients are those of the mean; this is the
  // one place that scaling happens. `step` only labels trace events.
  PipelineStepStats run(const MicrobatchSource& microbatches, int64_t step);
  void set_listener(BackwardListener* listener) { listener_ = listener; }  // may be null
  // Backward starts from the loss times `scale` (fp16's loss scale; the gradients come out
  // multiplied by it). The reported loss is not scaled.
  void set_loss_scale(double scale) { loss_scale_ = scale; }
  // The language-model loss (not the MoE auxiliary losses) enters the backward and the
  // reported loss times `weight`: with a loss mask, the step's target tokens / the tokens of
  // them that carry loss, which turns the loss's mean over all targets into the mean over
  // those that carry loss (GPT::kIgnoredTarget). 1 without a mask.
  void set_loss_weight(double weight) { loss_weight_ = weight; }

 private:
  // What one microbatch holds on one chunk between its forward and its backward.
  struct MicrobatchState {
    at::Tensor input;   // leaf collecting the input gradient (not on virtual stage 0)
    at::Tensor output;  // activation to send on, or the loss on the last virtual stage
    // Once the activation is sent: its place in the graph, where the backward starts. The
    // sent tensor itself is not needed for the backward, and is freed once delivered (as
    // Megatron-LM's deallocate_output_tensor does): one activation-sized tensor less per
    // microbatch held on every chunk but the last.
    torch::autograd::Edge output_edge;
    at::Tensor output_grad;  // received from the next virtual stage
    at::Tensor input_grad;   // to send to the previous virtual stage
    WeightGradQueue deferred;
    bool holds_activations = false;
  };
  MicrobatchState& state(int microbatch, int chunk);
  void forward(const Action& action, const MicrobatchSource& microbatches,
               PipelineStepStats& stats);
  void backward(const Action& action, bool defer_weight_grads);
  void release(MicrobatchState& state);

  Schedule schedule_;
  std::vector<GPT*> chunks_;
  Comm& pp_;
  std::vector<int64_t> activation_shape_;
  at::ScalarType dtype_;
  Trace* trace_;
  BackwardListener* listener_ = nullptr;
  double objective_scale_;  // 1 / microbatches
  double loss_scale_ = 1.0;
  double loss_weight_ = 1.0;
  bool forward_only_;
  int rank_;
  std::map<std::pair<int, int>, MicrobatchState> states_;
  int64_t inflight_ = 0;
};

}  // namespace strata
