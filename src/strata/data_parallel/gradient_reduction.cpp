// Bucketed gradient reduction overlapped with the last backward.
#include "strata/data_parallel/gradient_reduction.h"

#include <ATen/core/grad_mode.h>

#include <algorithm>

namespace strata {

GradientReduction::GradientReduction(FlatBuckets& buckets, Mesh& mesh, Comm* tied,
                                     const CompressionConfig& compression,
                                     CompressedTraffic& traffic)
    : buckets_(buckets),
      mesh_(mesh),
      tied_(tied),
      compression_(compression),
      traffic_(traffic),
      wire_dtype_(at::kFloat) {
  in_flight_.resize(buckets_.buckets().size());
  if (compression_.gradients == GradientCompression::powersgd) {
    for (Bucket& bucket : buckets_.buckets()) {
      powersgd_of_.push_back(bucket.group->size() > 1
                                 ? std::make_unique<PowerSgd>(bucket, compression_.powersgd_rank)
                                 : nullptr);
    }
  }
  complete_.resize(buckets_.chunks());
  for (int c = 0; c < buckets_.chunks(); ++c) complete_[c].assign(buckets_.units(c), false);
  armed_.assign(buckets_.chunks(), false);
}

void GradientReduction::begin_step(int64_t step) {
  at::NoGradGuard no_grad;
  auto& buckets = buckets_.buckets();
  const bool compressing = step >= compression_.start_step;
  const GradientCompression mode = compressing ? compression_.gradients : GradientCompression::none;
  wire_dtype_ = buckets.empty() ? at::kFloat : buckets.front().grads.scalar_type();
  if (mode == GradientCompression::bf16) wire_dtype_ = at::kBFloat16;
  powersgd_ = mode == GradientCompression::powersgd;
  local_ = mode == GradientCompression::onebit;
  for (size_t b = 0; b < buckets.size(); ++b) {
    if (!has_storage(buckets[b].grads)) allocate_storage(buckets[b].grads);
    buckets[b].grads.zero_();
    in_flight_[b] = InFlight();
    in_flight_[b].units_pending = static_cast<int64_t>(buckets[b].units.size());
  }
  for (auto& units : complete_) std::fill(units.begin(), units.end(), false);
  std::fill(armed_.begin(), armed_.end(), false);
  launch_order_.clear();
  overlapped_ = 0;
}

void GradientReduction::arm(int chunk) { armed_[chunk] = true; }

void GradientReduction::unit_complete(int chunk, int64_t unit, bool during_backward) {
  if (!armed_[chunk] || complete_[chunk][unit]) return;
  complete_[chunk][unit] = true;
  for (size_t b : buckets_.buckets_of_unit(chunk, unit)) {
    if (--in_flight_[b].units_pending == 0) launch(b, during_backward);
  }
}

void GradientReduction::chunk_complete(int chunk) {
  armed_[chunk] = true;
  for (int64_t unit = 0; unit < buckets_.units(chunk); ++unit) {
    unit_complete(chunk, unit, /*during_backward=*/false);
  }
  armed_[chunk] = false;
}

void GradientReduction::launch(size_t b, bool during_backward) {
  // Average over the group, as if one rank had run the whole global batch. Every member
  // launches the same buckets in the same order: their schedules are the same.
  Bucket& bucket = buckets_.buckets()[b];
  InFlight& flight = in_flight_[b];
  flight.launched = true;
  if (during_backward && !local_) ++overlapped_;  // 1-bit Adam reduces nothing here
  launch_order_.push_back(b);
  if (bucket.group->size() == 1) return;
  if (local_) {  // 1-bit Adam exchanges the momentum instead
    add_uncompressed(bucket);
    return;
  }
  if (powersgd_) {
    add_uncompressed(bucket);
    powersgd_of_[b]->start(traffic_);
    return;
  }
  const int64_t stage = buckets_.zero_stage();
  const bool converted = bucket.grads.scalar_type() != wire_dtype_;
  if (converted) flight.wire = bucket.grads.to(wire_dtype_);
  at::Tensor& sent = converted ? flight.wire : bucket.grads;
  auto post = [&] {
    if (stage == 0) {
      flight.reduction = bucket.group->iall_reduce(sent, ReduceOp::Avg);
      return;
    }
    // Stages 2 and 3 reduce straight into the shard, which has storage of its own.
    if (stage == 1 || converted) flight.reduced = at::empty({bucket.shard_numel()}, sent.options());
    flight.reduction = bucket.group->ireduce_scatter(
        flight.reduced.defined() ? flight.reduced : bucket.grad_shard, sent, ReduceOp::Avg);
  };
  if (!converted) {
    post();
    return;
  }
  add_uncompressed(bucket);
  traffic_.count_sent(*bucket.group, post);
}

void GradientReduction::add_uncompressed(const Bucket& bucket) {
  const int64_t element = bucket.grads.element_size(), n = bucket.group->size();
  if (buckets_.zero_stage() == 0) {
    traffic_.add_uncompressed(
        CommKind::AllReduce,
        all_reduce_bytes(bucket.numel, element, static_cast<int>(n), bucket.group->rank()));
  } else {
    traffic_.add_uncompressed(CommKind::ReduceScatter,
                              (bucket.numel - bucket.shard_numel()) * element);
  }
}

void GradientReduction::progress() {
  for (size_t b : launch_order_) {
    if (in_flight_[b].reduction.valid()) in_flight_[b].reduction.is_completed();
    if (powersgd_ && powersgd_of_[b]) powersgd_of_[b]->progress();
  }
}

void GradientReduction::wait(size_t b) {
  Bucket& bucket = buckets_.buckets()[b];
  InFlight& flight = in_flight_[b];
  if (local_) return;  // the full gradients stay for the optimizer (stage 2/3: it frees them)
  if (powersgd_ && powersgd_of_[b]) {
    powersgd_of_[b]->finish(traffic_);
    // The approximation is the average on every rank: the shard keeps its part.
    if (buckets_.zero_stage() >= 2) {
      bucket.grad_shard.copy_(bucket.grads.narrow(0, bucket.shard_start(), bucket.shard_numel()));
      free_storage(bucket.grads);
    }
    return;
  }
  if (flight.reduction.valid()) flight.reduction.wait();
  flight.reduction = Work();
  if (buckets_.zero_stage() == 0 && flight.wire.defined()) bucket.grads.copy_(flight.wire);
  flight.wire = at::Tensor();
  if (flight.reduced.defined()) {
    bucket.grad_shard.copy_(flight.reduced);
    flight.reduced = at::Tensor();
  }
  if (buckets_.zero_stage() >= 2) {
    if (bucket.group->size() == 1) bucket.grad_shard.copy_(bucket.grads);
    free_storage(bucket.grads);
  }
}

void GradientReduction::finish() {
  at::NoGradGuard no_grad;
  // Buckets whose units were never reported complete (none on a well-formed schedule).
  for (size_t b = 0; b < in_flight_.size(); ++b) {
    if (!in_flight_[b].launched) launch(b, /*during_backward=*/false);
  }
  for (size_t b : launch_order_) wait(b);
  sum_partial_gradients();
}

template <typename Select>
std::vector<at::Tensor> GradientReduction::held_gradients(Select select) {
  auto& buckets = buckets_.buckets();
  std::vector<at::Tensor> pieces;
  if (local_) {
    for (Bucket& bucket : buckets) {
      for (size_t i = 0; i < bucket.parameters.size(); ++i) {
        if (!select(*bucket.parameters[i])) continue;
        pieces.push_back(
            bucket.grads.narrow(0, bucket.offsets[i], bucket.parameters[i]->value.numel()));
      }
    }
    return pieces;
  }
  for (const Segment& segment : buckets_.segments()) {
    if (!select(*segment.parameter)) continue;
    pieces.push_back(buckets[segment.bucket].grad_shard.narrow(0, segment.start, segment.length));
  }
  return pieces;
}

void GradientReduction::sum_partial_gradients() {
  // Sums the reduction over dp does not cover (they commute with the dp average, so they
  // run on the own shards): parameters replicated over tp whose gradient each tp rank holds
  // only part of (norms under sequence parallelism, replicated kv heads), and the tied
  // embedding's copies on the first and last virtual pipeline stage. tp ranks hold the same
  // buckets, and the tied embedding has a bucket of its own, so the shards line up.
  auto& buckets = buckets_.buckets();
  if (mesh_.tp().size() > 1) {
    std::vector<at::Tensor> pieces =
        held_gradients([](const Parameter& parameter) { return parameter.tp_partial_grad; });
    if (!pieces.empty()) {
      at::Tensor flat = at::cat(pieces);
      mesh_.tp().all_reduce(flat, ReduceOp::Sum);
      int64_t offset = 0;
      for (auto& piece : pieces) {
        piece.copy_(flat.narrow(0, offset, piece.numel()));
        offset += piece.numel();
      }
    }
  }
  // The tied embedding's copies: summed over this rank's chunks first (zb-v holds the first and
  // the last virtual stage on one rank), then over the ranks holding them.
  std::vector<at::Tensor> tied;
  for (Bucket& bucket : buckets) {
    if (bucket.pp_tied) tied.push_back(local_ ? bucket.grads : bucket.grad_shard);
  }
  if (!tied.empty()) {
    for (size_t i = 1; i < tied.size(); ++i) tied.front().add_(tied[i]);
    if (tied_ != nullptr) tied_->all_reduce(tied.front(), ReduceOp::Sum);
    for (size_t i = 1; i < tied.size(); ++i) tied[i].copy_(tied.front());
  }
  // Expert weights: an expert's local gradient already sums the losses of every ep rank whose
  // tokens it processed (each a dp rank's mean), so the average over expert_dp counts each dp
  // rank once but divides by dp / ep: the dp mean is that average / ep.
  const int64_t ep = mesh_.shape().ep;
  if (ep > 1) {
    for (Bucket& bucket : buckets) {
      if (bucket.group != &mesh_.expert_dp()) continue;
      (local_ ? bucket.grads : bucket.grad_shard).div_(static_cast<double>(ep));
    }
  }
}

}  // namespace strata
