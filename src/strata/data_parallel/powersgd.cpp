// PowerSGD's two all-reduces per bucket.
#include "strata/data_parallel/powersgd.h"

#include <ATen/CPUGeneratorImpl.h>
#include <ATen/core/grad_mode.h>

#include "strata/core/error.h"

namespace strata {
namespace {

constexpr uint64_t kQuerySeed = 0x9d5f0e1a2b3c4d5eULL;  // the initial Qs' draws

}  // namespace

bool powersgd_compresses(at::IntArrayRef shape, int64_t rank) {
  if (shape.size() < 2) return false;
  int64_t cols = 1;
  for (size_t d = 1; d < shape.size(); ++d) cols *= shape[d];
  const int64_t rows = shape[0];
  return 2 * (rows + cols) * rank < rows * cols;
}

PowerSgd::PowerSgd(Bucket& bucket, int64_t rank) : bucket_(bucket), rank_(rank) {
  STRATA_CHECK(rank >= 1, "PowerSGD rank ", rank);
  at::NoGradGuard no_grad;
  const auto options = bucket.grads.options();
  int64_t p_elements = 0, q_elements = 0;
  for (size_t i = 0; i < bucket.parameters.size(); ++i) {
    const Parameter& parameter = *bucket.parameters[i];
    const auto shape = parameter.value.sizes();
    if (!powersgd_compresses(shape, rank)) continue;
    Matrix matrix;
    matrix.parameter = i;
    matrix.rows = shape[0];
    matrix.cols = parameter.value.numel() / shape[0];
    matrix.p_offset = p_elements;
    matrix.q_offset = q_elements;
    auto generator =
        at::make_generator<at::CPUGeneratorImpl>(hash_name(kQuerySeed, parameter.name));
    matrix.q = at::normal(0.0, 1.0, {matrix.cols, rank}, generator, options);
    matrix.residual = at::zeros({matrix.rows, matrix.cols}, options);
    p_elements += matrix.rows * rank;
    q_elements += matrix.cols * rank;
    matrices_.push_back(std::move(matrix));
  }
  for (size_t i = 0; i < bucket.parameters.size(); ++i) {
    if (powersgd_compresses(bucket.parameters[i]->value.sizes(), rank)) continue;
    plain_.push_back({i, p_elements});
    p_elements += bucket.parameters[i]->value.numel();
  }
  p_flat_ = at::zeros({p_elements}, options);
  q_flat_ = at::zeros({q_elements}, options);
}

at::Tensor PowerSgd::gradient(size_t parameter) const {
  return bucket_.grads.narrow(0, bucket_.offsets[parameter],
                              bucket_.parameters[parameter]->value.numel());
}

void PowerSgd::start(CompressedTraffic& traffic) {
  at::NoGradGuard no_grad;
  for (Matrix& matrix : matrices_) {
    matrix.residual.add_(gradient(matrix.parameter).view({matrix.rows, matrix.cols}));  // M
    at::Tensor p =
        p_flat_.narrow(0, matrix.p_offset, matrix.rows * rank_).view({matrix.rows, rank_});
    at::mm_out(p, matrix.residual, matrix.q);
  }
  for (const Plain& plain : plain_) {
    const at::Tensor grad = gradient(plain.parameter);
    p_flat_.narrow(0, plain.offset, grad.numel()).copy_(grad);
  }
  traffic.count_sent(*bucket_.group,
                     [&] { p_reduction_ = bucket_.group->iall_reduce(p_flat_, ReduceOp::Avg); });
}

void PowerSgd::progress() {
  if (p_reduction_.valid()) p_reduction_.is_completed();
}

void PowerSgd::finish(CompressedTraffic& traffic) {
  at::NoGradGuard no_grad;
  p_reduction_.wait();
  p_reduction_ = Work();
  for (const Plain& plain : plain_) {
    at::Tensor grad = gradient(plain.parameter);
    grad.copy_(p_flat_.narrow(0, plain.offset, grad.numel()));
  }
  if (matrices_.empty()) return;
  std::vector<at::Tensor> ps;
  for (Matrix& matrix : matrices_) {
    at::Tensor p =
        p_flat_.narrow(0, matrix.p_offset, matrix.rows * rank_).view({matrix.rows, rank_});
    ps.push_back(std::get<0>(at::linalg_qr(p)));  // orthonormal columns spanning P's
    at::Tensor q =
        q_flat_.narrow(0, matrix.q_offset, matrix.cols * rank_).view({matrix.cols, rank_});
    at::mm_out(q, matrix.residual.t(), ps.back());
  }
  traffic.count_sent(*bucket_.group, [&] { bucket_.group->all_reduce(q_flat_, ReduceOp::Avg); });
  for (size_t k = 0; k < matrices_.size(); ++k) {
    Matrix& matrix = matrices_[k];
    matrix.q.copy_(
        q_flat_.narrow(0, matrix.q_offset, matrix.cols * rank_).view({matrix.cols, rank_}));
    const at::Tensor approximation = at::mm(ps[k], matrix.q.t());
    matrix.residual.sub_(approximation);  // E = M - P Q^T
    gradient(matrix.parameter).view({matrix.rows, matrix.cols}).copy_(approximation);
  }
}

}  // namespace strata
