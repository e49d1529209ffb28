// Global norm, clipping and AdamW on the own shards; the gather after the update.
#include "strata/data_parallel/sharded_optimizer.h"

#include <ATen/core/grad_mode.h>

#include <algorithm>
#include <cmath>

namespace strata {

ShardedOptimizer::ShardedOptimizer(FlatBuckets& buckets, Mesh& mesh, const TrainConfig& config,
                                   bool masters, const CompressionConfig& compression,
                                   CompressedTraffic& traffic)
    : buckets_(buckets),
      mesh_(mesh),
      compression_(compression),
      traffic_(traffic),
      beta1_(config.beta1) {
  at::NoGradGuard no_grad;
  for (const Bucket& bucket : buckets_.buckets()) {
    const auto options = bucket.grad_shard.options();
    shards_.push_back({masters ? bucket.param_shard.to(options.dtype()) : at::Tensor(),
                       at::zeros({bucket.shard_numel()}, options),
                       at::zeros({bucket.shard_numel()}, options)});
  }
  std::vector<AdamW::ParamState> param_states;
  for (const Segment& segment : buckets_.segments()) {
    const Bucket& bucket = buckets_.buckets()[segment.bucket];
    const State& state = shards_[segment.bucket];
    auto piece = [&](const at::Tensor& shard) {
      return shard.narrow(0, segment.start, segment.length);
    };
    param_states.push_back({piece(masters ? state.master : bucket.param_shard),
                            piece(bucket.grad_shard), piece(state.exp_avg), piece(state.exp_avg_sq),
                            segment.parameter->weight_decay});
  }
  adamw_ = std::make_unique<AdamW>(std::move(param_states), config);
}

double ShardedOptimizer::clip_gradients(double max_norm, double unscale) {
  at::NoGradGuard no_grad;
  // Each parameter counted once: pieces split over tp each add their part, replicas over tp
  // only on tp rank 0, the tied embedding only on the first virtual stage; over the data-parallel
  // group the shards add up (stage >= 1) or are identical replicas (stage 0).
  // Local gradients (1-bit Adam) are each rank's own: no sum over the data-parallel group.
  const bool tp_first = mesh_.coords().tp == 0;
  const auto& groups = buckets_.groups();
  std::vector<at::Tensor> sums;
  for (size_t g = 0; g < groups.size(); ++g) sums.push_back(at::zeros({1}, at::kDouble));
  auto& buckets = buckets_.buckets();
  auto add = [&](const Parameter& parameter, const Bucket& bucket, const at::Tensor& piece) {
    if (parameter.pp_tied_copy) return;
    if (!parameter.spec.is_split_over(ShardAxis::Tp) && !tp_first) return;
    const size_t g =
        static_cast<size_t>(std::find(groups.begin(), groups.end(), bucket.group) - groups.begin());
    const double norm = piece.norm().item<double>();
    sums[g] += norm * norm;
  };
  if (local_) {
    for (const Bucket& bucket : buckets) {
      for (size_t i = 0; i < bucket.parameters.size(); ++i) {
        add(*bucket.parameters[i], bucket,
            bucket.grads.narrow(0, bucket.offsets[i], bucket.parameters[i]->value.numel()));
      }
    }
  } else {
    for (const Segment& segment : buckets_.segments()) {
      const Bucket& bucket = buckets[segment.bucket];
      add(*segment.parameter, bucket, bucket.grad_shard.narrow(0, segment.start, segment.length));
    }
  }
  at::Tensor sum_squares = at::zeros({1}, at::kDouble);
  for (size_t g = 0; g < groups.size(); ++g) {
    if (buckets_.zero_stage() >= 1 && !local_) groups[g]->all_reduce(sums[g], ReduceOp::Sum);
    // Expert weights are split over ep: each ep rank adds its experts.
    if (groups[g] == &mesh_.expert_dp()) mesh_.ep().all_reduce(sums[g], ReduceOp::Sum);
    sum_squares += sums[g];
  }
  mesh_.tp().all_reduce(sum_squares, ReduceOp::Sum);
  mesh_.pp().all_reduce(sum_squares, ReduceOp::Sum);
  const double norm = std::sqrt(sum_squares.item<double>()) * unscale;
  double scale = unscale;
  if (max_norm > 0 && norm > max_norm) scale *= max_norm / (norm + 1e-6);
  if (scale != 1.0) {
    for (Bucket& bucket : buckets) held_gradients(bucket).mul_(scale);
  }
  return norm;
}

bool ShardedOptimizer::gradients_overflowed() {
  at::NoGradGuard no_grad;
  // Each rank checks what it reduced and holds; the world agrees, so an inf on one tp or
  // pipeline rank skips the step everywhere.
  bool overflowed = false;
  for (Bucket& bucket : buckets_.buckets()) {
    overflowed = overflowed || !at::isfinite(held_gradients(bucket)).all().item<bool>();
  }
  at::Tensor flag = at::tensor({overflowed ? 1 : 0}, at::kInt);
  mesh_.world().all_reduce(flag, ReduceOp::Max);
  return flag.item<int>() != 0;
}

void ShardedOptimizer::step(double lr) {
  if (local_) {
    onebit_step(lr);
  } else {
    adamw_->step(lr);
  }
  parameters_from_masters();
}

void ShardedOptimizer::onebit_step(double lr) {
  at::NoGradGuard no_grad;
  auto& buckets = buckets_.buckets();
  if (!momentum_ready_) {  // the momentum so far, whole on every rank
    momentum_.clear();
    for (size_t b = 0; b < buckets.size(); ++b) {
      Bucket& bucket = buckets[b];
      const at::Tensor& own = shards_[b].exp_avg;
      if (bucket.shards == 1) {
        momentum_.push_back(own);
      } else {
        momentum_.push_back(at::empty({bucket.numel}, own.options()));
        bucket.group->all_gather(momentum_.back(), own);
      }
      if (exchange_.size() <= b) {
        exchange_.push_back(
            std::make_unique<OneBitAllReduce>(*bucket.group, bucket.numel, own.scalar_type()));
      }
      exchange_[b]->reset_errors();
    }
    momentum_ready_ = true;
  }
  for (size_t b = 0; b < buckets.size(); ++b) {
    Bucket& bucket = buckets[b];
    at::Tensor& momentum = momentum_[b];
    momentum.mul_(beta1_).add_(bucket.grads, 1.0 - beta1_);  // this rank's m_i
    exchange_[b]->all_reduce(momentum, &traffic_);           // the average, on every rank
    if (bucket.shards > 1) {
      shards_[b].exp_avg.copy_(momentum.narrow(0, bucket.shard_start(), bucket.shard_numel()));
    }
    if (buckets_.zero_stage() >= 2) free_storage(bucket.grads);
  }
  adamw_->step_with_frozen_variance(lr, compression_.start_step);
}

void ShardedOptimizer::parameters_from_masters() {
  at::NoGradGuard no_grad;
  auto& buckets = buckets_.buckets();
  for (size_t b = 0; b < buckets.size(); ++b) {
    if (shards_[b].master.defined()) buckets[b].param_shard.copy_(shards_[b].master);
  }
  // Stage 0: every rank updated everything. Stage 3: units are gathered before their next use.
  const int64_t stage = buckets_.zero_stage();
  if (stage != 1 && stage != 2) return;
  std::vector<Work> gathers;
  std::vector<at::Tensor> sources;  // MPI wants distinct buffers
  for (Bucket& bucket : buckets_.buckets()) {
    if (bucket.group->size() == 1) continue;
    sources.push_back(bucket.param_shard.clone());
    gathers.push_back(bucket.group->iall_gather(bucket.params, sources.back()));
  }
  for (Work& gather : gathers) gather.wait();
}

int64_t ShardedOptimizer::state_bytes() const {
  int64_t bytes = 0;
  for (const State& state : shards_) {
    bytes += storage_bytes(state.master) + storage_bytes(state.exp_avg) +
             storage_bytes(state.exp_avg_sq);
  }
  const auto& buckets = buckets_.buckets();
  for (size_t b = 0; b < momentum_.size(); ++b) {
    if (buckets[b].shards > 1) bytes += storage_bytes(momentum_[b]);
  }
  for (const auto& exchange : exchange_) {
    bytes += storage_bytes(exchange->worker_error()) + storage_bytes(exchange->server_error());
  }
  return bytes;
}

namespace {
using State = ShardedOptimizer::State;
// The state's tensors; master is undefined without master weights.
constexpr at::Tensor State::*kParts[] = {&State::master, &State::exp_avg, &State::exp_avg_sq};
}  // namespace

const std::vector<State>& ShardedOptimizer::begin_full_state(bool for_load) {
  at::NoGradGuard no_grad;
  full_.clear();
  const auto& buckets = buckets_.buckets();
  for (size_t b = 0; b < buckets.size(); ++b) {
    const Bucket& bucket = buckets[b];
    const State& own = shards_[b];
    if (bucket.shards == 1) {  // the own shard is the whole bucket
      full_.push_back(own);
      continue;
    }
    State full;
    for (auto part : kParts) {
      if (!(own.*part).defined()) continue;
      full.*part = at::empty({bucket.numel}, (own.*part).options());
      if (!for_load) bucket.group->all_gather(full.*part, own.*part);
    }
    full_.push_back(std::move(full));
  }
  return full_;
}

void ShardedOptimizer::end_full_state(bool loaded) {
  at::NoGradGuard no_grad;
  const auto& buckets = buckets_.buckets();
  for (size_t b = 0; b < buckets.size(); ++b) {
    const Bucket& bucket = buckets[b];
    if (!loaded || bucket.shards == 1) continue;
    const int64_t start = bucket.shard_start(), length = bucket.shard_numel();
    for (auto part : kParts) {
      if (!(shards_[b].*part).defined()) continue;
      (shards_[b].*part).copy_((full_[b].*part).narrow(0, start, length));
    }
  }
  full_.clear();
  if (loaded) {
    momentum_ready_ = false;  // 1-bit Adam's momentum comes from the loaded moments
    parameters_from_masters();
  }
}

}  // namespace strata
