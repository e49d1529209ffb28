// The encodings compressed exchanges send: int8 values with one float32 scale per block of
// 256 (ZeRO-3's quantized gathers, as ZeRO++ does), and signs packed eight to a byte with one
// scale per row (1-bit Adam's compressed all-reduce, onebit_allreduce.h, makes each row a
// block of kSignBlock values). No MPI here.
#pragma once
#include <ATen/ATen.h>

#include <cstdint>

namespace strata {

constexpr int64_t kQuantBlock = 256;  // values sharing one int8 scale
constexpr int64_t kSignBlock = 256;   // values sharing one 1-bit scale (onebit_allreduce.h)

// Blocks of a flat tensor of `numel` values: ceil(numel / kQuantBlock).
int64_t quant_blocks(int64_t numel);

// Symmetric int8: block b's values x become round(x / s_b) with s_b = max|x| / 127 over the
// block (1 for an all-zero block), so |dequantized - x| <= s_b / 2 = max|x| / 254.
// values: (numel) int8 out; scales: (quant_blocks(numel)) float32 out.
void quantize_int8(const at::Tensor& flat, at::Tensor& values, at::Tensor& scales);
// The inverse, written into `out` (numel, any floating dtype).
void dequantize_int8(const at::Tensor& values, const at::Tensor& scales, at::Tensor& out);

// 1-bit: each row of `rows` ((r, c) contiguous float32 or float64, c a multiple of 8) as
// s * sign, s the row's mean |x| (the s minimizing |x - s sign(x)|), stored in `scales` (r)
// float32, and the signs packed eight to a byte, most significant bit first, 1 for x >= 0, in
// `signs` (r * c / 8 uint8). `rows` becomes x - s sign(x) (with s rounded to float32): what
// compression left, the error that error feedback carries to the next call.
void encode_signs(at::Tensor& rows, at::Tensor& scales, at::Tensor& signs);
// The inverse, times `weight`: out (r, c) = weight * s_r * sign; or (sum) out (k, c), k
// dividing r, += weight * the decoded rows, input row i into out row i % k (k = 1: the sum
// over the rows; k blocks per worker: the workers' chunks summed block by block).
void decode_signs(const at::Tensor& signs, const at::Tensor& scales, double weight, bool sum,
                  at::Tensor& out);

}  // namespace strata
