// 1-bit compressed all-reduce with error feedback (1-bit Adam: Tang et al. 2021, arXiv
// 2102.02888; DeepSpeed's MPI backend). How it works, for a tensor x on n ranks:
//
//   The tensor is padded to a multiple of kSignBlock * n (quantize.h: 256 n) and cut into n
//   chunks, chunk j "served" by rank j. Worker side: y = x + e_w (the worker error this rank
//   kept from its last call); each block of kSignBlock values of y travels as its signs (one
//   bit per value, packed eight to a byte) and one float32 scale, the block's mean |y| (the
//   scale s minimizing |y - s sign(y)|); e_w = y - s sign(y) is kept. Phase 1, all-to-all:
//   rank j receives every worker's compressed chunk j and averages them into z. Server side:
//   z' = z + e_s; z' is compressed again the same way and e_s = z' - s' sign(z') kept. Phase 2,
//   all-gather: every rank receives every server's compressed chunk and decodes the same
//   result.
//
// A scale per block, not one per chunk (DeepSpeed's choice, per tensor): a chunk spans layers
// whose momenta differ by orders of magnitude, and one mean |y| over them sends the small
// ones as large signs, which Adam's frozen variance then divides by small denominators (the
// demo GPT's held-out loss after 300 steps, 1-bit Adam over none: 1.031 with a scale per
// chunk, 1.013 per block; docs/communication.md).
//
// Over many calls, the sum of the results equals the sum of the true averages minus the
// errors now held (the average worker error plus the server error), which stay bounded: the
// errors feed back what compression dropped instead of losing it. Bytes per rank per call,
// about 2 (n-1)/n * numel * (1/8 + 4/256): 1/28 of a float32 ring all-reduce.
#pragma once
#include <ATen/ATen.h>

#include <cstdint>

#include "strata/data_parallel/compressed_traffic.h"
#include "strata/dist/comm.h"

namespace strata {

class OneBitAllReduce {
 public:
  // For tensors of `numel` elements of `dtype` over `group`.
  OneBitAllReduce(Comm& group, int64_t numel, at::ScalarType dtype);

  // Replaces `tensor` (numel) by the compressed average over the group, the same on every rank.
  // Collective over the group; a group of one rank, or an empty tensor, is left as it is. The bytes
  // sent are recorded in `traffic` if given.
  void all_reduce(at::Tensor& tensor, CompressedTraffic* traffic = nullptr);
  void reset_errors();

  const at::Tensor& worker_error() const { return worker_error_; }  // (padded numel)
  const at::Tensor& server_error() const { return server_error_; }  // (padded numel / n)

 private:
  Comm& group_;
  int64_t numel_, padded_, chunk_;
  at::Tensor worker_error_, server_error_;
};

}  // namespace strata
