// Flat sharded buckets, their reduction during backward, ZeRO-3 gathers, and the update.
#include "strata/train/data_parallel.h"

#include <ATen/core/grad_mode.h>
#include <ATen/native/Resize.h>

#include <algorithm>
#include <cmath>
#include <map>

#include "strata/core/error.h"

namespace strata {

namespace {
// Split over tp: each tp rank holds a different piece (expert weights split over ep are
// replicas over tp).
bool split_over_tp(const Parameter& parameter) {
  return parameter.spec.is_split() && parameter.spec.split_axis == ShardAxis::Tp;
}
}  // namespace

Comm& data_parallel_group(const Parameter& parameter, Mesh& mesh) {
  return parameter.spec.split_axis == ShardAxis::Ep ? mesh.expert_dp() : mesh.dp();
}

namespace {

// A flat buffer's storage comes and goes; tensors viewing it keep their sizes throughout.
void free_storage(const at::Tensor& flat) {
  at::native::resize_bytes_cpu(flat.storage().unsafeGetStorageImpl(), 0);
}
void allocate_storage(const at::Tensor& flat) {  // contents undefined until written
  at::native::resize_bytes_cpu(flat.storage().unsafeGetStorageImpl(), flat.nbytes());
}
bool has_storage(const at::Tensor& flat) { return flat.storage().nbytes() > 0; }
int64_t storage_bytes(const at::Tensor& flat) {
  return flat.defined() ? static_cast<int64_t>(flat.storage().nbytes()) : 0;
}

}  // namespace

struct DataParallel::Bucket {
  Comm* group = nullptr;  // the parameters' data-parallel group
  int chunk = 0;
  bool pp_tied = false;  // holds the tied embedding alone (shards line up on both stages)
  std::vector<Parameter*> parameters;
  std::vector<int64_t> offsets;  // of each parameter in the flat buffers
  std::vector<int64_t> units;    // the chunk's layers with parameters here
  int64_t numel = 0;             // padded to a multiple of shards
  int64_t shards = 1, shard_index = 0;
  int64_t shard_numel() const { return numel / shards; }
  int64_t shard_start() const { return shard_index * shard_numel(); }

  at::Tensor params;       // (numel) the parameter values view it (zero 3: only while resident)
  at::Tensor param_shard;  // (shard_numel) zero 3: its own storage; else a view of params
  at::Tensor grads;        // (numel) the parameters' .grad view it (zero 2/3: only in a step)
  at::Tensor grad_shard;   // (shard_numel) zero 2/3: its own storage; else a view of grads
  at::Tensor exp_avg, exp_avg_sq;  // (shard_numel)

  // Per step.
  int64_t units_pending = 0;
  bool launched = false;
  at::Tensor reduced;  // zero 1: the reduce-scatter's output, copied into grads afterwards
  Work reduction;
  Work gather;             // zero 3: parameters in flight
  at::Tensor gather_from;  // zero 1/2: the updated shard being all-gathered
  // Checkpoints: full-size moments (the own ones when not sharded).
  at::Tensor full_exp_avg, full_exp_avg_sq;
};

// One parameter's piece inside its bucket's own shard.
struct DataParallel::Segment {
  Parameter* parameter;
  size_t bucket;
  int64_t start, length;  // in the shard
};

// The LayerHooks of one chunk.
class DataParallel::ChunkHooks final : public LayerHooks {
 public:
  ChunkHooks(DataParallel& owner, int chunk, int64_t units)
      : owner_(owner), chunk_(chunk), units_(units) {}
  void before_forward(int64_t unit) override {
    if (owner_.zero_ < 3) return;
    owner_.require_unit(chunk_, unit);
    const int64_t next = unit + 1;  // the outer unit (0) runs first, then blocks 1, 2, ...
    if (next < units_) owner_.prefetch_unit(chunk_, next);
  }
  void after_forward(int64_t unit) override {
    if (owner_.zero_ == 3) owner_.release_unit(chunk_, unit);
  }
  void before_backward(int64_t unit) override {
    owner_.progress_reductions();
    if (owner_.zero_ < 3) return;
    owner_.require_unit(chunk_, unit);
    // Backward visits the outer unit (head) first, then the blocks from the last one down.
    const int64_t next = unit == GPT::kOuterUnit ? units_ - 1 : unit - 1;
    if (next >= 1) owner_.prefetch_unit(chunk_, next);
  }
  void after_backward(int64_t unit) override {
    // The outer unit's comes from GPT::end_backward, once autograd has returned.
    if (unit == GPT::kOuterUnit) owner_.in_backward_ = false;
    if (owner_.zero_ == 3) owner_.release_unit(chunk_, unit);
    if (owner_.chunk_armed_[chunk_]) owner_.unit_backward_done(chunk_, unit);
  }

