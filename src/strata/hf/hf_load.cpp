// Per-rank slices of the stored tensors, copied into the parameters.
//
// A parameter's local tensor is a list of slices of its global tensor (ShardSpec::
// local_slices: one for an unsplit or plainly split parameter, one per block for the fused
// SwiGLU rows). Each table row places a box of the global tensor; the part of a box that falls
// into a slice is narrowed out of the stored view (free: a view of the mapped file) and
// copied into the slice's place in the local tensor. Only those bytes are read from disk.
//
// The copies run in the order of their bytes in the files, and each one's pages are asked for
// (read_ahead) while the pages asked for ahead of the copies come to less than kReadAheadBytes.
// So the disk reads while the copies before it first-touch their parameters' fresh pages (the
// parameters are not written before the load, ParameterInit::loaded). A tensor stored
// unaligned is a copy already (HfTensorFiles::view), and its pieces are copied at once.
#include "strata/hf/hf_load.h"

#include <ATen/core/grad_mode.h>

#include <algorithm>
#include <map>
#include <optional>
#include <set>

#include "strata/core/error.h"

namespace strata {
namespace {

std::string shape_text(const std::vector<int64_t>& shape) {
  std::string out = "[";
  for (size_t i = 0; i < shape.size(); ++i) out += (i ? ", " : "") + std::to_string(shape[i]);
  return out + "]";
}

// The piece's box, in the stored tensor's view: transposed, its rows, a leading 1 for an
// expert.
at::Tensor stored_box(const at::Tensor& stored, const HfPiece& piece) {
  at::Tensor view = piece.transposed ? stored.t() : stored;
  view = view.narrow(0, piece.hf_begin, piece.rows);
  if (piece.parameter_offsets.size() == static_cast<size_t>(view.dim()) + 1)
    view = view.unsqueeze(0);
  return view;
}

struct Copy {
  at::Tensor source;  // a view of the mapped file
  at::Tensor target;  // a view of the parameter
};

constexpr int64_t kReadAheadBytes = int64_t{256} << 20;

// The part of `piece`'s box that lies in `slice`, and where it goes in the local tensor; none
// where they do not meet.
std::optional<Copy> overlap(const HfPiece& piece, const at::Tensor& stored, const ShardSpec& spec,
                            const ShardSpec::Slice& slice, const at::Tensor& local) {
  const std::vector<int64_t> box = piece.box_shape();
  at::Tensor source = stored_box(stored, piece);
  at::Tensor target = local;
  for (size_t d = 0; d < box.size(); ++d) {
    const int64_t dim = static_cast<int64_t>(d);
    const int64_t begin = std::max(slice.global_offsets[d], piece.parameter_offsets[d]);
    const int64_t end =
        std::min(slice.global_offsets[d] + slice.shape[d], piece.parameter_offsets[d] + box[d]);
    if (begin >= end) return std::nullopt;
    source = source.narrow(dim, begin - piece.parameter_offsets[d], end - begin);
    const int64_t local_begin =
        begin - slice.global_offsets[d] + (dim == spec.split_dim ? slice.local_start : 0);
    target = target.narrow(dim, local_begin, end - begin);
  }
  return Copy{source, target};
}

void run_copies(std::vector<Copy>& copies) {
  std::sort(copies.begin(), copies.end(), [](const Copy& a, const Copy& b) {
    return reinterpret_cast<uintptr_t>(a.source.data_ptr()) <
           reinterpret_cast<uintptr_t>(b.source.data_ptr());
  });
  std::vector<int64_t> asked_bytes(copies.size(), 0);
  size_t asked = 0;   // copies whose pages were asked for
  int64_t ahead = 0;  // the bytes asked for by those not yet run
  for (size_t i = 0; i < copies.size(); ++i) {
    for (; asked < copies.size() && (asked <= i || ahead < kReadAheadBytes); ++asked) {
      asked_bytes[asked] = read_ahead(copies[asked].source);
      ahead += asked_bytes[asked];
    }
    copies[i].target.copy_(copies[i].source);
    ahead -= asked_bytes[i];
  }
}

}  // namespace

HfTensorMap hf_tensor_map_of(const HfTensorFiles& files, const HfModel& hf) {
  const std::string prefix =
      hf.architecture == HfArchitecture::gpt2 && files.contains("transformer.wte.weight")
          ? "transformer."
          : "";
  HfTensorMap map = hf_tensor_map(hf.architecture, hf.model, hf.block, prefix);
  std::set<std::string> known(map.ignored.begin(), map.ignored.end());
  for (const HfPiece& piece : map.pieces) {
    known.insert(piece.hf_name);
    if (!files.contains(piece.hf_name)) continue;  // reported by whoever needs it
    const auto stored = files.view(piece.hf_name).sizes().vec();
    if (stored != piece.hf_shape) {
      throw UserError(str("the tensor ", piece.hf_name, " in ", files.dir(), " has shape ",
                          shape_text(stored), ", but its config.json describes ",
                          shape_text(piece.hf_shape)));
    }
  }
  for (const std::string& name : files.names()) {
    if (!known.count(name)) {
      throw UserError(str("the tensor ", name, " in ", files.dir(), " is no part of a ",
                          hf_architecture_class(hf.architecture),
                          " as its config.json describes it (strata would not compute with it)"));
    }
  }
  return map;
}

void load_hf_parameters(GPT& model, const HfTensorFiles& files, const HfTensorMap& map) {
  std::map<std::string, std::vector<const HfPiece*>> by_parameter;
  for (const HfPiece& piece : map.pieces) by_parameter[piece.parameter].push_back(&piece);
  at::NoGradGuard no_grad;
  std::vector<Copy> copies;
  for (Parameter& parameter : model.parameters()) {
    auto found = by_parameter.find(parameter.name);
    STRATA_CHECK(found != by_parameter.end(), "no Hugging Face tensor maps to ", parameter.name);
    int64_t covered = 0;
    for (const HfPiece* piece : found->second) covered += numel_of(piece->box_shape());
    STRATA_CHECK(covered == numel_of(parameter.spec.global_shape), "the table's pieces of ",
                 parameter.name, " do not tile it");
    at::Tensor local = parameter.value.detach();
    for (const HfPiece* piece : found->second) {
      const at::Tensor stored = files.view(piece->hf_name);
      const at::ScalarType dtype = stored.scalar_type();
      if (dtype != at::kFloat && dtype != at::kBFloat16 && dtype != at::kHalf) {
        throw UserError(str("the tensor ", piece->hf_name, " in ", files.dir(), " is ",
                            safetensors_dtype_name(dtype), "; weights are read from F32, BF16 ",
                            "or F16"));
      }
      const bool mapped = files.is_mapped(stored);
      for (const auto& slice : parameter.spec.local_slices()) {
        if (auto copy = overlap(*piece, stored, parameter.spec, slice, local)) {
          if (mapped) {
            copies.push_back(std::move(*copy));
          } else {
            copy->target.copy_(copy->source);
          }
        }
      }
    }
  }
  run_copies(copies);
}

void load_hf_weights(const std::string& dir, GPT& model) {
  const HfModel hf = read_hf_config(dir);
  const ModelConfig& built = model.config();
  STRATA_REQUIRE(
      built.vocab_size == hf.model.vocab_size && built.d_model == hf.model.d_model &&
          built.n_layers == hf.model.n_layers && built.n_heads == hf.model.n_heads &&
          built.kv_heads() == hf.model.kv_heads() && built.head_dim() == hf.model.head_dim() &&
          built.ff_dim() == hf.model.ff_dim() && built.tie_embeddings == hf.model.tie_embeddings,
      "the model built does not have the sizes of the Hugging Face model in ", dir);
  HfTensorFiles files(dir);
  HfModel as_built = hf;
  as_built.model.seq_len = built.seq_len;  // learned positions: n_positions (with_hf_model)
  load_hf_parameters(model, files, hf_tensor_map_of(files, as_built));
}

}  // namespace strata
