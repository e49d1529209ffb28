// Loading a Hugging Face model directory into a GPT of any layout: each rank copies only the
// slices its parameters hold (its tp shard of q/k/v and the MLP, its pipeline stage's layers,
// its experts) out of the memory-mapped files, converting the dtype of the slice alone.
#pragma once
#include <memory>
#include <string>

#include "strata/hf/hf_config.h"
#include "strata/hf/hf_files.h"
#include "strata/hf/hf_names.h"
#include "strata/model/gpt.h"

namespace strata {

// The table of the model in `files`, for the names it stores (GPT-2 with or without the
// "transformer." prefix). UserError naming the tensor for a stored tensor that is no part
// of the model `hf` describes (a weight strata would silently drop), or a stored shape that
// is not the table's.
HfTensorMap hf_tensor_map_of(const HfTensorFiles& files, const HfModel& hf);

// Fills every parameter of `model` (a stage, a tp or ep shard of it) from `files` as `map`
// places them. UserError naming the tensor for one the files lack or a dtype that is not
// F32, BF16 or F16.
void load_hf_parameters(GPT& model, const HfTensorFiles& files, const HfTensorMap& map);

// The same from a model directory: reads its config.json, checks that it describes the
// model `model` was built as (UserError naming the directory otherwise), maps the files.
void load_hf_weights(const std::string& dir, GPT& model);

}  // namespace strata
