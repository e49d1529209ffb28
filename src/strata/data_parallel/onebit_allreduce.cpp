// The two-phase 1-bit all-reduce.
#include "strata/data_parallel/onebit_allreduce.h"

#include <ATen/core/grad_mode.h>

#include "strata/core/error.h"
#include "strata/data_parallel/quantize.h"

namespace strata {
namespace {

// Each row of y (rows, c) as s * sign: the float32 scales (rows) are the rows' mean |y|.
at::Tensor sign_scales(const at::Tensor& rows) { return rows.abs().mean(1).to(at::kFloat); }

// rows -= s * sign, in place, with sign = +1 where `nonnegative` (the error compression left):
// rows + s - 2 s [nonnegative] (ATen's where() would cost several times more).
void subtract_signs(at::Tensor& rows, const at::Tensor& nonnegative, const at::Tensor& scales) {
  const at::Tensor s = scales.to(rows.scalar_type()).unsqueeze(1);
  rows.add_(s).addcmul_(nonnegative.to(rows.scalar_type()), s, -2.0);
}

}  // namespace

OneBitAllReduce::OneBitAllReduce(Comm& group, int64_t numel, at::ScalarType dtype)
    : group_(group), numel_(numel) {
  const int64_t n = group.size(), unit = 8 * n;
  padded_ = (numel + unit - 1) / unit * unit;
  chunk_ = padded_ / n;
  worker_error_ = at::zeros({padded_}, at::TensorOptions(dtype));
  server_error_ = at::zeros({chunk_}, at::TensorOptions(dtype));
}

void OneBitAllReduce::reset_errors() {
  worker_error_.zero_();
  server_error_.zero_();
}

void OneBitAllReduce::all_reduce(at::Tensor& tensor, CompressedTraffic* traffic) {
  at::NoGradGuard no_grad;
  STRATA_CHECK(tensor.numel() == numel_, "1-bit all-reduce built for ", numel_, " elements, given ",
               tensor.numel());
  const int64_t n = group_.size();
  if (n == 1 || numel_ == 0) return;
  const auto dtype = worker_error_.scalar_type();
  // Worker side: y = x + e_w in the error's buffer, one scale per chunk, signs; y then
  // becomes the new error in place.
  at::Tensor rows = worker_error_.view({n, chunk_});
  worker_error_.narrow(0, 0, numel_).add_(tensor.reshape(-1).to(dtype));
  const at::Tensor worker_nonnegative = worker_error_.ge(0);
  at::Tensor worker_scales = sign_scales(rows);  // (n)
  // (padded / 8): chunk j is bytes [j c/8, (j+1) c/8).
  at::Tensor worker_signs = pack_bits(worker_nonnegative);
  subtract_signs(rows, worker_nonnegative.view({n, chunk_}), worker_scales);

  // Phase 1: rank j receives chunk j of every worker.
  at::Tensor received_signs = at::empty_like(worker_signs);
  at::Tensor received_scales = at::empty_like(worker_scales);
  // Phase 2's buffers: every server's chunk.
  at::Tensor gathered_signs = at::empty_like(worker_signs);
  at::Tensor gathered_scales = at::empty({n}, at::kFloat);
  auto exchange = [&] {
    group_.all_to_all(received_signs, worker_signs);
    group_.all_to_all(received_scales, worker_scales);
    // Server side: the average of the workers' chunks, plus the server error; compressed again,
    // and what compression left is the new server error.
    at::Tensor workers = unpack_signs(received_signs, dtype).view({n, chunk_});
    at::Tensor z = workers.mul_(received_scales.to(dtype).unsqueeze(1)).mean(0);
    z.add_(server_error_);
    at::Tensor z_row = z.view({1, chunk_});
    const at::Tensor server_nonnegative = z.ge(0);
    at::Tensor server_scale = sign_scales(z_row);  // (1)
    at::Tensor server_signs = pack_bits(server_nonnegative);
    subtract_signs(z_row, server_nonnegative.view({1, chunk_}), server_scale);
    server_error_.copy_(z);
    group_.all_gather(gathered_signs, server_signs);
    group_.all_gather(gathered_scales, server_scale);
  };
  if (traffic != nullptr) {
    traffic->count_sent(group_, exchange);
  } else {
    exchange();
  }
  at::Tensor result = unpack_signs(gathered_signs, dtype)
                          .view({n, chunk_})
                          .mul_(gathered_scales.to(dtype).unsqueeze(1));
  tensor.view(-1).copy_(result.view(-1).narrow(0, 0, numel_));
}

}  // namespace strata
