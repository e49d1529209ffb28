// Wiring the data-parallel parts to the model chunks and the pipeline executor.
#include "strata/data_parallel/data_parallel.h"

#include <ATen/core/grad_mode.h>
#include <torch/csrc/autograd/function.h>
#include <torch/csrc/autograd/functions/utils.h>

#include <functional>

#include "strata/core/precision.h"

namespace strata {
namespace {

// An identity autograd node whose backward calls `notify` when the gradient reaches it.
class NotifyBackward final : public torch::autograd::Node {
 public:
  explicit NotifyBackward(std::function<void()> notify) : notify_(std::move(notify)) {}
  torch::autograd::variable_list apply(torch::autograd::variable_list&& grads) override {
    notify_();
    return std::move(grads);
  }

 private:
  std::function<void()> notify_;
};

at::Tensor notify_on_backward(const at::Tensor& x, std::function<void()> notify) {
  if (!at::GradMode::is_enabled() || !x.requires_grad()) return x;
  auto node = std::make_shared<NotifyBackward>(std::move(notify));
  node->set_next_edges(torch::autograd::collect_next_edges(x));
  at::Tensor y = x.variable_data();  // the same values, with the node as its history
  torch::autograd::set_history(y, node);
  return y;
}

// The unit after `unit` in `order`, or -1.
int64_t next_in(const std::vector<int64_t>& order, int64_t unit) {
  for (size_t i = 0; i + 1 < order.size(); ++i) {
    if (order[i] == unit) return order[i + 1];
  }
  return -1;
}

}  // namespace

// Wraps one chunk's units. A unit's parameters are gathered (stage 3) before its forward and
// freed after it; the identity node at its output fires when backward reaches the unit
// (gather it again, prefetch the next, poke the reductions in flight), the one at its input
// when backward has left it (free it; its gradients are complete). Unit 0 spans the chunk
// and its embedding's gradient is backward's last work: it is left at backward_done.
class DataParallel::ChunkWrapper final : public UnitWrapper {
 public:
  ChunkWrapper(DataParallel& owner, int chunk, UnitOrder order)
      : owner_(owner), chunk_(chunk), order_(std::move(order)) {}

  at::Tensor enter(int64_t unit, const at::Tensor& input) override {
    owner_.gather_.require(chunk_, unit);
    const int64_t next = next_in(order_.forward, unit);
    if (next >= 0) owner_.gather_.prefetch(chunk_, next);
    if (unit == GPT::kOuterUnit) return input;
    return notify_on_backward(input, [this, unit] { backward_left(unit, true); });
  }

  at::Tensor leave(int64_t unit, const at::Tensor& output) override {
    owner_.gather_.release(chunk_, unit);
    return notify_on_backward(output, [this, unit] {
      owner_.reduction_.progress();
      owner_.gather_.require(chunk_, unit);
      const int64_t next = next_in(order_.backward, unit);
      if (next >= 0) owner_.gather_.prefetch(chunk_, next);
    });
  }

  void backward_left(int64_t unit, bool during_backward) {
    owner_.gather_.release(chunk_, unit);
    owner_.reduction_.unit_complete(chunk_, unit, during_backward);
  }

 private:
  DataParallel& owner_;
  int chunk_;
  UnitOrder order_;
};

DataParallel::DataParallel(const std::vector<GPT*>& chunks, Mesh& mesh, const Config& config,
                           Comm* tied)
    : mesh_(mesh),
      chunks_(chunks),
      buckets_(chunks, mesh, config.parallel.zero, config.parallel.bucket_mb,
               master_dtype(config.train.precision)),
      reduction_(buckets_, mesh, tied, config.compression, traffic_),
      gather_(buckets_, config.compression.zero_gather, traffic_),
      optimizer_(buckets_, mesh, config.train, mixed_precision(config.train.precision),
                 config.compression, traffic_),
      masters_(mixed_precision(config.train.precision)) {
  for (size_t c = 0; c < chunks_.size(); ++c) {
    wrappers_.push_back(
        std::make_unique<ChunkWrapper>(*this, static_cast<int>(c), buckets_.unit_orders()[c]));
    chunks_[c]->wrap_units(wrappers_.back().get());
  }
}

DataParallel::~DataParallel() {
  for (GPT* chunk : chunks_) chunk->wrap_units(nullptr);
}

void DataParallel::begin_step(int64_t step) {
  traffic_.reset();
  gather_.release_all();
  reduction_.begin_step(step);
  optimizer_.set_local_gradients(reduction_.local_gradients());
}

void DataParallel::finish_gradients() {
  reduction_.finish();
  gather_.release_all();
}

double DataParallel::clip_gradients(double max_norm, double unscale) {
  return optimizer_.clip_gradients(max_norm, unscale);
}

bool DataParallel::gradients_overflowed() { return optimizer_.gradients_overflowed(); }

void DataParallel::step(double lr) { optimizer_.step(lr); }

void DataParallel::last_backward_begins(int chunk) { reduction_.arm(chunk); }

void DataParallel::backward_done(int chunk) {
  wrappers_[chunk]->backward_left(GPT::kOuterUnit, /*during_backward=*/false);
}

void DataParallel::gradients_complete(int chunk) { reduction_.chunk_complete(chunk); }

std::vector<ShardedTensor> DataParallel::checkpoint_tensors(bool for_load) {
  at::NoGradGuard no_grad;
  // Parameters are saved from the master weights where there are (mixed precision), so a
  // checkpoint holds float32 values whatever the run computed in.
  if (!masters_) gather_.begin_full_values(for_load);
  const auto& state = optimizer_.begin_full_state(for_load);
  // Replicas are written once: by rank 0 of the parameter's data-parallel group (dp x cp, or
  // expert_dp for experts), by tp rank 0 unless split over tp, and the tied embedding by the
  // first virtual pipeline stage.
  std::vector<ShardedTensor> tensors;
  const auto& buckets = buckets_.buckets();
  for (size_t b = 0; b < buckets.size(); ++b) {
    const Bucket& bucket = buckets[b];
    for (size_t i = 0; i < bucket.parameters.size(); ++i) {
      const Parameter& parameter = *bucket.parameters[i];
      const bool writer = bucket.group->rank() == 0 &&
                          (parameter.spec.is_split_over(ShardAxis::Tp) || mesh_.coords().tp == 0) &&
                          !parameter.pp_tied_copy;
      const int64_t n = parameter.value.numel();
      const auto shape = parameter.value.sizes();
      auto view = [&](const at::Tensor& flat) {
        return flat.narrow(0, bucket.offsets[i], n).view(shape);
      };
      for (auto [prefix, tensor] :
           {std::pair<std::string, at::Tensor>{
                "", masters_ ? view(state[b].master) : parameter.value.detach()},
            {"optimizer.exp_avg.", view(state[b].exp_avg)},
            {"optimizer.exp_avg_sq.", view(state[b].exp_avg_sq)}}) {
        for (auto& slice :
             sharded_slices(prefix + parameter.name, tensor, parameter.spec, writer)) {
          tensors.push_back(std::move(slice));
        }
      }
    }
  }
  return tensors;
}

void DataParallel::checkpoint_done(bool loaded) {
  if (!masters_) gather_.end_full_values(loaded);
  optimizer_.end_full_state(loaded);  // loaded masters: the parameters are set from them
}

}  // namespace strata
