// The one table per architecture that says where each Hugging Face tensor lives in strata's
// parameters, and how: loading (hf_load.h) and export (hf_export.h) both walk it, so the two
// cannot drift apart.
//
// A row (HfPiece) takes rows [hf_begin, hf_begin + rows) of a stored tensor, after transposing
// it when the file stores it [in, out] (GPT-2's Conv1D), and places them as a box at
// parameter_offsets in the strata parameter's global tensor (a leading dim of 1 added for an
// expert's slot in the experts' stacked tensor). The fused strata parameters are several rows:
//   attn.kv.weight      = [k_proj ; v_proj]               (2 K D, C)
//   mlp.fc.weight       = [gate_proj ; up_proj]            (2 F, C)  SwiGLU: gate rows, value rows
//   experts.fc.weight e = [w1_e ; w3_e]                    (E, 2 F, C)
//   GPT-2 c_attn        = [q ; k ; v] after the transpose  -> attn.q.weight and attn.kv.weight
// HF's q and k rows are laid out for rotate-half RoPE (pairs i, i + D/2), which is strata's
// own pairing (model/rope.h): they are placed as they are, no permutation.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "strata/hf/hf_config.h"

namespace strata {

struct HfPiece {
  std::string hf_name;                     // e.g. "model.layers.0.self_attn.k_proj.weight"
  std::vector<int64_t> hf_shape;           // as stored in the file
  bool transposed = false;                 // stored [in, out]: strata holds the transpose
  int64_t hf_begin = 0;                    // first row taken, of the (transposed) stored tensor
  int64_t rows = 0;                        // rows taken
  std::string parameter;                   // strata's global name, e.g. "blocks.0.attn.kv.weight"
  std::vector<int64_t> parameter_offsets;  // where the box starts in the parameter

  // The box's shape in the parameter: rows x the (transposed) stored trailing dims, with a
  // leading 1 when the parameter has one dim more (an expert of a stacked tensor).
  std::vector<int64_t> box_shape() const;
};

struct HfTensorMap {
  std::vector<HfPiece> pieces;  // in the order export writes the tensors
  // Stored tensors that are no weights of the model and are skipped (GPT-2's causal-mask
  // buffers; a tied head's redundant copy).
  std::vector<std::string> ignored;
};

// The table of the whole model (every layer, every expert). `prefix` is the stored names'
// leading part: "transformer." or "" for GPT-2 (both exist), ignored otherwise.
HfTensorMap hf_tensor_map(HfArchitecture architecture, const ModelConfig& model,
                          const BlockSpec& block, const std::string& prefix = "");

}  // namespace strata
