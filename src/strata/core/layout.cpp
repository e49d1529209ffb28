// The table of layout settings and the vocabularies made from it.
#include "strata/core/layout.h"

#include <type_traits>

#include "strata/core/error.h"

namespace strata {

int64_t StagePlacement::virtual_stage(int64_t rank, int64_t chunk) const {
  STRATA_CHECK(rank >= 0 && rank < pp && chunk >= 0 && chunk < vpp, "rank ", rank, " chunk ", chunk,
               " of pp ", pp, " vpp ", vpp);
  if (kind == ChunkPlacement::v_shape) return chunk == 0 ? rank : 2 * pp - 1 - rank;
  return chunk * pp + rank;
}

int64_t StagePlacement::rank_of(int64_t virtual_stage) const {
  STRATA_CHECK(virtual_stage >= 0 && virtual_stage < virtual_stages(), "virtual stage ",
               virtual_stage, " of ", virtual_stages());
  if (kind == ChunkPlacement::v_shape) {
    return virtual_stage < pp ? virtual_stage : 2 * pp - 1 - virtual_stage;
  }
  return virtual_stage % pp;
}

int64_t StagePlacement::chunk_of(int64_t virtual_stage) const {
  STRATA_CHECK(virtual_stage >= 0 && virtual_stage < virtual_stages(), "virtual stage ",
               virtual_stage, " of ", virtual_stages());
  return virtual_stage / pp;  // the same for both: each chunk is a run of pp virtual stages
}

ChunkPlacement chunk_placement(PipelineSchedule schedule) {
  return schedule == PipelineSchedule::zb_v ? ChunkPlacement::v_shape : ChunkPlacement::interleaved;
}

StagePlacement stage_placement(const Layout& layout) {
  const StagePlacement placement{chunk_placement(layout.schedule), layout.pp, layout.vpp};
  STRATA_CHECK(placement.kind != ChunkPlacement::v_shape || placement.vpp == 2,
               "a V placement has 2 chunks per rank, not ", placement.vpp,
               " (the rule book checks this first)");
  return placement;
}

const std::vector<LayoutSetting>& layout_settings() {
  using V = LayoutVocabulary;
  static const std::vector<LayoutSetting> table = {
      {"tp", "parallel", &Layout::tp, &V::tp, false},
      {"pp", "parallel", &Layout::pp, &V::pp, true},
      {"dp", "parallel", &Layout::dp, &V::dp, false},
      {"cp", "parallel", &Layout::cp, &V::cp, false},
      {"cp_comm", "parallel", &Layout::cp_comm, &V::cp_comm, false},
      {"ep", "parallel", &Layout::ep, &V::ep, false},
      {"vpp", "parallel", &Layout::vpp, &V::vpp, true},
      {"zero", "parallel", &Layout::zero, &V::zero, false},
      {"micro_batch", "train", &Layout::micro_batch, &V::micro_batch, false},
      {"microbatches", "parallel", &Layout::microbatches, &V::microbatches, true},
      {"sequence_parallel", "parallel", &Layout::sequence_parallel, &V::sequence_parallel, false},
      {"schedule", "parallel", &Layout::schedule, &V::schedule, true},
  };
  return table;
}

const LayoutSetting* find_layout_setting(const std::string& name) {
  for (const LayoutSetting& setting : layout_settings()) {
    if (name == setting.name) return &setting;
  }
  return nullptr;
}

std::string setting_text(const Layout& layout, const LayoutSetting& setting) {
  return std::visit(
      [&](auto member) {
        const auto& value = layout.*member;
        using T = std::decay_t<decltype(value)>;
        if constexpr (std::is_same_v<T, int64_t>) {
          return std::to_string(value);
        } else if constexpr (std::is_same_v<T, bool>) {
          return std::string(value ? "true" : "false");
        } else {
          return std::string(name_of(value));
        }
      },
      setting.field);
}

LayoutVocabulary LayoutVocabulary::config() {
  LayoutVocabulary names;
  for (const LayoutSetting& setting : layout_settings()) {
    names.*setting.words = std::string(setting.section) + "." + setting.name;
  }
  names.global_batch = "train.global_batch";
  names.ranks_noun = "ranks";
  names.form = Form::toml;
  return names;
}

LayoutVocabulary LayoutVocabulary::layout_flag() {
  LayoutVocabulary names;
  for (const LayoutSetting& setting : layout_settings()) names.*setting.words = setting.name;
  names.microbatches = "the microbatches";  // derived from the batch, not a --layout key
  names.global_batch = "--global-batch";
  names.ranks_owner = "the cluster's ";
  names.ranks_noun = "devices";
  names.form = Form::key_value;
  return names;
}

LayoutVocabulary LayoutVocabulary::simulate_flags() {
  LayoutVocabulary names;
  for (const LayoutSetting& setting : layout_settings()) {
    names.*setting.words = setting.simulate_flag ? std::string("--") + setting.name : setting.name;
  }
  names.global_batch = "the global batch";
  names.ranks_noun = "stages";
  names.form = Form::flag;
  return names;
}

}  // namespace strata
