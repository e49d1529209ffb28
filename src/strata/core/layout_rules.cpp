// The layout rules, written once. Each rule adds its problem through Findings, which writes the
// message only when a caller wants messages, so the search can ask about many layouts cheaply.
// Every rule looks only at inputs that are valid on their own (a tp of 0 is reported once, as
// a size, not again as a divisor).
#include "strata/core/layout_rules.h"

#include <algorithm>
#include <cstdlib>
#include <utility>

#include "strata/core/config.h"
#include "strata/core/config_keys.h"
#include "strata/core/error.h"

namespace strata {
namespace {

// The problems found; their messages are made only when `messages` is given.
class Findings {
 public:
  explicit Findings(std::vector<std::string>* messages) : messages_(messages) {}

  template <typename MakeMessage>
  void add(MakeMessage&& make_message) {
    ++count_;
    if (messages_ != nullptr) messages_->push_back(make_message());
  }
  bool any() const { return count_ > 0; }

 private:
  std::vector<std::string>* messages_;
  int64_t count_ = 0;
};

// The `count` values closest to `near` (the smaller first on a tie), ascending.
std::vector<int64_t> nearest(std::vector<int64_t> values, int64_t near, size_t count) {
  std::sort(values.begin(), values.end());
  std::stable_sort(values.begin(), values.end(), [near](int64_t a, int64_t b) {
    return std::llabs(a - near) < std::llabs(b - near);
  });
  values.resize(std::min(values.size(), count));
  std::sort(values.begin(), values.end());
  return values;
}

// The divisors of n closest to `near` (at most `count` of them), ascending.
std::vector<int64_t> divisors_near(int64_t n, int64_t near, size_t count) {
  std::vector<int64_t> divisors;
  for (int64_t d = 1; d <= n / d; ++d) {
    if (n % d != 0) continue;
    divisors.push_back(d);
    if (d != n / d) divisors.push_back(n / d);
  }
  return nearest(std::move(divisors), near, count);
}

std::string list_or(const std::vector<int64_t>& values) {
  std::string out;
  for (size_t i = 0; i < values.size(); ++i) {
    out += (i == 0 ? "" : i + 1 == values.size() ? " or " : ", ") + std::to_string(values[i]);
  }
  return out;
}

// A key set to a value as the user writes it: `parallel.schedule = "zb-h1"` in a config,
// `schedule=zb-h1` in --layout, `--global-batch 8` or `--schedule zb-h1` for a flag.
std::string setting(const LayoutVocabulary& names, const std::string& key, const std::string& value,
                    bool is_text = false) {
  if (names.form == LayoutVocabulary::Form::toml) {
    return str(key, " = ", is_text ? config_detail::quote(value) : value);
  }
  if (key.rfind("--", 0) == 0) return str(key, " ", value);
  return str(key, "=", value);
}

std::string interleaved_setting(const LayoutVocabulary& names) {
  return setting(names, names.schedule, name_of(PipelineSchedule::interleaved_one_f_one_b), true);
}

std::string ranks_text(const LayoutVocabulary& names, int64_t ranks) {
  return str(names.ranks_owner, ranks, " ", names.ranks_noun);
}

struct Derived {
  int64_t dp = -1;
  int64_t microbatches = 0;
};

void check_sizes(const Layout& layout, int64_t global_batch, const LayoutVocabulary& names,
                 Findings& found) {
  const std::pair<const std::string*, int64_t> positive[] = {
      {&names.tp, layout.tp},
      {&names.pp, layout.pp},
      {&names.cp, layout.cp},
      {&names.ep, layout.ep},
      {&names.vpp, layout.vpp},
      {&names.micro_batch, layout.micro_batch},
      {&names.global_batch, global_batch}};
  for (const auto& [key, value] : positive) {
    if (value < 1) found.add([&] { return str(*key, " (", value, ") must be >= 1"); });
  }
  if (layout.dp != -1 && layout.dp < 1) {
    found.add([&] {
      return str(names.dp, " (", layout.dp, ") must be >= 1, or -1 for the ", names.ranks_noun,
                 " left over by tp, pp and cp");
    });
  }
  if (layout.zero < 0 || layout.zero > 3) {
    found.add([&] { return str(names.zero, " (", layout.zero, ") must be 0, 1, 2 or 3"); });
  }
  if (layout.microbatches < 0) {
    found.add([&] {
      return str(names.microbatches, " (", layout.microbatches,
                 ") must be >= 0 (0 = derived from the batch sizes)");
    });
  }
}

// tp * pp * dp * cp against the ranks; returns dp, resolved from -1 when the ranks divide.
int64_t check_ranks(const Layout& layout, int64_t ranks, const LayoutVocabulary& names,
                    Findings& found) {
  const int64_t tp = layout.tp, pp = layout.pp, cp = layout.cp, dp = layout.dp;
  if (tp < 1 || pp < 1 || cp < 1) return dp;
  const int64_t model_parallel = tp * pp * cp;
  if (dp == -1) {
    if (ranks % model_parallel == 0) return ranks / model_parallel;
    found.add([&] {
      return str(names.tp, "*pp*cp = ", tp, "*", pp, "*", cp, " = ", model_parallel,
                 " does not divide ", ranks_text(names, ranks), ": ", names.dp, " = -1 takes the ",
                 names.ranks_noun, " left over; choose sizes whose product divides ", ranks);
    });
  } else if (dp >= 1 && model_parallel * dp != ranks) {
    found.add([&] {
      return str(names.tp, "*pp*dp*cp = ", tp, "*", pp, "*", dp, "*", cp, " = ",
                 model_parallel * dp, " does not match ", ranks_text(names, ranks),
                 "; choose sizes whose product is ", ranks, ", or ", setting(names, names.dp, "-1"),
                 " for the ", names.ranks_noun, " left over by tp, pp and cp");
    });
  }
  return dp;
}

// Context parallelism: the sequence in 2 * cp chunks; all-to-all re-shards heads over cp.
void check_context_split(const Layout& layout, const ModelShape& model,
                         const LayoutVocabulary& names, Findings& found) {
  const int64_t tp = layout.tp, cp = layout.cp, seq = model.seq_len;
  if (cp <= 1 || tp < 1 || seq < 1) return;
  // cp values up to 64 that split the sequence, nearest first.
  auto working_cp = [&](auto&& works) {
    std::vector<int64_t> values;
    for (int64_t c = 1; c <= 64; ++c) {
      if (works(c)) values.push_back(c);
    }
    return nearest(std::move(values), cp, 4);
  };
  if (seq % (2 * cp) != 0) {
    found.add([&] {
      const int64_t lower = seq / (2 * cp) * (2 * cp);
      return str(names.cp, " (", cp, ") needs model.seq_len (", seq, ") divisible by 2 * ",
                 names.cp, " = ", 2 * cp,
                 ": the sequence is cut into 2 * cp chunks and rank r holds chunks r and ",
                 "2 * cp - 1 - r, so every rank does the same causal work; ",
                 setting(names, names.cp,
                         list_or(working_cp([&](int64_t c) { return seq % (2 * c) == 0; }))),
                 ", or model.seq_len = ",
                 list_or(lower > 0 ? std::vector<int64_t>{lower, lower + 2 * cp}
                                   : std::vector<int64_t>{2 * cp}),
                 " would work");
    });
  }
  if (layout.cp_comm != ContextParallelComm::all_to_all || model.n_heads < 1 ||
      model.n_kv_heads < 1 || model.n_heads % tp != 0) {
    return;
  }
  const int64_t heads = model.n_heads / tp;
  // kv heads that tp does not divide are replicated and expanded to the query heads.
  const int64_t kv_heads = model.n_kv_heads % tp == 0 ? model.n_kv_heads / tp : heads;
  auto heads_split = [&](int64_t c) {
    return heads % c == 0 && (kv_heads % c == 0 || c % kv_heads == 0);
  };
  if (heads_split(cp)) return;
  found.add([&] {
    const std::string all_to_all =
        setting(names, names.cp_comm, name_of(ContextParallelComm::all_to_all), true);
    return str(
        all_to_all, " re-shards each tp rank's ", heads, " query heads and ", kv_heads,
        " kv heads (model.n_heads = ", model.n_heads, ", model.n_kv_heads = ", model.n_kv_heads,
        ", over ", names.tp, " = ", tp, ") over ", names.cp, " (", cp,
        "): cp must divide the query heads, and cp and the kv heads must divide one ",
        "another (kv heads are replicated when fewer than cp); ",
        setting(names, names.cp, list_or(working_cp(heads_split))), " or ",
        setting(names, names.cp_comm, name_of(ContextParallelComm::ring), true), " would work");
  });
}

void check_model_split(const Layout& layout, const ModelShape& model, const LayoutVocabulary& names,
                       Findings& found) {
  const int64_t tp = layout.tp, cp = layout.cp;
  if (tp >= 1 && model.n_heads >= 1 && model.n_heads % tp != 0) {
    found.add([&] {
      return str(names.tp, " (", tp, ") must divide model.n_heads (", model.n_heads, ")");
    });
  }
  if (tp >= 1 && model.d_ff >= 1 && model.d_ff % tp != 0) {
    found.add([&] {
      return str(names.tp, " (", tp, ") must divide the MLP width ", model.d_ff,
                 " (model.d_ff, or 4 * model.d_model when 0)");
    });
  }
  auto sequence_parallel = [&] { return setting(names, names.sequence_parallel, "true"); };
  if (layout.sequence_parallel && tp == 1) {
    found.add([&] { return str(sequence_parallel(), " needs ", names.tp, " > 1"); });
  }
  // The sequence is split over cp, and each rank's piece again over tp.
  if (layout.sequence_parallel && tp > 1 && cp >= 1 && model.seq_len >= 1 &&
      model.seq_len % (tp * cp) != 0) {
    found.add([&] {
      const std::string splits =
          cp == 1 ? str(names.tp, " (", tp, ")")
                  : str(names.tp, " * ", names.cp, " = ", tp, " * ", cp, " = ", tp * cp);
      return str(sequence_parallel(), " needs ", splits, " to divide model.seq_len (",
                 model.seq_len, ")",
                 cp == 1 ? "" : ": the sequence is split over cp, then each piece over tp");
    });
  }
  check_context_split(layout, model, names, found);
  const int64_t pp = layout.pp, vpp = layout.vpp;
  if (pp >= 1 && vpp >= 1 && model.n_layers >= 1 && model.n_layers < pp * vpp) {
    found.add([&] {
      return str("model.n_layers (", model.n_layers, ") must be >= ", names.pp, " * ", names.vpp,
                 " = ", pp, " * ", vpp, " = ", pp * vpp, ": every pipeline chunk needs a layer");
    });
  }
}

// Multiples of `divisor` on either side of `value`: "8 or 12".
std::string nearest_multiples(int64_t value, int64_t divisor) {
  const int64_t below = value / divisor * divisor;
  if (below < divisor) return std::to_string(divisor);
  return str(below, " or ", below + divisor);
}

// Model chunks per stage (vpp) and the schedule that runs them; `microbatches` is 0 when the
// batch rules could not derive it.
void check_pipeline(const Layout& layout, int64_t microbatches, const LayoutVocabulary& names,
                    Findings& found) {
  const int64_t pp = layout.pp, vpp = layout.vpp;
  const bool interleaved = layout.schedule == PipelineSchedule::interleaved_one_f_one_b;
  const bool v_shape = layout.schedule == PipelineSchedule::zb_v;
  auto zb_v_setting = [&] {
    return setting(names, names.schedule, name_of(PipelineSchedule::zb_v), true);
  };
  if (vpp > 1 && pp == 1 && !interleaved && !v_shape) {
    found.add([&] {
      return str(names.vpp, " (", vpp, ") > 1 needs ", names.pp,
                 " > 1: the model chunks are those of each pipeline stage");
    });
  }
  if (vpp > 1 && !interleaved && !v_shape) {
    found.add([&] {
      return str(names.vpp, " (", vpp, ") > 1 needs ", interleaved_setting(names), ", or ",
                 zb_v_setting(), " with ", setting(names, names.vpp, "2"));
    });
  }
  // ZB-V's V has exactly two arms: rank r holds virtual stages r and 2 * pp - 1 - r. vpp is
  // required rather than implied so that the chunk count, and the pp * vpp entries of
  // parallel.pp_layers, read the same in every layout.
  if (v_shape && vpp != 2) {
    found.add([&] {
      return str(zb_v_setting(), " needs ", setting(names, names.vpp, "2"),
                 " (two model chunks per stage, placed in a V: stage r holds virtual stages r and "
                 "2 * pp - 1 - r), got ",
                 vpp);
    });
  }
  if (v_shape && pp == 1) {
    found.add([&] { return str(zb_v_setting(), " needs ", names.pp, " > 1"); });
  }
  if (!interleaved) return;
  if (vpp < 2) {
    found.add([&] {
      return str(interleaved_setting(names), " needs ", names.vpp,
                 " >= 2 (model chunks per stage), got ", vpp, "; with one chunk per stage use ",
                 setting(names, names.schedule, name_of(PipelineSchedule::one_f_one_b), true));
    });
  }
  if (pp == 1)
    found.add([&] { return str(interleaved_setting(names), " needs ", names.pp, " > 1"); });
  // Megatron's interleaving runs the microbatches in groups of pp.
  if (pp > 1 && microbatches > 0 && microbatches % pp != 0) {
    found.add([&] {
      return str(interleaved_setting(names), " needs ", names.microbatches, " (", microbatches,
                 ") to be a multiple of ", names.pp, " (", pp, "), e.g. ",
                 nearest_multiples(microbatches, pp));
    });
  }
}

void check_experts(const Layout& layout, const ModelShape& model, int64_t dp,
                   const LayoutVocabulary& names, Findings& found) {
  const int64_t ep = layout.ep, cp = layout.cp;
  if (dp >= 1 && cp >= 1 && ep >= 1 && (dp * cp) % ep != 0) {
    found.add([&] {
      return str(names.ep, " (", ep, ") must divide ", names.dp, "*cp = ", dp, "*", cp, " = ",
                 dp * cp);
    });
  }
  if (ep > 1 && model.moe.num_experts == 0) {
    found.add([&] {
      return str(names.ep, " (", ep, ") > 1 needs a mixture-of-experts model: set ",
                 "model.moe.num_experts, or ", setting(names, names.ep, "1"));
    });
  } else if (ep >= 1 && model.moe.num_experts > 0 && model.moe.num_experts % ep != 0) {
    found.add([&] {
      return str(names.ep, " (", ep, ") must divide model.moe.num_experts (", model.moe.num_experts,
                 ")");
    });
  }
}

// The global batch over dp * micro_batch; returns the microbatches when they divide.
int64_t check_batch(const Layout& layout, int64_t dp, bool dp_was_derived, int64_t global_batch,
                    const LayoutVocabulary& names, Findings& found) {
  const int64_t micro_batch = layout.micro_batch;
  if (dp < 1 || global_batch < 1 || micro_batch < 1) return 0;
  const int64_t per_step = dp * micro_batch;
  if (global_batch % per_step != 0) {
    found.add([&] {
      const int64_t lower = global_batch / per_step * per_step;
      std::string fixes = setting(names, names.global_batch,
                                  list_or(lower > 0 ? std::vector<int64_t>{lower, lower + per_step}
                                                    : std::vector<int64_t>{per_step}));
      if (global_batch % dp == 0) {
        fixes += ", or " + setting(names, names.micro_batch,
                                   list_or(divisors_near(global_batch / dp, micro_batch, 6)));
      }
      return str(
          names.global_batch, " (", global_batch, ") must be divisible by ", names.dp, " * ",
          names.micro_batch, " = ", dp, "*", micro_batch, " = ", per_step,
          dp_was_derived ? str(" (dp = -1 resolved to the ", names.ranks_noun, " left over)") : "",
          "; ", fixes, " would work");
    });
    return 0;
  }
  const int64_t derived = global_batch / per_step;
  if (layout.microbatches > 0 && layout.microbatches != derived) {
    found.add([&] {
      return str(names.microbatches, " (", layout.microbatches, ") must equal ", names.global_batch,
                 " / (", names.dp, " * ", names.micro_batch, ") = ", global_batch, " / (", dp, "*",
                 micro_batch, ") = ", derived, "; or set it to 0 to derive it");
    });
  }
  return derived;
}

Derived apply_rules(const Layout& layout, const ModelShape& model, int64_t ranks,
                    int64_t global_batch, const LayoutVocabulary& names, Findings& found) {
  STRATA_CHECK(ranks >= 1, "ranks = ", ranks);
  Derived derived;
  check_sizes(layout, global_batch, names, found);
  derived.dp = check_ranks(layout, ranks, names, found);
  check_model_split(layout, model, names, found);
  check_experts(layout, model, derived.dp, names, found);
  derived.microbatches =
      check_batch(layout, derived.dp, layout.dp == -1, global_batch, names, found);
  check_pipeline(layout, derived.microbatches, names, found);
  return derived;
}

}  // namespace

ModelShape ModelConfig::shape() const {
  ModelShape shape;
  shape.vocab_size = vocab_size;
  shape.d_model = d_model;
  shape.n_layers = n_layers;
  shape.n_heads = n_heads;
  // An unvalidated config may hold nonsense: the rules read 0 for what cannot be resolved.
  shape.n_kv_heads = n_heads >= 1 ? kv_heads() : 0;
  shape.attention_head_dim = head_dim_key;
  shape.d_ff = d_model >= 1 && d_ff >= 0 ? ff_dim() : 0;
  shape.seq_len = seq_len;
  shape.gated_mlp = activation == Activation::swiglu;
  shape.moe.num_experts = moe.num_experts;
  shape.moe.top_k = moe.top_k;
  shape.moe.every = moe.every;
  shape.moe.capacity_factor = moe.capacity_factor;
  shape.moe.gated = moe.activation == Activation::swiglu;
  return shape;
}

LayoutVerdict check_layout(const Layout& layout, const ModelShape& model, int64_t ranks,
                           int64_t global_batch, const LayoutVocabulary& names) {
  LayoutVerdict verdict;
  Findings found(&verdict.problems);
  const Derived derived = apply_rules(layout, model, ranks, global_batch, names, found);
  verdict.dp = derived.dp;
  verdict.microbatches = derived.microbatches;
  return verdict;
}

bool layout_is_valid(const Layout& layout, const ModelShape& model, int64_t ranks,
                     int64_t global_batch) {
  static const LayoutVocabulary unused_names;  // no message is written
  Findings found(nullptr);
  apply_rules(layout, model, ranks, global_batch, unused_names, found);
  return !found.any();
}

std::vector<std::string> schedule_problems(const Layout& layout, const LayoutVocabulary& names) {
  std::vector<std::string> problems;
  Findings found(&problems);
  const std::pair<const std::string*, int64_t> positive[] = {
      {&names.pp, layout.pp}, {&names.vpp, layout.vpp}, {&names.microbatches, layout.microbatches}};
  for (const auto& [key, value] : positive) {
    if (value < 1) found.add([&] { return str(*key, " (", value, ") must be >= 1"); });
  }
  if (!found.any()) check_pipeline(layout, layout.microbatches, names, found);
  return problems;
}

void check_schedule(const Layout& layout, const LayoutVocabulary& names) {
  const std::vector<std::string> problems = schedule_problems(layout, names);
  if (problems.empty()) return;
  std::string message = problems.front();
  for (size_t i = 1; i < problems.size(); ++i) message += "; " + problems[i];
  throw UserError(message);
}

std::vector<std::string> serving_layout_problems(const Layout& layout, const ModelShape& model,
                                                 int64_t ranks, const LayoutVocabulary& names) {
  std::vector<std::string> problems;
  Findings found(&problems);
  for (const auto& [key, value] : {std::pair{&names.tp, layout.tp}, {&names.pp, layout.pp}}) {
    if (value < 1) found.add([&] { return str(*key, " (", value, ") must be >= 1"); });
  }
  if (found.any()) return problems;
  if (layout.tp * layout.pp != ranks || layout.cp != 1 || layout.ep != 1 || layout.vpp != 1 ||
      layout.dp > 1) {
    found.add([&] {
      return str("strata serve runs the model on ", names.tp, " * ", names.pp, " ",
                 names.ranks_noun, " (", layout.tp, " * ", layout.pp, " = ", layout.tp * layout.pp,
                 ", for ", ranks, " ", names.ranks_noun, "); ", names.dp, ", ", names.cp, ", ",
                 names.ep, " and ", names.vpp, " must be 1 (got ", layout.dp, ", ", layout.cp, ", ",
                 layout.ep, ", ", layout.vpp, ")");
    });
  }
  check_model_split(layout, model, names, found);
  return problems;
}

}  // namespace strata
