// int8 block quantization and the 1-bit sign codec.
#include "strata/data_parallel/quantize.h"

#include <ATen/Dispatch.h>
#include <ATen/core/grad_mode.h>

#include <cmath>
#include <cstdint>

#include "strata/core/error.h"

namespace strata {

int64_t quant_blocks(int64_t numel) { return (numel + kQuantBlock - 1) / kQuantBlock; }

void quantize_int8(const at::Tensor& flat, at::Tensor& values, at::Tensor& scales) {
  at::NoGradGuard no_grad;
  const int64_t numel = flat.numel(), blocks = quant_blocks(numel);
  // Padded with zeros to whole blocks, computed in float32 (or float64 for float64 input).
  const auto compute = flat.scalar_type() == at::kDouble ? at::kDouble : at::kFloat;
  at::Tensor padded = at::zeros({blocks * kQuantBlock}, flat.options().dtype(compute));
  padded.narrow(0, 0, numel).copy_(flat.reshape(-1));
  at::Tensor rows = padded.view({blocks, kQuantBlock});
  at::Tensor scale = rows.abs().amax(1, /*keepdim=*/true).div_(127.0);
  scale.masked_fill_(scale == 0, 1.0);
  // The scale that travels is float32; quantize with exactly that value so the bound holds.
  scale = scale.to(at::kFloat).to(compute);
  at::Tensor q = rows.div(scale).round_().clamp_(-127, 127);
  values.copy_(q.view(-1).narrow(0, 0, numel));
  scales.copy_(scale.view(-1));
}

void dequantize_int8(const at::Tensor& values, const at::Tensor& scales, at::Tensor& out) {
  at::NoGradGuard no_grad;
  const int64_t numel = values.numel(), blocks = quant_blocks(numel);
  const auto compute = out.scalar_type() == at::kDouble ? at::kDouble : at::kFloat;
  at::Tensor padded = at::zeros({blocks * kQuantBlock}, values.options().dtype(compute));
  padded.narrow(0, 0, numel).copy_(values);
  padded.view({blocks, kQuantBlock}).mul_(scales.to(compute).view({blocks, 1}));
  out.view(-1).copy_(padded.narrow(0, 0, numel));
}

namespace {

// The sign codec's loops, written out: with ATen's element-wise ops each call made many passes
// with temporaries over the tensor (3x slower at 3.2 M values, bench/onebit_allreduce).

// Each of `rows` rows of y (rows x chunk, chunk a multiple of 8) as s * sign(y): the scale s
// is the row's mean |y| (stored as float32, and that rounded value used), the signs packed into
// `signs` (rows x chunk / 8), and y replaced by y - s sign(y), what compression left.
template <typename T>
void encode_rows(T* y, int64_t rows, int64_t chunk, float* scales, uint8_t* signs) {
  for (int64_t r = 0; r < rows; ++r) {
    T* row = y + r * chunk;
    double sum = 0;
    for (int64_t i = 0; i < chunk; ++i) sum += std::abs(row[i]);
    scales[r] = static_cast<float>(sum / static_cast<double>(chunk));
    const T s = static_cast<T>(scales[r]);
    uint8_t* out = signs + r * (chunk / 8);
    for (int64_t b = 0; b < chunk / 8; ++b) {
      unsigned byte = 0;
      T* v = row + 8 * b;
      for (int k = 0; k < 8; ++k) {
        const unsigned nonnegative = v[k] >= 0;
        byte |= nonnegative << (7 - k);
        v[k] -= s * static_cast<T>(2 * static_cast<int>(nonnegative) - 1);
      }
      out[b] = static_cast<uint8_t>(byte);
    }
  }
}

// out[r, i] = weight * scales[r] * sign[r, i] over rows x chunk; or (accumulate) input row r
// added to out row r % out_rows.
template <typename T>
void decode_rows(const uint8_t* signs, const float* scales, int64_t rows, int64_t chunk,
                 int64_t out_rows, double weight, bool accumulate, T* out) {
  for (int64_t r = 0; r < rows; ++r) {
    const T s = static_cast<T>(weight * static_cast<double>(scales[r]));
    const uint8_t* in = signs + r * (chunk / 8);
    T* row = out + (accumulate ? r % out_rows : r) * chunk;
    for (int64_t b = 0; b < chunk / 8; ++b) {
      const unsigned byte = in[b];
      T* v = row + 8 * b;
      for (int k = 0; k < 8; ++k) {
        const T value = s * static_cast<T>(2 * static_cast<int>((byte >> (7 - k)) & 1u) - 1);
        v[k] = accumulate ? v[k] + value : value;
      }
    }
  }
}

}  // namespace

void encode_signs(at::Tensor& rows, at::Tensor& scales, at::Tensor& signs) {
  STRATA_CHECK(rows.dim() == 2 && rows.is_contiguous() && rows.size(1) % 8 == 0,
               "encode_signs: rows ", rows.sizes(), " must be contiguous (r, c) with 8 | c");
  STRATA_CHECK(scales.numel() == rows.size(0) && scales.scalar_type() == at::kFloat &&
                   signs.numel() == rows.numel() / 8 && signs.scalar_type() == at::kByte,
               "encode_signs: scales or signs of the wrong size or dtype");
  AT_DISPATCH_FLOATING_TYPES(rows.scalar_type(), "encode_signs", [&] {
    encode_rows(rows.data_ptr<scalar_t>(), rows.size(0), rows.size(1), scales.data_ptr<float>(),
                signs.data_ptr<uint8_t>());
  });
}

void decode_signs(const at::Tensor& signs, const at::Tensor& scales, double weight, bool sum,
                  at::Tensor& out) {
  const int64_t rows = scales.numel(), chunk = out.size(1), out_rows = out.size(0);
  STRATA_CHECK(out.dim() == 2 && out.is_contiguous() && chunk % 8 == 0 &&
                   (sum ? out_rows > 0 && rows % out_rows == 0 : out_rows == rows) &&
                   signs.numel() == rows * chunk / 8 && signs.scalar_type() == at::kByte &&
                   scales.scalar_type() == at::kFloat,
               "decode_signs: out ", out.sizes(), ", ", rows, " scales, ", signs.numel(),
               " bytes of signs");
  AT_DISPATCH_FLOATING_TYPES(out.scalar_type(), "decode_signs", [&] {
    decode_rows(signs.data_ptr<uint8_t>(), scales.data_ptr<float>(), rows, chunk, out_rows, weight,
                sum, out.data_ptr<scalar_t>());
  });
}

}  // namespace strata
