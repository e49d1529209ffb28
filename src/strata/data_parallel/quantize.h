// The encodings compressed exchanges send: int8 values with one float32 scale per block of
// 256 (ZeRO-3's quantized gathers, as ZeRO++ does), and signs packed eight to a byte with
// one scale per chunk (1-bit Adam's compressed all-reduce). Pure tensor functions, no MPI.
#pragma once
#include <ATen/ATen.h>

#include <cstdint>

namespace strata {

constexpr int64_t kQuantBlock = 256;  // values sharing one int8 scale

// Blocks of a flat tensor of `numel` values: ceil(numel / kQuantBlock).
int64_t quant_blocks(int64_t numel);

// Symmetric int8: block b's values x become round(x / s_b) with s_b = max|x| / 127 over the
// block (1 for an all-zero block), so |dequantized - x| <= s_b / 2 = max|x| / 254.
// values: (numel) int8 out; scales: (quant_blocks(numel)) float32 out.
void quantize_int8(const at::Tensor& flat, at::Tensor& values, at::Tensor& scales);
// The inverse, written into `out` (numel, any floating dtype).
void dequantize_int8(const at::Tensor& values, const at::Tensor& scales, at::Tensor& out);

// Signs of `flat` (numel a multiple of 8; x >= 0 is +1) packed eight to a byte, most
// significant bit first: (numel / 8) uint8.
at::Tensor pack_signs(const at::Tensor& flat);
// The same from the bits themselves: `bits` bool (numel a multiple of 8), true for +1.
at::Tensor pack_bits(const at::Tensor& bits);
// +1/-1 in `dtype` for each packed bit: (bytes.numel() * 8).
at::Tensor unpack_signs(const at::Tensor& bytes, at::ScalarType dtype);

}  // namespace strata
