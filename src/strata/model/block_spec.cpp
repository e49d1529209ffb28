// BlockSpec from and back to a [model] table, and the checks a spec must pass to be built.
#include "strata/model/block_spec.h"

#include "strata/core/error.h"

namespace strata {

BlockSpec block_spec_of(const ModelConfig& config) {
  BlockSpec block;
  block.norm = config.norm;
  block.norm_eps = config.norm_eps;
  block.position = config.pos;
  block.rope_theta = config.rope_theta;
  block.activation = config.activation;
  block.moe = config.moe;
  return block;
}

ModelConfig config_with_block(ModelConfig config, const BlockSpec& block) {
  config.norm = block.norm;
  config.norm_eps = block.norm_eps;
  config.pos = block.position;
  config.rope_theta = block.rope_theta;
  config.activation = block.activation;
  config.moe = block.moe;
  return config;
}

void check_block_spec(const BlockSpec& block) {
  STRATA_REQUIRE(block.moe.num_experts == 0 || !(block.biases.mlp_in || block.biases.mlp_out),
                 "MLP biases need a dense model: expert FFNs carry none");
  const RopeScaling& scaling = block.rope_scaling;
  if (scaling.type == RopeScalingType::none) return;
  STRATA_REQUIRE(block.position == PositionEncoding::rope,
                 "rope scaling needs rotary positions (the block's position encoding is ",
                 name_of(block.position), ")");
  STRATA_REQUIRE(scaling.factor > 0, "rope scaling factor (", scaling.factor, ") must be positive");
  STRATA_REQUIRE(scaling.low_freq_factor > 0 && scaling.low_freq_factor < scaling.high_freq_factor,
                 "rope scaling needs 0 < low_freq_factor (", scaling.low_freq_factor,
                 ") < high_freq_factor (", scaling.high_freq_factor, ")");
  STRATA_REQUIRE(scaling.original_max_position_embeddings > 0,
                 "rope scaling original_max_position_embeddings (",
                 scaling.original_max_position_embeddings, ") must be positive");
}

}  // namespace strata
