// The config values that name one of a few choices (model.pos, model.activation, ...), each an
// enum with ONE table of its TOML spellings. Parsing, printing and messages read the tables;
// everywhere else code compares enums, never spellings.
#pragma once
#include <array>
#include <optional>
#include <string>
#include <string_view>

#include "strata/core/error.h"

namespace strata {

enum class PositionEncoding { learned, rope };    // model.pos
enum class Norm { layernorm, rmsnorm };           // model.norm
enum class Activation { gelu, swiglu };           // model.activation, model.moe.activation
enum class AttentionKernel { blockwise, eager };  // model.attention
// parallel.schedule; also the schedules the pipeline generators build.
enum class PipelineSchedule { gpipe, one_f_one_b, interleaved_one_f_one_b, zb_h1, zb_v };
// parallel.cp_comm: how context-parallel attention moves keys and values between the cp ranks.
enum class ContextParallelComm { ring, all_gather, all_to_all };
// train.recompute: what a layer's backward recomputes instead of keeping (also the planner's).
enum class Recompute { none, selective, full };
// Whether "selective" recomputes a layer's attention core. It drops what the core keeps besides
// its output (the out-projection keeps that as its input anyway): the eager core's s x s
// probabilities, and under context parallelism the pieces' own copy of the output. The blockwise
// kernel on its own keeps only one float32 log-sum-exp per row and head besides that output, too
// little to repeat its forward for, so under it "selective" runs as "none".
inline bool selective_recomputes_attention(AttentionKernel kernel, bool context_parallel) {
  return kernel == AttentionKernel::eager || context_parallel;
}
// The recomputation a run asked for `mode` performs: "selective" that repeats no core is "none".
inline Recompute effective_recompute(Recompute mode, AttentionKernel kernel,
                                     bool context_parallel) {
  return mode == Recompute::selective && !selective_recomputes_attention(kernel, context_parallel)
             ? Recompute::none
             : mode;
}
// train.precision: the dtype parameters, activations and gradients are computed in. bf16 and
// fp16 keep fp32 master weights and moments in the optimizer (also the planner's).
enum class Precision { fp32, bf16, fp16, fp64 };
// compression.gradients: how data-parallel gradients travel (docs/communication.md).
enum class GradientCompression { none, bf16, powersgd, onebit };
// compression.zero_gather: what ZeRO-3's parameter all-gathers send.
enum class GatherCompression { none, bf16, int8 };
enum class DataSource { corpus, synthetic, shards };  // data.source
enum class LossMask { none, completion };             // data.loss_mask
enum class ProgressDisplay {
  automatic,
  bar,
  lines,
  none
};  // log.progress ("auto": bar on a terminal)

template <typename E>
struct Spelling {
  E value;
  const char* name;
};

// Spellings<E>::table: every value of E and how TOML spells it, in the order messages list them.
template <typename E>
struct Spellings;

template <>
struct Spellings<PositionEncoding> {
  static constexpr std::array<Spelling<PositionEncoding>, 2> table{
      {{PositionEncoding::learned, "learned"}, {PositionEncoding::rope, "rope"}}};
};
template <>
struct Spellings<Norm> {
  static constexpr std::array<Spelling<Norm>, 2> table{
      {{Norm::layernorm, "layernorm"}, {Norm::rmsnorm, "rmsnorm"}}};
};
template <>
struct Spellings<Activation> {
  static constexpr std::array<Spelling<Activation>, 2> table{
      {{Activation::gelu, "gelu"}, {Activation::swiglu, "swiglu"}}};
};
template <>
struct Spellings<AttentionKernel> {
  static constexpr std::array<Spelling<AttentionKernel>, 2> table{
      {{AttentionKernel::blockwise, "blockwise"}, {AttentionKernel::eager, "eager"}}};
};
template <>
struct Spellings<PipelineSchedule> {
  static constexpr std::array<Spelling<PipelineSchedule>, 5> table{
      {{PipelineSchedule::gpipe, "gpipe"},
       {PipelineSchedule::one_f_one_b, "1f1b"},
       {PipelineSchedule::interleaved_one_f_one_b, "interleaved-1f1b"},
       {PipelineSchedule::zb_h1, "zb-h1"},
       {PipelineSchedule::zb_v, "zb-v"}}};
};
template <>
struct Spellings<ContextParallelComm> {
  static constexpr std::array<Spelling<ContextParallelComm>, 3> table{
      {{ContextParallelComm::ring, "ring"},
       {ContextParallelComm::all_gather, "all-gather"},
       {ContextParallelComm::all_to_all, "all-to-all"}}};
};
template <>
struct Spellings<Recompute> {
  static constexpr std::array<Spelling<Recompute>, 3> table{
      {{Recompute::none, "none"}, {Recompute::selective, "selective"}, {Recompute::full, "full"}}};
};
template <>
struct Spellings<Precision> {
  static constexpr std::array<Spelling<Precision>, 4> table{{{Precision::fp32, "fp32"},
                                                             {Precision::bf16, "bf16"},
                                                             {Precision::fp16, "fp16"},
                                                             {Precision::fp64, "fp64"}}};
};
template <>
struct Spellings<GradientCompression> {
  static constexpr std::array<Spelling<GradientCompression>, 4> table{
      {{GradientCompression::none, "none"},
       {GradientCompression::bf16, "bf16"},
       {GradientCompression::powersgd, "powersgd"},
       {GradientCompression::onebit, "onebit"}}};
};
template <>
struct Spellings<GatherCompression> {
  static constexpr std::array<Spelling<GatherCompression>, 3> table{
      {{GatherCompression::none, "none"},
       {GatherCompression::bf16, "bf16"},
       {GatherCompression::int8, "int8"}}};
};
template <>
struct Spellings<DataSource> {
  static constexpr std::array<Spelling<DataSource>, 3> table{{{DataSource::corpus, "corpus"},
                                                              {DataSource::synthetic, "synthetic"},
                                                              {DataSource::shards, "shards"}}};
};
template <>
struct Spellings<LossMask> {
  static constexpr std::array<Spelling<LossMask>, 2> table{
      {{LossMask::none, "none"}, {LossMask::completion, "completion"}}};
};

template <>
struct Spellings<ProgressDisplay> {
  static constexpr std::array<Spelling<ProgressDisplay>, 4> table{
      {{ProgressDisplay::automatic, "auto"},
       {ProgressDisplay::bar, "bar"},
       {ProgressDisplay::lines, "lines"},
       {ProgressDisplay::none, "none"}}};
};

// The TOML spelling: name_of(PipelineSchedule::one_f_one_b) == "1f1b".
template <typename E>
const char* name_of(E value) {
  for (const Spelling<E>& spelling : Spellings<E>::table) {
    if (spelling.value == value) return spelling.name;
  }
  STRATA_CHECK(false, "an enum value without a spelling: ", static_cast<int>(value));
  return "";
}

// The value spelled `name`; nullopt when no value is.
template <typename E>
std::optional<E> parse_choice(std::string_view name) {
  for (const Spelling<E>& spelling : Spellings<E>::table) {
    if (name == spelling.name) return spelling.value;
  }
  return std::nullopt;
}

// The spellings for messages: quoted ("\"gelu\" or \"swiglu\"") as config keys show them, or
// bare ("gelu, 1f1b, ...") joined by `separator` as command-line flags show them.
template <typename E>
std::string spellings_quoted() {
  const auto& table = Spellings<E>::table;
  std::string list;
  for (size_t i = 0; i < table.size(); ++i) {
    list += i == 0 ? "" : i + 1 == table.size() ? " or " : ", ";
    list += str("\"", table[i].name, "\"");
  }
  return list;
}
template <typename E>
std::string spellings_joined(const std::string& separator = ", ") {
  std::string list;
  for (const Spelling<E>& spelling : Spellings<E>::table) {
    list += (list.empty() ? "" : separator) + spelling.name;
  }
  return list;
}

}  // namespace strata
