// Rotary position embedding (Su et al. 2021, RoFormer), as Llama and GPT-NeoX lay it out: the
// pairs (x[i], x[i + D/2]) of each head are rotated by position * frequency_i, with the
// frequencies theta^(-2i/D), optionally rescaled for long contexts (model/block_spec.h).
#pragma once
#include <ATen/ATen.h>

#include <cstdint>

#include "strata/model/block_spec.h"

namespace strata {

// (D/2) float64: theta^(-2i/D) for i < D/2, rescaled by `scaling`.
at::Tensor rope_inverse_frequencies(int64_t head_dim, double theta, const RopeScaling& scaling);

// The cos and sin of every position up to max_positions, computed once.
class RotaryEmbedding {
 public:
  RotaryEmbedding() = default;  // no rotary positions
  RotaryEmbedding(int64_t head_dim, int64_t max_positions, double theta, const RopeScaling& scaling,
                  at::ScalarType dtype);

  // x (B, heads, T, D) at `positions` int64, (T) shared by the batch rows or (B, T) per row
  // (packed documents) -> x rotated, same shape.
  at::Tensor rotate(const at::Tensor& x, const at::Tensor& positions) const;

 private:
  at::Tensor cos_, sin_;  // (max_positions, D / 2)
};

}  // namespace strata
