// Executes a pipeline schedule on real stages.
#include "strata/train/pipeline_executor.h"

#include <chrono>
#include <deque>

#include <torch/csrc/autograd/engine.h>

#include "strata/core/error.h"
#include "strata/dist/comm.h"
#include "strata/dist/trace.h"

namespace strata {
namespace {
constexpr int kActivationTag = 0;
constexpr int kGradTag = 1;
}  // namespace

PipelineExecutor::PipelineExecutor(Schedule schedule, std::vector<GPT*> chunks, Comm& pp,
                                   std::vector<int64_t> activation_shape, at::ScalarType dtype,
                                   Trace* trace)
    : schedule_(std::move(schedule)),
      chunks_(std::move(chunks)),
      pp_(pp),
      activation_shape_(std::move(activation_shape)),
      dtype_(dtype),
      trace_(trace),
      objective_scale_(1.0 / schedule_.microbatches),
      forward_only_(true),
      rank_(pp.rank()) {
  for (const auto& actions : schedule_.ranks) {
    for (const Action& action : actions) {
      if (action.kind == ActionKind::Backward || action.kind == ActionKind::BackwardInput)
        forward_only_ = false;
    }
  }
  STRATA_CHECK(pp.size() == schedule_.stages, "pp group of ", pp.size(), " for a schedule of ",
               schedule_.stages, " stages");
  STRATA_CHECK(static_cast<int>(chunks_.size()) == schedule_.chunks, chunks_.size(),
               " chunks for a schedule of ", schedule_.chunks);
}

PipelineExecutor::MicrobatchState& PipelineExecutor::state(int microbatch, int chunk) {
  return states_[{microbatch, chunk}];
}

void PipelineExecutor::release(MicrobatchState& state) {
  state.input = at::Tensor();
  state.output = at::Tensor();
  state.output_edge = torch::autograd::Edge();
  state.output_grad = at::Tensor();
  if (state.holds_activations) --inflight_;
  state.holds_activations = false;
}

void PipelineExecutor::forward(const Action& action, const MicrobatchSource& microbatches,
                               PipelineStepStats& stats) {
  MicrobatchState& s = state(action.microbatch, action.chunk);
  GPT& chunk = *chunks_[action.chunk];
  const Microbatch batch = microbatches(action.microbatch);
  at::Tensor input = chunk.stage().first ? batch.input : s.input;
  STRATA_CHECK(input.defined(), "forward of ", to_string(action), " before its input arrived");
  // What backward starts from: the loss (and MoE's auxiliary losses) as a share of the step's
  // mean, times the loss scale.
  const double gradient_scale = objective_scale_ * loss_scale_;
  s.output = chunk.forward_stage(input, batch.targets, gradient_scale, batch.documents);
  if (chunk.stage().last) {
    stats.loss += s.output.item<double>() * objective_scale_ * loss_weight_;
    s.output = s.output * (gradient_scale * loss_weight_);
  }
  s.holds_activations = true;
  stats.peak_inflight = std::max(stats.peak_inflight, ++inflight_);
  if (forward_only_ && chunk.stage().last) release(s);  // nothing is sent on
}

void PipelineExecutor::backward(const Action& action, bool defer_weight_grads) {
  MicrobatchState& s = state(action.microbatch, action.chunk);
  STRATA_CHECK(s.output.defined() || s.output_edge.is_valid(), "backward of ", to_string(action),
               " before its forward");
  const bool last = chunks_[action.chunk]->stage().last;
  STRATA_CHECK(last || s.output_grad.defined(), "backward of ", to_string(action),
               " before its output gradient arrived");
  {
    std::unique_ptr<DeferWeightGrads> defer;
    if (defer_weight_grads) defer = std::make_unique<DeferWeightGrads>(s.deferred);
    if (last) {
      s.output.backward();
    } else if (s.output.defined()) {
      s.output.backward(s.output_grad);
    } else {  // sent: from its place in the graph, as Tensor::backward does
      torch::autograd::Engine::get_default_engine().execute(
          {s.output_edge}, {s.output_grad}, /*keep_graph=*/false, /*create_graph=*/false,
          /*accumulate_grad=*/true);
    }
  }
  if (listener_) listener_->backward_done(action.chunk);
  if (s.input.defined()) s.input_grad = s.input.grad();
  s.input = at::Tensor();
  s.output = at::Tensor();
  s.output_edge = torch::autograd::Edge();
  s.output_grad = at::Tensor();
  if (!defer_weight_grads) release(s);
}

PipelineStepStats PipelineExecutor::run(const MicrobatchSource& microbatches, int64_t step) {
  using Clock = std::chrono::steady_clock;
  PipelineStepStats stats;
  states_.clear();
  inflight_ = 0;
  // Posted sends with their buffers. A buffer is dropped as soon as its send has completed
  // (checked after every action), not at the step's end: kept, the delivered messages grew a
  // rank's peak with the microbatch count, most on ZB-V's rank 0, which sends a gradient for
  // every microbatch besides its activations (docs/pipeline.md, "What a rank holds").
  struct PendingSend {
    Work work;
    at::Tensor buffer;
  };
  std::vector<PendingSend> sends;
  auto drop_delivered = [&] {
    size_t kept = 0;
    for (PendingSend& pending : sends) {
      if (pending.work.is_completed()) {
        pending.work.wait();  // returns at once; throws the send's failure, if any
      } else {
        sends[kept++] = std::move(pending);
      }
    }
    sends.resize(kept);
  };
  // Messages between two chunks of this rank (zb-v's turn at the bottom of the V), in the order
  // sent: the validated schedule receives each after its send, in the same order.
  std::deque<at::Tensor> local_activations, local_grads;
  // A message from `peer`: this rank's own, or received over pp, the wait counted.
  auto receive = [&](const Action& action, int peer, int tag, std::deque<at::Tensor>& local) {
    if (peer == rank_) {
      STRATA_CHECK(!local.empty(), to_string(action), " before its message was sent");
      at::Tensor message = std::move(local.front());
      local.pop_front();
      return message;
    }
    at::Tensor buffer = at::empty(activation_shape_, at::TensorOptions(dtype_));
    auto start = Clock::now();
    pp_.recv(buffer, peer, tag);
    stats.wait_s += std::chrono::duration<double>(Clock::now() - start).count();
    return buffer;
  };
  // `message` (contiguous) to `peer`: queued for this rank's own receive, or posted over pp and
  // kept alive until the send completes.
  auto send = [&](at::Tensor message, int peer, int tag, std::deque<at::Tensor>& local) {
    if (peer == rank_) {
      local.push_back(std::move(message));
      return;
    }
    Work work = pp_.isend(message, peer, tag);
    sends.push_back({std::move(work), std::move(message)});
  };
  Trace unused(false, 0);
  Trace& trace = trace_ ? *trace_ : unused;
  const std::vector<Action>& actions = schedule_.ranks[rank_];
  std::vector<size_t> last_gradient_action(chunks_.size(), actions.size());
  for (size_t index = 0; index < actions.size(); ++index) {
    const ActionKind kind = actions[index].kind;
    if (kind == ActionKind::Backward || kind == ActionKind::BackwardInput ||
        kind == ActionKind::BackwardWeight) {
      last_gradient_action[actions[index].chunk] = index;
    }
  }
  for (size_t index = 0; index < actions.size(); ++index) {
    const Action& action = actions[index];
    const bool last_gradient_work = index == last_gradient_action[action.chunk];
    const int peer = action.peer_stage >= 0 ? schedule_.rank_of(action.peer_stage) : -1;
    Trace::Scope scope(trace, kind_name(action.kind), step, action.microbatch);
    switch (action.kind) {
      case ActionKind::RecvActivation:
        state(action.microbatch, action.chunk).input =
            receive(action, peer, kActivationTag, local_activations).set_requires_grad(true);
        break;
      case ActionKind::RecvGrad:
        state(action.microbatch, action.chunk).output_grad =
            receive(action, peer, kGradTag, local_grads);
        break;
      case ActionKind::SendActivation: {
        MicrobatchState& s = state(action.microbatch, action.chunk);
        // Over MPI the receiver gets a copy by nature; handed over on this rank, the next
        // chunk's input is copied too: a leaf of its own graph, it must not share storage with
        // a tensor this chunk's backward reads.
        const at::Tensor output = s.output.detach();
        send(peer == rank_ ? output.clone() : output.contiguous(), peer, kActivationTag,
             local_activations);
        if (forward_only_) {
          release(s);
        } else if (s.output.requires_grad()) {
          s.output_edge = torch::autograd::impl::gradient_edge(s.output);
          s.output = at::Tensor();
        }
        break;
      }
      case ActionKind::SendGrad: {
        MicrobatchState& s = state(action.microbatch, action.chunk);
        STRATA_CHECK(s.input_grad.defined(), "no input gradient to send for ", to_string(action));
        send(s.input_grad.contiguous(), peer, kGradTag, local_grads);
        s.input_grad = at::Tensor();
        break;
      }
      case ActionKind::Forward:
        forward(action, microbatches, stats);
        break;
      case ActionKind::Backward:
        if (listener_ && last_gradient_work) listener_->last_backward_begins(action.chunk);
        backward(action, /*defer_weight_grads=*/false);
        break;
      case ActionKind::BackwardInput:
        backward(action, /*defer_weight_grads=*/true);
        break;
      case ActionKind::BackwardWeight: {
        MicrobatchState& s = state(action.microbatch, action.chunk);
        s.deferred.run();
        release(s);
        break;
      }
    }
    if (listener_ && last_gradient_work) listener_->gradients_complete(action.chunk);
    drop_delivered();
  }
  for (PendingSend& pending : sends) pending.work.wait();
  STRATA_CHECK(local_activations.empty() && local_grads.empty(),
               "messages between this rank's chunks left unreceived");
  STRATA_CHECK(inflight_ == 0, inflight_, " microbatch activations still held after the step");
  states_.clear();
  return stats;
}

}  // namespace strata
