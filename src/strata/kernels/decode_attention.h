// Attention of single query rows against cached keys and values: the decode step of generation
// and serving, where each sequence brings one new token that attends to all its positions so
// far. One call serves every decoding sequence of a step: tasks are (query, head) pairs on
// ATen's OpenMP threads, each reading its keys and values in place from the cache slots its
// table names (a paged pool, or a contiguous cache whose slots are its positions) with no
// gather, copy or tensor built per sequence. A query row's work is a few thousand
// multiply-adds, which a GEMM call or an ATen dispatch per sequence would cost more than.
//
// Shapes: q (N, H, D); keys and values (slots, K, D). Query head h reads key/value head
// (heads.first + h) / heads.group: by default h / (H / K), grouped-query attention with no
// copies; a tensor-parallel rank that caches every kv head passes its first query head and
// the model's group. Any strides, as long as each row of D values is contiguous.
//
// Precision: float64 in, float64 throughout; float32, bfloat16 and float16 in, float32
// accumulation, output in the input's dtype.
#pragma once
#include <ATen/ATen.h>

#include <cstdint>
#include <vector>

namespace strata {

struct DecodeQuery {
  int64_t row = 0;                 // its row of q and of out
  const int64_t* slots = nullptr;  // the cache slots of the keys it sees, in position order
  int64_t length = 0;              // how many (>= 1)
};

struct DecodeHeads {
  int64_t first = 0;  // the model's index of q's head 0
  int64_t group = 0;  // query heads per kv head; 0: H / K
};

// out[row] = softmax(q[row] k[slots]^T * scale) v[slots] for each query; out is (N, H, D) of
// q's dtype with contiguous rows of D, and its other rows are left as they are.
void decode_attention(const at::Tensor& q, const at::Tensor& keys, const at::Tensor& values,
                      const std::vector<DecodeQuery>& queries, double scale, at::Tensor& out,
                      DecodeHeads heads = {});

}  // namespace strata