 private:
  DataParallel& owner_;
  int chunk_;
  int64_t units_;
};

DataParallel::DataParallel(const std::vector<GPT*>& chunks, Mesh& mesh, const Config& config,
                           Comm* tied)
    : mesh_(mesh), zero_(config.parallel.zero), tied_(tied), chunks_(chunks) {
  const double bucket_bytes = config.parallel.bucket_mb * 1024.0 * 1024.0;
  // Buckets follow the order in which backward completes the layers: the blocks from the
  // last one down, then the outer unit (its embedding finishes last on the first stage).
  for (size_t c = 0; c < chunks_.size(); ++c) {
    GPT& chunk = *chunks_[c];
    const int chunk_index = static_cast<int>(c);
    std::vector<int64_t> unit_order;
    for (int64_t unit = chunk.num_units() - 1; unit >= 1; --unit) unit_order.push_back(unit);
    unit_order.push_back(GPT::kOuterUnit);
    std::map<Comm*, size_t> open;  // the bucket being filled, per group
    std::map<size_t, double> open_bytes;
    auto new_bucket = [&](Comm* group, bool pp_tied) {
      Bucket bucket;
      bucket.group = group;
      bucket.chunk = chunk_index;
      bucket.pp_tied = pp_tied;
      buckets_.push_back(std::move(bucket));
      return buckets_.size() - 1;
    };
    auto add = [&](size_t b, Parameter& parameter, int64_t unit) {
      Bucket& bucket = buckets_[b];
      bucket.parameters.push_back(&parameter);
      bucket.offsets.push_back(bucket.numel);
      bucket.numel += parameter.value.numel();
      if (std::find(bucket.units.begin(), bucket.units.end(), unit) == bucket.units.end())
        bucket.units.push_back(unit);
      open_bytes[b] += static_cast<double>(parameter.value.nbytes());
    };
    for (int64_t unit : unit_order) {
      auto& parameters = chunk.parameters();
      for (size_t i = parameters.size(); i-- > 0;) {
        if (chunk.unit_of(i) != unit) continue;
        Parameter& parameter = parameters[i];
        Comm* group = &data_parallel_group(parameter, mesh_);
        if (std::find(groups_.begin(), groups_.end(), group) == groups_.end())
          groups_.push_back(group);
        if (parameter.pp_tied) {
          add(new_bucket(group, true), parameter, unit);
          continue;
        }
        auto found = open.find(group);
        const size_t b = found != open.end() ? found->second : new_bucket(group, false);
        open[group] = b;
        add(b, parameter, unit);
        if (open_bytes[b] >= bucket_bytes) open.erase(group);
      }
      if (zero_ == 3) open.clear();  // zero 3 gathers layer by layer: one layer per bucket
    }
  }

  // Flat buffers, parameter views, shards, moments.
  at::NoGradGuard no_grad;
  unit_buckets_.resize(chunks_.size());
  unit_done_.resize(chunks_.size());
  for (size_t c = 0; c < chunks_.size(); ++c) {
    unit_buckets_[c].resize(chunks_[c]->num_units());
    unit_done_[c].assign(chunks_[c]->num_units(), false);
  }
  chunk_armed_.assign(chunks_.size(), false);
  for (size_t b = 0; b < buckets_.size(); ++b) {
    Bucket& bucket = buckets_[b];
    for (int64_t unit : bucket.units) unit_buckets_[bucket.chunk][unit].push_back(b);
    bucket.shards = zero_ >= 1 ? bucket.group->size() : 1;
    bucket.shard_index = zero_ >= 1 ? bucket.group->rank() : 0;
    bucket.numel = (bucket.numel + bucket.shards - 1) / bucket.shards * bucket.shards;
    const at::TensorOptions options = bucket.parameters.front()->value.options();
    bucket.params = at::zeros({bucket.numel}, options.requires_grad(false));
    bucket.grads = at::zeros({bucket.numel}, options.requires_grad(false));
    for (size_t i = 0; i < bucket.parameters.size(); ++i) {
      Parameter& parameter = *bucket.parameters[i];
      const int64_t n = parameter.value.numel();
      const auto shape = parameter.value.sizes().vec();
      bucket.params.narrow(0, bucket.offsets[i], n).copy_(parameter.value.reshape(-1));
      // A fresh leaf sharing the bucket's storage (variable_data: its own version counter).
      parameter.value = bucket.params.narrow(0, bucket.offsets[i], n).view(shape).variable_data();
      parameter.value.set_requires_grad(true);
      parameter.value.mutable_grad() = bucket.grads.narrow(0, bucket.offsets[i], n).view(shape);
    }
    const int64_t start = bucket.shard_start(), length = bucket.shard_numel();
    bucket.param_shard = zero_ == 3 ? bucket.params.narrow(0, start, length).clone()
                                    : bucket.params.narrow(0, start, length);
    bucket.grad_shard = zero_ >= 2 ? at::zeros({length}, bucket.grads.options())
                                   : bucket.grads.narrow(0, start, length);
    bucket.exp_avg = at::zeros({length}, bucket.grads.options());
    bucket.exp_avg_sq = at::zeros({length}, bucket.grads.options());
    if (zero_ >= 2) free_storage(bucket.grads);
    if (zero_ == 3) free_storage(bucket.params);
    // The parameters' pieces inside the own shard, for AdamW, the norm and the tp/tied sums.
    for (size_t i = 0; i < bucket.parameters.size(); ++i) {
      const int64_t begin = std::max(bucket.offsets[i], start);
      const int64_t end =
          std::min(bucket.offsets[i] + bucket.parameters[i]->value.numel(), start + length);
      if (begin < end) segments_.push_back({bucket.parameters[i], b, begin - start, end - begin});
    }
  }
  std::vector<AdamW::Slot> slots;
  for (const Segment& segment : segments_) {
    Bucket& bucket = buckets_[segment.bucket];
    auto piece = [&](const at::Tensor& shard) {
      return shard.narrow(0, segment.start, segment.length);
    };
    slots.push_back({piece(bucket.param_shard), piece(bucket.grad_shard), piece(bucket.exp_avg),
                     piece(bucket.exp_avg_sq), segment.parameter->weight_decay});
  }
  optimizer_ = std::make_unique<AdamW>(std::move(slots), config.train);

  for (size_t c = 0; c < chunks_.size(); ++c) {
    hooks_.push_back(
        std::make_unique<ChunkHooks>(*this, static_cast<int>(c), chunks_[c]->num_units()));
    chunks_[c]->set_hooks(hooks_.back().get());
  }
}

DataParallel::~DataParallel() {
  for (GPT* chunk : chunks_) chunk->set_hooks(nullptr);
}

// ---- gradients ----------------------------------------------------------------------

void DataParallel::begin_step() {
  at::NoGradGuard no_grad;
  release_all_units();
  for (Bucket& bucket : buckets_) {
    if (!has_storage(bucket.grads)) allocate_storage(bucket.grads);
    bucket.grads.zero_();
    bucket.units_pending = static_cast<int64_t>(bucket.units.size());
    bucket.launched = false;
  }
  for (auto& done : unit_done_) std::fill(done.begin(), done.end(), false);
  std::fill(chunk_armed_.begin(), chunk_armed_.end(), false);
  launch_order_.clear();
  buckets_overlapped_ = 0;
}

void DataParallel::last_backward_begins(int chunk) {
  chunk_armed_[chunk] = true;
  in_backward_ = true;
}

void DataParallel::gradients_complete(int chunk) {
  chunk_armed_[chunk] = false;
  in_backward_ = false;
  for (int64_t unit = 0; unit < chunks_[chunk]->num_units(); ++unit) {
    unit_backward_done(chunk, unit);
  }
}

void DataParallel::unit_backward_done(int chunk, int64_t unit) {
  if (unit_done_[chunk][unit]) return;
  unit_done_[chunk][unit] = true;
  for (size_t b : unit_buckets_[chunk][unit]) {
    if (--buckets_[b].units_pending == 0) launch_reduction(buckets_[b]);
  }
}

void DataParallel::launch_reduction(Bucket& bucket) {
  // Average over the group, as if one rank had run the whole global batch. Every member
  // launches the same buckets in the same order: their schedules are the same.
  bucket.launched = true;
  if (in_backward_) ++buckets_overlapped_;
  launch_order_.push_back(static_cast<size_t>(&bucket - buckets_.data()));
  if (bucket.group->size() == 1) return;
  if (zero_ == 0) {
    bucket.reduction = bucket.group->iall_reduce(bucket.grads, ReduceOp::Avg);
  } else if (zero_ == 1) {
    bucket.reduced = at::empty({bucket.shard_numel()}, bucket.grads.options());
    bucket.reduction = bucket.group->ireduce_scatter(bucket.reduced, bucket.grads, ReduceOp::Avg);
  } else {
    bucket.reduction =
        bucket.group->ireduce_scatter(bucket.grad_shard, bucket.grads, ReduceOp::Avg);
  }
}

void DataParallel::progress_reductions() {
  for (size_t b : launch_order_) {
    if (buckets_[b].reduction.valid()) buckets_[b].reduction.is_completed();
  }
}

void DataParallel::finish_reduction(Bucket& bucket) {
  if (bucket.reduction.valid()) bucket.reduction.wait();
  bucket.reduction = Work();
  if (zero_ == 1 && bucket.reduced.defined()) {
    bucket.grad_shard.copy_(bucket.reduced);
    bucket.reduced = at::Tensor();
  }
  if (zero_ >= 2) {
    if (bucket.group->size() == 1) {
      bucket.grad_shard.copy_(bucket.grads);
    }
    free_storage(bucket.grads);
  }
}

void DataParallel::reduce_gradients() {
  at::NoGradGuard no_grad;
  // Buckets whose layers were never reported complete (none on a well-formed schedule).
  for (Bucket& bucket : buckets_) {
    if (!bucket.launched) launch_reduction(bucket);
  }
  for (size_t b : launch_order_) finish_reduction(buckets_[b]);
  release_all_units();

  // Sums the reduction over dp does not cover (they commute with the dp average, so they
  // run on the own shards): parameters replicated over tp whose gradient each tp rank holds
  // only part of (norms under sequence parallelism, replicated kv heads), and the tied
  // embedding's copies on the first and last pipeline stage. tp ranks hold the same buckets,
  // and the tied embedding has a bucket of its own, so the shards line up.
  if (mesh_.tp().size() > 1) {
    std::vector<at::Tensor> pieces;
    for (const Segment& segment : segments_) {
      if (!segment.parameter->tp_partial_grad) continue;
      pieces.push_back(
          buckets_[segment.bucket].grad_shard.narrow(0, segment.start, segment.length));
    }
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
  if (tied_ != nullptr) {
    for (Bucket& bucket : buckets_) {
      if (bucket.pp_tied) tied_->all_reduce(bucket.grad_shard, ReduceOp::Sum);
    }
  }
  // Expert weights: an expert's local gradient already sums the losses of every ep rank whose
  // tokens it processed (each a dp rank's mean), so the average over expert_dp counts each dp
  // rank once but divides by dp / ep: the dp mean is that average / ep.
  const int64_t ep = mesh_.shape().ep;
  if (ep > 1) {
    for (Bucket& bucket : buckets_) {
      if (bucket.group == &mesh_.expert_dp()) bucket.grad_shard.div_(static_cast<double>(ep));
    }
  }
}

double DataParallel::clip_gradients(double max_norm) {
  at::NoGradGuard no_grad;
  // Each parameter counted once: pieces split over tp each add their part, replicas over tp
  // only on tp rank 0, the tied embedding only on the first stage; over the data-parallel
  // group the shards add up (zero >= 1) or are identical replicas (zero 0).
  const bool tp_first = mesh_.coords().tp == 0;
  std::vector<at::Tensor> sums;
  for (size_t g = 0; g < groups_.size(); ++g) sums.push_back(at::zeros({1}, at::kDouble));
  for (const Segment& segment : segments_) {
    const Parameter& parameter = *segment.parameter;
    if (parameter.pp_tied && !mesh_.pp_is_first_stage()) continue;
    if (!split_over_tp(parameter) && !tp_first) continue;
    const Bucket& bucket = buckets_[segment.bucket];
    const size_t g = static_cast<size_t>(std::find(groups_.begin(), groups_.end(), bucket.group) -
                                         groups_.begin());
    const double norm =
        bucket.grad_shard.narrow(0, segment.start, segment.length).norm().item<double>();
    sums[g] += norm * norm;
  }
  at::Tensor sum_squares = at::zeros({1}, at::kDouble);
  for (size_t g = 0; g < groups_.size(); ++g) {
    if (zero_ >= 1) groups_[g]->all_reduce(sums[g], ReduceOp::Sum);
    // Expert weights are split over ep: each ep rank adds its experts.
    if (groups_[g] == &mesh_.expert_dp()) mesh_.ep().all_reduce(sums[g], ReduceOp::Sum);
    sum_squares += sums[g];
  }
  mesh_.tp().all_reduce(sum_squares, ReduceOp::Sum);
  mesh_.pp().all_reduce(sum_squares, ReduceOp::Sum);
  const double norm = std::sqrt(sum_squares.item<double>());
  if (max_norm > 0 && norm > max_norm) {
    const double scale = max_norm / (norm + 1e-6);
    for (Bucket& bucket : buckets_) bucket.grad_shard.mul_(scale);
  }
  return norm;
}

void DataParallel::step(double lr) {
  optimizer_->step(lr);
  // Zero 0: every rank updated everything. Zero 3: layers are gathered before their next use.
  if (zero_ != 1 && zero_ != 2) return;
  at::NoGradGuard no_grad;
  for (Bucket& bucket : buckets_) {
    if (bucket.group->size() == 1) continue;
    bucket.gather_from = bucket.param_shard.clone();  // MPI wants distinct buffers
    bucket.gather = bucket.group->iall_gather(bucket.params, bucket.gather_from);
  }
  for (Bucket& bucket : buckets_) {
    if (bucket.gather.valid()) bucket.gather.wait();
    bucket.gather = Work();
    bucket.gather_from = at::Tensor();
  }
}

// ---- zero 3: layers gathered for use ----------------------------------------------------

void DataParallel::prefetch_unit(int chunk, int64_t unit) {
  for (size_t b : unit_buckets_[chunk][unit]) {
    Bucket& bucket = buckets_[b];
    if (has_storage(bucket.params)) continue;  // resident or on its way
    allocate_storage(bucket.params);
    bucket.gather = bucket.group->iall_gather(bucket.params, bucket.param_shard);
  }
}

void DataParallel::require_unit(int chunk, int64_t unit) {
  prefetch_unit(chunk, unit);
  for (size_t b : unit_buckets_[chunk][unit]) {
    Bucket& bucket = buckets_[b];
    if (bucket.gather.valid()) bucket.gather.wait();
    bucket.gather = Work();
  }
}

void DataParallel::release_unit(int chunk, int64_t unit) {
  for (size_t b : unit_buckets_[chunk][unit]) {
    Bucket& bucket = buckets_[b];
    if (bucket.gather.valid()) bucket.gather.wait();
    bucket.gather = Work();
    if (has_storage(bucket.params)) free_storage(bucket.params);
  }
}

void DataParallel::release_all_units() {
  if (zero_ < 3) return;
  for (size_t c = 0; c < chunks_.size(); ++c) {
    for (int64_t unit = 0; unit < chunks_[c]->num_units(); ++unit) {
      release_unit(static_cast<int>(c), unit);
    }
  }
}

int64_t DataParallel::buckets() const { return static_cast<int64_t>(buckets_.size()); }

// ---- memory -------------------------------------------------------------------------

int64_t DataParallel::parameter_bytes() const {
  int64_t bytes = 0;
  for (const Bucket& bucket : buckets_) {
    bytes += storage_bytes(bucket.params);
    if (zero_ == 3) bytes += storage_bytes(bucket.param_shard);
  }
  return bytes;
}

int64_t DataParallel::gradient_bytes() const {
  int64_t bytes = 0;
  for (const Bucket& bucket : buckets_) {
    bytes += storage_bytes(bucket.grads);
    if (zero_ >= 2) bytes += storage_bytes(bucket.grad_shard);
  }
  return bytes;
}

int64_t DataParallel::optimizer_bytes() const {
  int64_t bytes = 0;
  for (const Bucket& bucket : buckets_) {
    bytes += storage_bytes(bucket.exp_avg) + storage_bytes(bucket.exp_avg_sq);
  }
  return bytes;
}

// ---- checkpoints ----------------------------------------------------------------------

std::vector<ShardedTensor> DataParallel::checkpoint_tensors(bool for_load) {
  at::NoGradGuard no_grad;
  release_all_units();
  for (Bucket& bucket : buckets_) {
    const bool sharded = bucket.shards > 1;
    if (zero_ == 3) {
      allocate_storage(bucket.params);
      if (!for_load) bucket.group->all_gather(bucket.params, bucket.param_shard);
    }
    bucket.full_exp_avg =
        sharded ? at::empty({bucket.numel}, bucket.exp_avg.options()) : bucket.exp_avg;
    bucket.full_exp_avg_sq =
        sharded ? at::empty({bucket.numel}, bucket.exp_avg.options()) : bucket.exp_avg_sq;
    if (sharded && !for_load) {
      bucket.group->all_gather(bucket.full_exp_avg, bucket.exp_avg);
      bucket.group->all_gather(bucket.full_exp_avg_sq, bucket.exp_avg_sq);
    }
  }
  // Replicas are written once: by rank 0 of the data-parallel group (and of cp), by tp rank
  // 0 unless split over tp, and the tied embedding by the first pipeline stage.
  std::vector<ShardedTensor> tensors;
  for (Bucket& bucket : buckets_) {
    for (size_t i = 0; i < bucket.parameters.size(); ++i) {
      const Parameter& parameter = *bucket.parameters[i];
      const bool writer = bucket.group->rank() == 0 && mesh_.coords().cp == 0 &&
                          (split_over_tp(parameter) || mesh_.coords().tp == 0) &&
                          (!parameter.pp_tied || mesh_.pp_is_first_stage());
      const int64_t n = parameter.value.numel();
      const auto shape = parameter.value.sizes();
      for (auto [prefix, tensor] :
           {std::pair<std::string, at::Tensor>{"", parameter.value.detach()},
            {"optimizer.exp_avg.", bucket.full_exp_avg.narrow(0, bucket.offsets[i], n).view(shape)},
            {"optimizer.exp_avg_sq.",
             bucket.full_exp_avg_sq.narrow(0, bucket.offsets[i], n).view(shape)}}) {
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
  at::NoGradGuard no_grad;
  for (Bucket& bucket : buckets_) {
    const int64_t start = bucket.shard_start(), length = bucket.shard_numel();
    if (loaded && bucket.shards > 1) {
      bucket.exp_avg.copy_(bucket.full_exp_avg.narrow(0, start, length));
      bucket.exp_avg_sq.copy_(bucket.full_exp_avg_sq.narrow(0, start, length));
    }
    if (zero_ == 3) {
      if (loaded) bucket.param_shard.copy_(bucket.params.narrow(0, start, length));
      free_storage(bucket.params);
    }
    bucket.full_exp_avg = at::Tensor();
    bucket.full_exp_avg_sq = at::Tensor();
  }
}

}  // namespace strata
