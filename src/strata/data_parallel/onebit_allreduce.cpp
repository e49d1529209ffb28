// The two-phase 1-bit all-reduce.
#include "strata/data_parallel/onebit_allreduce.h"

#include <ATen/core/grad_mode.h>

#include "strata/core/error.h"
#include "strata/data_parallel/quantize.h"

namespace strata {

OneBitAllReduce::OneBitAllReduce(Comm& group, int64_t numel, at::ScalarType dtype)
    : group_(group), numel_(numel) {
  const int64_t n = group.size(), unit = kSignBlock * n;
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
  const int64_t blocks = padded_ / kSignBlock, chunk_blocks = chunk_ / kSignBlock;
  // Worker side: y = x + e_w in the error's buffer; one scale per block of kSignBlock values and
  // their signs (chunk j is blocks [j cb, (j+1) cb), cb = chunk / kSignBlock); y becomes the new
  // error in place.
  worker_error_.narrow(0, 0, numel_).add_(tensor.reshape(-1).to(worker_error_.scalar_type()));
  at::Tensor worker_scales = at::empty({blocks}, at::kFloat);
  at::Tensor worker_signs = at::empty({padded_ / 8}, at::kByte);
  // Phase 1: rank j receives chunk j of every worker. Phase 2: every server's chunk.
  at::Tensor received_signs = at::empty_like(worker_signs);
  at::Tensor received_scales = at::empty_like(worker_scales);
  at::Tensor gathered_signs = at::empty_like(worker_signs);
  at::Tensor gathered_scales = at::empty_like(worker_scales);
  at::Tensor server_signs = at::empty({chunk_ / 8}, at::kByte);
  at::Tensor server_scales = at::empty({chunk_blocks}, at::kFloat);
  at::Tensor result = at::empty({padded_}, worker_error_.options());
  at::Tensor worker_blocks = worker_error_.view({blocks, kSignBlock});
  encode_signs(worker_blocks, worker_scales, worker_signs);
  auto exchange = [&] {
    group_.all_to_all(received_signs, worker_signs);
    group_.all_to_all(received_scales, worker_scales);
    // Server side: the average of the workers' chunks plus the server error, compressed again;
    // what that left is the new server error.
    at::Tensor z = server_error_.view({chunk_blocks, kSignBlock});
    decode_signs(received_signs, received_scales, 1.0 / static_cast<double>(n), /*sum=*/true, z);
    encode_signs(z, server_scales, server_signs);
    group_.all_gather(gathered_signs, server_signs);
    group_.all_gather(gathered_scales, server_scales);
  };
  if (traffic != nullptr) {
    traffic->count_sent(group_, exchange);
  } else {
    exchange();
  }
  at::Tensor result_blocks = result.view({blocks, kSignBlock});
  decode_signs(gathered_signs, gathered_scales, 1.0, /*sum=*/false, result_blocks);
  tensor.view(-1).copy_(result.narrow(0, 0, numel_));
}

}  // namespace strata
