// PowerSGD (Vogels et al. 2019, arXiv 1905.13727; PyTorch's powerSGD_hook): a bucket's
// gradients averaged over its data-parallel group through rank-r factors. How it works:
//
//   Each matrix-shaped gradient G (m x n: dim 0 by the rest) adds the residual E this rank
//   kept from the last step: M = G + E (error feedback). P = M Q (m x r), with Q (n x r) the
//   previous step's (warm start; at first random, drawn from the parameter's name, so every
//   rank and every layout starts from the same Q). The P of every matrix, together with the
//   gradients that stay uncompressed, travel in one all-reduce (average). P is orthonormalized
//   (QR), Q = M^T P (n x r) travels in a second all-reduce; the approximation of the average is
//   P Q^T, and E = M - P Q^T is kept. The result is the same on every rank.
//
// A matrix is compressed only when it pays: (m + n) r < m n / 2; 1-D gradients (norms,
// biases) and the rest travel uncompressed. Each parameter is compressed on its own, so the
// bucketing (bucket_mb, the pipeline's stages) does not change the result.
#pragma once
#include <ATen/ATen.h>

#include <cstdint>
#include <vector>

#include "strata/data_parallel/buckets.h"
#include "strata/data_parallel/compressed_traffic.h"

namespace strata {

// Whether PowerSGD compresses a gradient of this shape at rank r.
bool powersgd_compresses(at::IntArrayRef shape, int64_t rank);

class PowerSgd {
 public:
  // For the parameters of `bucket` (its full gradient buffer, bucket.grads); rank >= 1.
  PowerSgd(Bucket& bucket, int64_t rank);

  // Adds the residuals, computes P and posts the all-reduce of the Ps and the uncompressed
  // gradients (non-blocking). Bytes recorded in `traffic`.
  void start(CompressedTraffic& traffic);
  void progress();  // tests the all-reduce in flight
  // Waits; Q = M^T P all-reduced; bucket.grads holds the averaged approximation (the
  // uncompressed gradients their exact average).
  void finish(CompressedTraffic& traffic);

  // Elements each call all-reduces: the Ps with the uncompressed gradients, and the Qs.
  int64_t p_elements() const { return p_flat_.numel(); }
  int64_t q_elements() const { return q_flat_.numel(); }

 private:
  struct Matrix {
    size_t parameter;  // index in bucket.parameters
    int64_t rows, cols;
    int64_t p_offset, q_offset;  // in p_flat_, q_flat_
    at::Tensor q;                // (cols, rank) the warm start
    at::Tensor residual;         // (rows, cols) error feedback; holds M during a call
  };
  struct Plain {
    size_t parameter;
    int64_t offset;  // in p_flat_
  };
  at::Tensor gradient(size_t parameter) const;  // the parameter's gradient, flat

  Bucket& bucket_;
  int64_t rank_;
  std::vector<Matrix> matrices_;
  std::vector<Plain> plain_;
  at::Tensor p_flat_, q_flat_;
  Work p_reduction_;
};

}  // namespace strata
