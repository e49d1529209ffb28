// int8 block quantization and sign packing.
#include "strata/data_parallel/quantize.h"

#include <ATen/core/grad_mode.h>

#include <map>

#include "strata/core/error.h"

namespace strata {
namespace {

// (8) uint8 bit weights 128, 64, ..., 1.
at::Tensor bit_weights() {
  static const at::Tensor weights = at::tensor({128, 64, 32, 16, 8, 4, 2, 1}, at::kByte);
  return weights;
}

}  // namespace

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

at::Tensor pack_bits(const at::Tensor& bits) {
  at::NoGradGuard no_grad;
  const int64_t numel = bits.numel();
  STRATA_CHECK(numel % 8 == 0, "pack_bits: ", numel, " bits is not a multiple of 8");
  STRATA_CHECK(bits.scalar_type() == at::kBool, "pack_bits wants a bool tensor");
  // A bool is one byte holding 0 or 1: weigh each of a byte's eight by its bit and add.
  const at::Tensor bytes = bits.contiguous().view(at::kByte).reshape({numel / 8, 8});
  return bytes.mul(bit_weights()).sum(1, /*keepdim=*/false, at::kByte);
}

at::Tensor pack_signs(const at::Tensor& flat) { return pack_bits(flat.reshape(-1).ge(0)); }

at::Tensor unpack_signs(const at::Tensor& bytes, at::ScalarType dtype) {
  at::NoGradGuard no_grad;
  // Every byte's eight signs, looked up (ATen's element-wise bit operations on a broadcast
  // cost several times more): table row b holds the +1/-1 of b's bits, most significant first.
  static std::map<at::ScalarType, at::Tensor> tables;
  at::Tensor& table = tables[dtype];
  if (!table.defined()) {
    const at::Tensor values = at::arange(256, at::kLong).unsqueeze(1);
    const at::Tensor bits = values.bitwise_and(bit_weights().to(at::kLong)).ne(0);
    table = bits.to(dtype).mul_(2).sub_(1);  // (256, 8)
  }
  return table.index_select(0, bytes.reshape(-1).to(at::kLong)).reshape(-1);
}

}  // namespace strata
