// The rotary frequencies (with Llama 3's scaling) and the rotation.
#include "strata/model/rope.h"

#include <cmath>

#include "strata/core/error.h"

namespace strata {
namespace {

// Llama 3.1's long-context scaling of one frequency (block_spec.h says how).
double llama3_scaled(double frequency, const RopeScaling& scaling) {
  const double original = static_cast<double>(scaling.original_max_position_embeddings);
  const double wavelength = 2 * M_PI / frequency;
  if (wavelength < original / scaling.high_freq_factor) return frequency;
  if (wavelength > original / scaling.low_freq_factor) return frequency / scaling.factor;
  const double smooth = (original / wavelength - scaling.low_freq_factor) /
                        (scaling.high_freq_factor - scaling.low_freq_factor);
  return (1 - smooth) * frequency / scaling.factor + smooth * frequency;
}

}  // namespace

at::Tensor rope_inverse_frequencies(int64_t head_dim, double theta, const RopeScaling& scaling) {
  at::Tensor frequencies =
      at::pow(theta, -at::arange(0, head_dim, 2, at::kDouble) / static_cast<double>(head_dim));
  if (scaling.type == RopeScalingType::none) return frequencies;
  STRATA_CHECK(scaling.type == RopeScalingType::llama3, "an unknown rope scaling");
  auto values = frequencies.accessor<double, 1>();
  for (int64_t i = 0; i < values.size(0); ++i) values[i] = llama3_scaled(values[i], scaling);
  return frequencies;
}

RotaryEmbedding::RotaryEmbedding(int64_t head_dim, int64_t max_positions, double theta,
                                 const RopeScaling& scaling, at::ScalarType dtype) {
  const at::Tensor angles = at::outer(at::arange(max_positions, at::kDouble),
                                      rope_inverse_frequencies(head_dim, theta, scaling));
  cos_ = angles.cos().to(dtype);
  sin_ = angles.sin().to(dtype);
}

at::Tensor RotaryEmbedding::rotate(const at::Tensor& x, const at::Tensor& positions) const {
  const int64_t half = x.size(3) / 2;
  at::Tensor cos = cos_.index_select(0, positions.reshape(-1));  // (T or B * T, D/2)
  at::Tensor sin = sin_.index_select(0, positions.reshape(-1));
  if (positions.dim() == 2) {  // each batch row its own positions: (B, 1, T, D/2)
    cos = cos.view({positions.size(0), 1, positions.size(1), half});
    sin = sin.view({positions.size(0), 1, positions.size(1), half});
  }
  const at::Tensor x1 = x.narrow(-1, 0, half), x2 = x.narrow(-1, half, half);
  return at::cat({x1 * cos - x2 * sin, x1 * sin + x2 * cos}, -1);
}

}  // namespace strata
