// Parsing, printing and checking planner layouts. The checks mirror config_validate.cpp's
// rules for the mesh and add the planner's own (ZeRO-3 with a pipeline is not modelled).
#include "strata/plan/layout.h"

#include <cerrno>
#include <cstdlib>

#include "strata/core/error.h"

namespace strata {
namespace {

const char* kLayoutKeys =
    "tp, pp, dp, cp, ep, vpp, zero, micro_batch, recompute, sequence_parallel, schedule";

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

Recompute parse_recompute(const std::string& value) {
  if (value == "none") return Recompute::none;
  if (value == "selective") return Recompute::selective;
  if (value == "full") return Recompute::full;
  throw UserError(str("--layout: recompute=", value, " must be none, selective or full"));
}

// What resolve_layout chooses for a pipeline with no schedule given.
PipelineSchedule default_schedule(const PlanLayout& layout) {
  return layout.vpp > 1 ? PipelineSchedule::interleaved_one_f_one_b : PipelineSchedule::one_f_one_b;
}

}  // namespace

PlanLayout parse_layout(const std::string& text) {
  PlanLayout layout;
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
    if (key == "tp") {
      layout.tp = parse_size(key, value);
    } else if (key == "pp") {
      layout.pp = parse_size(key, value);
    } else if (key == "dp") {
      layout.dp = parse_size(key, value);
    } else if (key == "cp") {
      layout.cp = parse_size(key, value);
    } else if (key == "ep") {
      layout.ep = parse_size(key, value);
    } else if (key == "vpp") {
      layout.vpp = parse_size(key, value);
    } else if (key == "zero") {
      layout.zero = parse_size(key, value);
    } else if (key == "micro_batch") {
      layout.micro_batch = parse_size(key, value);
    } else if (key == "recompute") {
      layout.recompute = parse_recompute(value);
    } else if (key == "sequence_parallel") {
      layout.sequence_parallel = parse_bool(key, value);
    } else if (key == "schedule") {
      layout.schedule = parse_choice<PipelineSchedule>(value);
      STRATA_REQUIRE(layout.schedule, "--layout: schedule=", value, " must be ",
                     spellings_joined<PipelineSchedule>());
    } else {
      throw UserError(str("--layout: unknown key '", key, "'; the keys are ", kLayoutKeys));
    }
  }
  return layout;
}

PlanLayout resolve_layout(PlanLayout layout, int64_t devices) {
  const int64_t model_parallel = layout.tp * layout.pp * layout.cp;
  if (layout.dp == -1 && model_parallel >= 1 && devices % model_parallel == 0) {
    layout.dp = devices / model_parallel;
  }
  if (layout.pp == 1) {
    layout.schedule.reset();
  } else if (!layout.schedule) {
    layout.schedule = default_schedule(layout);
  }
  return layout;
}

std::string schedule_label(const PlanLayout& layout) {
  if (layout.schedule) return name_of(*layout.schedule);
  return layout.pp == 1 ? "none" : name_of(default_schedule(layout));
}

std::string layout_to_string(const PlanLayout& layout) {
  return str("tp=", layout.tp, " pp=", layout.pp, " dp=", layout.dp, " cp=", layout.cp,
             " ep=", layout.ep, " vpp=", layout.vpp, " zero=", layout.zero,
             " micro_batch=", layout.micro_batch, " recompute=", recompute_name(layout.recompute),
             " sequence_parallel=", layout.sequence_parallel ? "true" : "false",
             " schedule=", schedule_label(layout));
}

nlohmann::json layout_to_json(const PlanLayout& layout, int64_t microbatches) {
  return {{"tp", layout.tp},
          {"pp", layout.pp},
          {"dp", layout.dp},
          {"cp", layout.cp},
          {"ep", layout.ep},
          {"vpp", layout.vpp},
          {"zero", layout.zero},
          {"micro_batch", layout.micro_batch},
          {"microbatches", microbatches},
          {"recompute", recompute_name(layout.recompute)},
          {"sequence_parallel", layout.sequence_parallel},
          {"schedule", schedule_label(layout)}};
}

