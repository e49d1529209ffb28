// Parsing, printing and checking planner layouts. The checks are the layout rules every caller
// shares (core/layout_rules.h) plus what the cost model cannot predict (ZeRO-3 with a pipeline).
#include "strata/plan/layout.h"

#include <cerrno>
#include <cstdlib>
#include <type_traits>
#include <variant>

#include "strata/core/error.h"

namespace strata {
namespace {

// The planner's own keys, after the layout's settings (core/layout.h).
const char* kPlannerKeys[] = {"recompute", "compression", "powersgd_rank", "zero_gather",
                              "pp_layers"};

std::string layout_keys() {
  std::string keys;
  for (const LayoutSetting& setting : layout_settings()) {
    if (std::string(setting.name) == "microbatches") continue;  // derived from --global-batch
    keys += (keys.empty() ? "" : ", ") + std::string(setting.name);
  }
  for (const char* key : kPlannerKeys) keys += str(", ", key);
  return keys;
}

int64_t parse_size(const std::string& key, const std::string& value) {
  errno = 0;
  char* end = nullptr;
  const long long number = std::strtoll(value.c_str(), &end, 10);
  STRATA_REQUIRE(!value.empty() && end != value.c_str() && *end == '\0' && errno == 0,
                 "--layout: ", key, "=", value, " is not a whole number; e.g. ", key, "=2");
  return number;
}

bool parse_bool(const std::string& key, const std::string& value) {
  if (value == "true" || value == "1") return true;
  if (value == "false" || value == "0") return false;
  throw UserError(str("--layout: ", key, "=", value, " must be true or false"));
}

// --layout's enum-valued keys, in their TOML spellings.
template <typename E>
E parse_layout_choice(const std::string& key, const std::string& value) {
  const std::optional<E> choice = parse_choice<E>(value);
  STRATA_REQUIRE(choice, "--layout: ", key, "=", value, " must be ", spellings_joined<E>());
  return *choice;
}

// One layout setting from its --layout text.
void parse_setting(PlanLayout& layout, const LayoutSetting& setting, const std::string& value) {
  const std::string key = setting.name;
  std::visit(
      [&](auto member) {
        auto& field = layout.*member;
        using T = std::decay_t<decltype(field)>;
        if constexpr (std::is_same_v<T, int64_t>) {
          field = parse_size(key, value);
        } else if constexpr (std::is_same_v<T, bool>) {
          field = parse_bool(key, value);
        } else {
          field = parse_layout_choice<T>(key, value);
        }
      },
      setting.field);
}

}  // namespace

PlanLayout parse_layout(const std::string& text) {
  PlanLayout layout;
  bool schedule_given = false;
  size_t begin = 0;
  while (begin < text.size()) {
    size_t comma = text.find(',', begin);
    if (comma == std::string::npos) comma = text.size();
    const std::string item = text.substr(begin, comma - begin);
    begin = comma + 1;
    if (item.empty()) continue;
    const size_t equals = item.find('=');
    STRATA_REQUIRE(equals != std::string::npos, "--layout: '", item,
                   "' is not key=value; e.g. --layout tp=2,pp=4,micro_batch=1");
    const std::string key = item.substr(0, equals), value = item.substr(equals + 1);
    const LayoutSetting* setting = find_layout_setting(key);
    if (setting != nullptr && key != "microbatches") {  // derived from --global-batch
      parse_setting(layout, *setting, value);
      schedule_given = schedule_given || key == "schedule";
    } else if (key == "recompute") {
      layout.recompute = parse_layout_choice<Recompute>(key, value);
    } else if (key == "compression") {
      layout.compression = parse_layout_choice<GradientCompression>(key, value);
    } else if (key == "powersgd_rank") {
      layout.powersgd_rank = parse_size(key, value);
    } else if (key == "zero_gather") {
      layout.zero_gather = parse_layout_choice<GatherCompression>(key, value);
    } else if (key == "pp_layers") {
      STRATA_REQUIRE(value == "auto", "--layout: pp_layers=", value,
                     " must be auto (the stages balanced by time); leave it out for the "
                     "default split, balanced by FLOPs");
      layout.pp_layers_auto = true;
    } else {
      throw UserError(str("--layout: unknown key '", key, "'; the keys are ", layout_keys()));
    }
  }
  // Chunks per stage run interleaved unless a schedule is given.
  if (!schedule_given && layout.vpp > 1)
    layout.schedule = PipelineSchedule::interleaved_one_f_one_b;
  return layout;
}

PlanLayout resolve_layout(PlanLayout layout, int64_t devices) {
  const int64_t model_parallel = layout.tp * layout.pp * layout.cp;
  if (layout.dp == -1 && model_parallel >= 1 && devices % model_parallel == 0) {
    layout.dp = devices / model_parallel;
  }
  return layout;
}

std::string schedule_label(const PlanLayout& layout) {
  return layout.pp == 1 ? "none" : name_of(layout.schedule);
}

std::string layout_to_string(const PlanLayout& layout) {
  return str("tp=", layout.tp, " pp=", layout.pp, " dp=", layout.dp, " cp=", layout.cp,
             " cp_comm=", name_of(layout.cp_comm), " ep=", layout.ep, " vpp=", layout.vpp,
             " zero=", layout.zero, " micro_batch=", layout.micro_batch,
             " recompute=", name_of(layout.recompute),
             " sequence_parallel=", layout.sequence_parallel ? "true" : "false",
             " schedule=", schedule_label(layout),
             layout.compression == GradientCompression::none
                 ? ""
                 : str(" compression=", name_of(layout.compression),
                       layout.compression == GradientCompression::powersgd
                           ? str(" powersgd_rank=", layout.powersgd_rank)
                           : ""),
             layout.zero_gather == GatherCompression::none
                 ? ""
                 : str(" zero_gather=", name_of(layout.zero_gather)),
             layout.pp_layers_auto ? " pp_layers=auto" : "");
}

nlohmann::json layout_to_json(const PlanLayout& layout, int64_t microbatches) {
  return {{"tp", layout.tp},
          {"pp", layout.pp},
          {"dp", layout.dp},
          {"cp", layout.cp},
          {"cp_comm", name_of(layout.cp_comm)},
          {"ep", layout.ep},
          {"vpp", layout.vpp},
          {"zero", layout.zero},
          {"micro_batch", layout.micro_batch},
          {"microbatches", microbatches},
          {"recompute", name_of(layout.recompute)},
          {"sequence_parallel", layout.sequence_parallel},
          {"schedule", schedule_label(layout)},
          {"compression", name_of(layout.compression)},
          {"powersgd_rank", layout.powersgd_rank},
          {"zero_gather", name_of(layout.zero_gather)},
          {"pp_layers", layout.pp_layers_auto ? "auto" : "flops"}};
}

std::vector<std::string> layout_problems(const TransformerSpec& model, const PlanLayout& layout,
                                         int64_t devices, int64_t global_batch) {
  std::vector<std::string> problems =
      check_layout(layout, model, devices, global_batch, LayoutVocabulary::layout_flag()).problems;
  // A limitation of the cost model, not of the layout: the runtime trains it.
  const int64_t replicas = layout.dp * layout.cp;
  if (layout.compression != GradientCompression::none && replicas == 1) {
    problems.push_back(str("compression=", name_of(layout.compression),
                           " compresses the data-parallel gradient exchange, but dp x cp = 1 has "
                           "none; use more data-parallel ranks or compression=none"));
  }
  if (layout.powersgd_rank < 1) problems.push_back("powersgd_rank must be >= 1, e.g. 4");
  if (layout.zero_gather != GatherCompression::none && layout.zero != 3) {
    problems.push_back(str("zero_gather=", name_of(layout.zero_gather),
                           " compresses ZeRO-3's parameter gathers; it needs zero=3"));
  }
  if (layout.zero == 3 && layout.pp > 1) {
    problems.push_back(
        "zero=3 with pp > 1 is not modelled by the planner (parameters gathered per microbatch "
        "and stage); use zero <= 2 with a pipeline");
  }
  return problems;
}

}  // namespace strata