std::vector<std::string> layout_problems(const TransformerSpec& model, const PlanLayout& layout,
                                         int64_t devices, int64_t global_batch) {
  std::vector<std::string> problems;
  auto at_least_one = [&](const char* key, int64_t value) {
    if (value < 1) problems.push_back(str(key, " (", value, ") must be >= 1"));
    return value >= 1;
  };
  bool sizes_ok = at_least_one("tp", layout.tp) & at_least_one("pp", layout.pp) &
                  at_least_one("cp", layout.cp) & at_least_one("ep", layout.ep) &
                  at_least_one("vpp", layout.vpp) & at_least_one("micro_batch", layout.micro_batch);
  if (layout.dp != -1) sizes_ok &= at_least_one("dp", layout.dp);
  if (layout.zero < 0 || layout.zero > 3) {
    problems.push_back(str("zero (", layout.zero, ") must be 0, 1, 2 or 3"));
  }
  if (!sizes_ok) return problems;

  const int64_t model_parallel = layout.tp * layout.pp * layout.cp;
  if (layout.dp == -1) {
    problems.push_back(str("tp*pp*cp = ", layout.tp, "*", layout.pp, "*", layout.cp, " = ",
                           model_parallel, " does not divide the cluster's ", devices,
                           " devices; choose sizes whose product divides ", devices));
  } else if (model_parallel * layout.dp != devices) {
    problems.push_back(str("tp*pp*dp*cp = ", layout.tp, "*", layout.pp, "*", layout.dp, "*",
                           layout.cp, " = ", model_parallel * layout.dp, " does not match the ",
                           "cluster's ", devices, " devices; leave dp out to use the rest"));
  }
  if (model.heads % layout.tp != 0) {
    problems.push_back(
        str("tp (", layout.tp, ") must divide the attention heads (", model.heads, ")"));
  }
  if (model.ffn % layout.tp != 0) {
    problems.push_back(str("tp (", layout.tp, ") must divide the MLP width (", model.ffn, ")"));
  }
  if (layout.sequence_parallel && layout.tp == 1) {
    problems.push_back("sequence_parallel=true needs tp > 1");
  }
  if (layout.sequence_parallel && model.seq % (layout.tp * layout.cp) != 0) {
    problems.push_back(str("sequence_parallel=true needs tp*cp (", layout.tp * layout.cp,
                           ") to divide the sequence length (", model.seq, ")"));
  }
  if (model.seq % layout.cp != 0) {
    problems.push_back(
        str("cp (", layout.cp, ") must divide the sequence length (", model.seq, ")"));
  }
  if (model.layers < layout.pp * layout.vpp) {
    problems.push_back(str("pp*vpp = ", layout.pp, "*", layout.vpp, " = ", layout.pp * layout.vpp,
                           " exceeds the model's ", model.layers,
                           " layers: every pipeline chunk needs a layer"));
  }
  const bool interleaved = layout.schedule == PipelineSchedule::interleaved_one_f_one_b;
  if (layout.pp > 1 && layout.vpp > 1 && !interleaved) {
    problems.push_back(str("vpp (", layout.vpp, ") > 1 needs schedule=interleaved-1f1b"));
  }
  if (interleaved && layout.vpp < 2) {
    problems.push_back("schedule=interleaved-1f1b needs vpp >= 2 (model chunks per stage)");
  }
  if (layout.pp == 1 && layout.vpp > 1) {
    problems.push_back(str("vpp (", layout.vpp, ") > 1 needs pp > 1"));
  }
  if (layout.zero == 3 && layout.pp > 1) {
    problems.push_back(
        "zero=3 with pp > 1 is not modelled (parameters gathered per microbatch "
        "and stage); use zero <= 2 with a pipeline");
  }
  if (layout.ep > 1 && !model.moe.enabled()) {
    problems.push_back(str("ep (", layout.ep, ") > 1 needs a mixture-of-experts model; use ep=1"));
  }
  if (layout.dp >= 1 && (layout.dp * layout.cp) % layout.ep != 0) {
    problems.push_back(str("ep (", layout.ep, ") must divide dp*cp = ", layout.dp * layout.cp));
  }
  if (model.moe.enabled() && model.moe.experts % layout.ep != 0) {
    problems.push_back(
        str("ep (", layout.ep, ") must divide the experts (", model.moe.experts, ")"));
  }
  if (layout.dp >= 1 && global_batch % (layout.dp * layout.micro_batch) != 0) {
    problems.push_back(str("the global batch (", global_batch,
                           ") must be divisible by dp*micro_batch = ", layout.dp, "*",
                           layout.micro_batch, " = ", layout.dp * layout.micro_batch,
                           "; change --global-batch or micro_batch"));
  } else if (layout.dp >= 1 && interleaved &&
             microbatches_of(layout, global_batch) % layout.pp != 0) {
    problems.push_back(str("schedule=interleaved-1f1b needs the microbatches (",
                           microbatches_of(layout, global_batch), ") to be a multiple of pp (",
                           layout.pp, ")"));
  }
  return problems;
}

}  // namespace strata
