// The search enumerates the layout space, prices each candidate's memory (cheap), and only for
// those that fit runs the full prediction, in order of a lower bound on their step time (their
// busiest stage's work plus the phases after the pipeline, no bubble): once that bound exceeds
// the K-th best prediction so far, no remaining candidate can enter the top K, and those are
// judged by their bound. That keeps the pipeline simulations to a handful per search.
#include "strata/plan/search.h"

#include <algorithm>
#include <array>
#include <cmath>
#include <iomanip>
#include <map>
#include <sstream>
#include <tuple>

#include "strata/core/error.h"

namespace strata {
namespace {

constexpr int64_t kMaxMicroBatch = 64;
constexpr int64_t kMaxVirtualStages = 8;
constexpr int64_t kMinTokensPerContextRank = 256;

std::vector<int64_t> divisors(int64_t n) {
  std::vector<int64_t> out;
  for (int64_t d = 1; d <= n; ++d) {
    if (n % d == 0) out.push_back(d);
  }
  return out;
}

std::string gigabytes(double bytes, int digits = 1) {
  std::ostringstream out;
  out << std::fixed << std::setprecision(digits) << bytes / 1e9 << " GB";
  return out.str();
}

// Fewer and smaller parallel dimensions first: among equal predictions, the simpler layout.
// The ring, cp_comm's default, counts as the simplest exchange; the default split as simpler
// than pp_layers=auto.
std::tuple<int64_t, int, int64_t, int64_t, int64_t, int64_t, int64_t, int, bool> complexity(
    const PlanLayout& layout) {
  return std::make_tuple(layout.cp, static_cast<int>(layout.cp_comm), layout.ep, layout.zero,
                         layout.vpp, layout.pp, layout.tp, static_cast<int>(layout.recompute),
                         layout.pp_layers_auto);
}

std::string seconds_text(double seconds) {
  std::ostringstream out;
  out << std::setprecision(3) << seconds << " s";
  return out.str();
}

// What the dimensions of the search read: the model, the cluster and the batch.
struct SearchSpace {
  const TransformerSpec& spec;
  int64_t devices = 1, devices_per_node = 1, global_batch = 1;
  bool allow_tp_across_nodes = false;
};

// One dimension of the search: `layout` (its earlier dimensions set) with this one set to each
// of its values, in the order the search walks them.
using Dimension = std::vector<PlanLayout> (*)(const PlanLayout& layout, const SearchSpace& space);

// `layout` with `set` applied for each of `values`, in order.
template <typename Value, typename Set>
std::vector<PlanLayout> each(const PlanLayout& layout, const std::vector<Value>& values, Set set) {
  std::vector<PlanLayout> out;
  for (const Value& value : values) {
    out.push_back(layout);
    set(out.back(), value);
  }
  return out;
}

// tp: the divisors of the cluster, inside a node unless allowed.
std::vector<PlanLayout> tp_values(const PlanLayout& layout, const SearchSpace& space) {
  std::vector<int64_t> tps;
  for (int64_t tp : divisors(space.devices)) {
    const bool in_node = tp <= space.devices_per_node && space.devices_per_node % tp == 0;
    if (in_node || space.allow_tp_across_nodes) tps.push_back(tp);
  }
  return each(layout, tps, [](PlanLayout& out, int64_t tp) { out.tp = tp; });
}

// cp: the divisors of what tp leaves, each rank keeping at least kMinTokensPerContextRank.
std::vector<PlanLayout> cp_values(const PlanLayout& layout, const SearchSpace& space) {
  std::vector<int64_t> cps;
  // Context-parallel attention is computed by the blockwise kernel only (as the runtime checks).
  const bool blockwise = space.spec.attention == AttentionKernel::blockwise;
  for (int64_t cp : divisors(space.devices / layout.tp)) {
    if (cp == 1 || (blockwise && space.spec.seq_len / cp >= kMinTokensPerContextRank))
      cps.push_back(cp);
  }
  return each(layout, cps, [](PlanLayout& out, int64_t cp) { out.cp = cp; });
}

// pp: the divisors of what tp and cp leave; dp the rest.
std::vector<PlanLayout> pp_values(const PlanLayout& layout, const SearchSpace& space) {
  const int64_t left = space.devices / (layout.tp * layout.cp);
  return each(layout, divisors(left), [left](PlanLayout& out, int64_t pp) {
    out.pp = pp;
    out.dp = left / pp;
  });
}

// Each exchange for cp > 1; the rules drop all-to-all where the heads do not split.
std::vector<PlanLayout> cp_comm_values(const PlanLayout& layout, const SearchSpace&) {
  const std::vector<ContextParallelComm> cp_comms =
      layout.cp == 1 ? std::vector<ContextParallelComm>{ContextParallelComm::ring}
                     : std::vector<ContextParallelComm>{ContextParallelComm::ring,
                                                        ContextParallelComm::all_gather,
                                                        ContextParallelComm::all_to_all};
  return each(layout, cp_comms,
              [](PlanLayout& out, ContextParallelComm cp_comm) { out.cp_comm = cp_comm; });
}

// ep: the divisors of dp * cp for an MoE model.
std::vector<PlanLayout> ep_values(const PlanLayout& layout, const SearchSpace& space) {
  const std::vector<int64_t> eps =
      space.spec.moe.enabled() ? divisors(layout.dp * layout.cp) : std::vector<int64_t>{1};
  return each(layout, eps, [](PlanLayout& out, int64_t ep) { out.ep = ep; });
}

// micro_batch: the divisors of the batch per replica, up to kMaxMicroBatch.
std::vector<PlanLayout> micro_batch_values(const PlanLayout& layout, const SearchSpace& space) {
  std::vector<int64_t> micro_batches = divisors(space.global_batch / layout.dp);
  micro_batches.erase(std::upper_bound(micro_batches.begin(), micro_batches.end(), kMaxMicroBatch),
                      micro_batches.end());
  return each(layout, micro_batches,
              [](PlanLayout& out, int64_t micro_batch) { out.micro_batch = micro_batch; });
}

// The schedule with its vpp: 1f1b, and with a pipeline zb-h1, and zb-v (2 chunks) and
// interleaving with chunks of equal layers.
std::vector<PlanLayout> schedule_values(const PlanLayout& layout, const SearchSpace& space) {
  std::vector<std::pair<PipelineSchedule, int64_t>> schedules = {
      {PipelineSchedule::one_f_one_b, 1}};
  if (layout.pp > 1) {
    schedules.push_back({PipelineSchedule::zb_h1, 1});
    if (space.spec.n_layers % (layout.pp * 2) == 0) {
      schedules.push_back({PipelineSchedule::zb_v, 2});
    }
    for (int64_t vpp = 2; vpp <= kMaxVirtualStages; ++vpp) {
      if (space.spec.n_layers % (layout.pp * vpp) == 0) {
        schedules.push_back({PipelineSchedule::interleaved_one_f_one_b, vpp});
      }
    }
  }
  return each(layout, schedules, [](PlanLayout& out, std::pair<PipelineSchedule, int64_t> with) {
    out.schedule = with.first;
    out.vpp = with.second;
  });
}

std::vector<PlanLayout> sequence_parallel_values(const PlanLayout& layout, const SearchSpace&) {
  return each(layout, std::vector<bool>{false, true},
              [](PlanLayout& out, bool sp) { out.sequence_parallel = sp; });
}

// Selective only where it repeats the attention core: elsewhere it is the same run as none.
std::vector<PlanLayout> recompute_values(const PlanLayout& layout, const SearchSpace& space) {
  std::vector<Recompute> values = {Recompute::none, Recompute::full};
  if (selective_recomputes_attention(space.spec.attention, layout.cp > 1))
    values.insert(values.begin() + 1, Recompute::selective);
  return each(layout, values,
              [](PlanLayout& out, Recompute recompute) { out.recompute = recompute; });
}

// ZeRO shards over dp * cp (nothing to shard on one replica); ZeRO-3 with a pipeline is not
// modelled (layout_problems).
std::vector<PlanLayout> zero_values(const PlanLayout& layout, const SearchSpace&) {
  const int64_t max_zero = layout.dp * layout.cp == 1 ? 0 : layout.pp == 1 ? 3 : 2;
  std::vector<int64_t> zeros;
  for (int64_t zero = 0; zero <= max_zero; ++zero) zeros.push_back(zero);
  return each(layout, zeros, [](PlanLayout& out, int64_t zero) { out.zero = zero; });
}

// With a pipeline, the runtime's default split (by FLOPs) and the split balanced by time
// (pp_layers=auto, stage_split.h; search_layouts keeps the latter where the two differ).
std::vector<PlanLayout> pp_layers_values(const PlanLayout& layout, const SearchSpace&) {
  return each(layout, layout.pp > 1 ? std::vector<bool>{false, true} : std::vector<bool>{false},
              [](PlanLayout& out, bool automatic) { out.pp_layers_auto = automatic; });
}

// The sizes, then the choices a layout of those sizes makes; the first dimension outermost.
constexpr std::array<Dimension, 3> kSizeDimensions = {tp_values, cp_values, pp_values};
constexpr std::array<Dimension, 8> kChoiceDimensions = {
    cp_comm_values,           ep_values,        micro_batch_values, schedule_values,
    sequence_parallel_values, recompute_values, zero_values,        pp_layers_values};

// Every combination of the dimensions' values for `start`, the last dimension varying fastest.
template <size_t N>
std::vector<PlanLayout> product(const PlanLayout& start, const std::array<Dimension, N>& dimensions,
                                const SearchSpace& space) {
  std::vector<PlanLayout> layouts = {start};
  for (const Dimension& dimension : dimensions) {
    std::vector<PlanLayout> varied;
    for (const PlanLayout& layout : layouts) {
      for (PlanLayout& next : dimension(layout, space)) varied.push_back(std::move(next));
    }
    layouts = std::move(varied);
  }
  return layouts;
}

// Every valid layout of the search space, resolved. The space is the divisors of the cluster
// (so the sizes fill it) and the choices above; the layout rules (core/layout_rules.h) decide
// which of them are valid.
std::vector<PlanLayout> enumerate_layouts(const PlanInputs& inputs, const SearchOptions& options) {
  const SearchSpace space{inputs.model, inputs.cluster.devices(), inputs.cluster.devices_per_node,
                          inputs.global_batch, options.allow_tp_across_nodes};
  auto valid = [&](const PlanLayout& layout) {
    return layout_is_valid(layout, space.spec, space.devices, space.global_batch);
  };
  std::vector<PlanLayout> out;
  // The sizes alone, everything else at its plainest (micro batch 1, no expert split, one
  // chunk per stage, 1f1b, no sequence parallelism): a rule broken here is broken by every
  // layout with these sizes.
  for (const PlanLayout& sizes : product(PlanLayout{}, kSizeDimensions, space)) {
    if (!valid(sizes)) continue;
    for (const PlanLayout& layout : product(sizes, kChoiceDimensions, space)) {
      if (!valid(layout)) continue;
      if (options.allowed && !options.allowed(layout)) continue;
      out.push_back(layout);
    }
  }
  return out;
}

// The parts of a step a layout can lose time in, as (reason, seconds).
std::vector<std::pair<std::string, double>> time_parts(const TimeBreakdown& time,
                                                       const PlanLayout& layout) {
  return {{layout.recompute == Recompute::none ? "compute" : "recompute", time.compute},
          {"communication (tensor-parallel)", time.tensor_parallel},
          {"communication (context-parallel)", time.context_parallel},
          {"communication (expert all-to-all)", time.expert_all_to_all},
          {"bubble", time.pipeline_bubble},
          {"communication (pipeline p2p)", time.pipeline_p2p},
          {"communication (data-parallel)", time.data_parallel},
          {"optimizer", time.optimizer}};
}

// The part where `candidate` loses most time against `best`, and by how much it is slower.
std::pair<std::string, std::string> loss_reason(const Prediction& candidate,
                                                const Prediction& best) {
  if (candidate.step_time_s <= best.step_time_s) {
    if (candidate.memory.total() > best.memory.total()) {
      return {"memory",
              str("as fast as the fastest but needs ", gigabytes(candidate.memory.total(), 2),
                  " per device vs ", gigabytes(best.memory.total(), 2))};
    }
    return {"a simpler equal",
            "the same predicted time and memory as the fastest, which uses "
            "fewer or smaller parallel dimensions"};
  }
  const auto mine = time_parts(candidate.time, candidate.layout);
  const auto theirs = time_parts(best.time, best.layout);
  size_t worst = 0;
  double worst_delta = -1;
  for (size_t i = 0; i < mine.size(); ++i) {
    const double delta = mine[i].second - theirs[i].second;
    if (delta > worst_delta) {
      worst_delta = delta;
      worst = i;
    }
  }
  std::string reason = mine[worst].first;
  return {reason,
          str(seconds_text(candidate.step_time_s - best.step_time_s), " slower than the fastest (",
              mine[worst].first, " ", seconds_text(mine[worst].second), " vs ",
              seconds_text(theirs[worst].second), ")")};
}

struct Bounded {
  PlanLayout layout;
  double bound = 0;  // predict_lower_bound's step time
};

}  // namespace

SearchResult search_layouts(const PlanInputs& inputs, const SearchOptions& options) {
  STRATA_REQUIRE(options.top >= 1, "--top (", options.top, ") must be >= 1");
  CostModel model(inputs);
  // pp_layers=auto only where it splits otherwise than the default: the same split predicts
  // alike, and the default is the simpler.
  std::vector<PlanLayout> layouts;
  for (const PlanLayout& layout : enumerate_layouts(inputs, options)) {
    PlanLayout by_flops = layout;
    by_flops.pp_layers_auto = false;
    if (layout.pp_layers_auto && model.partition(layout) == model.partition(by_flops)) continue;
    layouts.push_back(layout);
  }
  STRATA_REQUIRE(!layouts.empty(), "no layout of this model divides the cluster's ",
                 inputs.cluster.devices(), " devices with a global batch of ", inputs.global_batch,
                 " (the batch must be divisible by the data-parallel size, the heads and the MLP ",
                 "width by tp <= ", inputs.cluster.devices_per_node,
                 "); change --global-batch or the cluster size");
  SearchResult result;
  result.candidates = static_cast<int64_t>(layouts.size());

  // Memory first: the layouts that do not fit lose for that reason alone.
  LossGroup no_fit;
  no_fit.reason = "does not fit";
  double smallest = 0;
  std::vector<PlanLayout> fitting;
  for (const PlanLayout& layout : layouts) {
    const double bytes = model.memory(layout).total();
    if (bytes <= inputs.cluster.memory_bytes()) {
      fitting.push_back(layout);
      continue;
    }
    if (no_fit.count == 0 || bytes < smallest) {
      smallest = bytes;
      no_fit.example = layout;
    }
    ++no_fit.count;
  }
  result.fitting = static_cast<int64_t>(fitting.size());
  if (fitting.empty()) {
    const double capacity = inputs.cluster.memory_bytes();
    const int64_t nodes_needed =
        inputs.cluster.nodes * static_cast<int64_t>(std::ceil(smallest / capacity));
    throw UserError(str("no layout fits: the smallest of the ", result.candidates,
                        " valid layouts needs ", gigabytes(smallest), " per device (",
                        layout_to_string(no_fit.example), ") and each ", inputs.cluster.device.name,
                        " has ", gigabytes(capacity), "; use more devices (about ", nodes_needed,
                        " nodes of ", inputs.cluster.devices_per_node,
                        "), devices with more memory, a smaller global batch, a shorter sequence "
                        "or a smaller model",
                        inputs.model.attention == AttentionKernel::eager
                            ? "; or model.attention = \"blockwise\", which keeps no s x s "
                              "scores and splits a sequence over ranks (cp)"
                            : ""));
  }
  // Enough digits to show the difference from the capacity.
  int digits = 2;
  while (digits < 6 &&
         gigabytes(smallest, digits) == gigabytes(inputs.cluster.memory_bytes(), digits)) {
    ++digits;
  }
  no_fit.detail = str("the smallest needs ", gigabytes(smallest, digits), " of ",
                      gigabytes(inputs.cluster.memory_bytes(), digits));

  std::vector<Bounded> bounded;
  bounded.reserve(fitting.size());
  for (const PlanLayout& layout : fitting) {
    bounded.push_back({layout, model.predict_lower_bound(layout).step_time_s});
  }
  std::sort(bounded.begin(), bounded.end(),
            [](const Bounded& a, const Bounded& b) { return a.bound < b.bound; });

  std::vector<Prediction> predicted;
  std::vector<Bounded> pruned;
  for (const Bounded& candidate : bounded) {
    if (static_cast<int64_t>(predicted.size()) >= options.top) {
      std::vector<double> times;
      for (const Prediction& p : predicted) times.push_back(p.step_time_s);
      std::nth_element(times.begin(), times.begin() + (options.top - 1), times.end());
      if (candidate.bound >= times[options.top - 1]) {
        pruned.push_back(candidate);
        continue;
      }
    }
    predicted.push_back(model.predict(candidate.layout));
  }
  // Fastest first; among equally fast layouts the one that needs less memory, then the simpler.
  std::stable_sort(predicted.begin(), predicted.end(),
                   [](const Prediction& a, const Prediction& b) {
                     if (a.step_time_s != b.step_time_s) return a.step_time_s < b.step_time_s;
                     if (a.memory.total() != b.memory.total()) {
                       return a.memory.total() < b.memory.total();
                     }
                     return complexity(a.layout) < complexity(b.layout);
                   });

  const Prediction& best = predicted.front();
  std::map<std::string, LossGroup> groups;
  auto lose = [&](const Prediction& loser) {
    auto [reason, detail] = loss_reason(loser, best);
    LossGroup& group = groups[reason];
    if (group.count == 0) {
      group.reason = reason;
      group.example = loser.layout;
      group.detail = detail;
    }
    ++group.count;
  };
  for (size_t i = 0; i < predicted.size(); ++i) {
    if (static_cast<int64_t>(i) < options.top) {
      RankedLayout ranked{predicted[i], i == 0 ? "fastest" : ""};
      if (i > 0) {
        auto [reason, detail] = loss_reason(predicted[i], best);
        ranked.reason = str(reason, ": ", detail);
      }
      result.top.push_back(ranked);
    } else {
      lose(predicted[i]);
    }
  }
  // Pruned candidates are judged on their lower-bound prediction, best first.
  for (const Bounded& candidate : pruned) lose(model.predict_lower_bound(candidate.layout));

  if (no_fit.count > 0) result.lost.push_back(no_fit);
  for (auto& [reason, group] : groups) result.lost.push_back(group);
  std::stable_sort(result.lost.begin(), result.lost.end(),
                   [](const LossGroup& a, const LossGroup& b) { return a.count > b.count; });
  result.simulations = model.simulations();
  return result;
}

namespace {

// The run config with the layout's [parallel] keys and micro batch.
Config with_layout(Config config, const PlanLayout& layout) {
  ParallelConfig& parallel = config.parallel;
  parallel.auto_layout = false;
  parallel.pp_layers = PipelineLayers{layout.pp_layers_auto, {}};
  static_cast<Layout&>(parallel) = layout;
  parallel.microbatches = 0;
  return config;
}

}  // namespace

AutoLayout choose_layout(const Config& config, int64_t world, const ClusterProfile& cluster) {
  STRATA_CHECK(world >= 1, "world ", world);
  ClusterProfile ranks = cluster;
  if (world <= cluster.devices_per_node) {
    ranks.nodes = 1;
    ranks.devices_per_node = world;
  } else {
    STRATA_REQUIRE(world % cluster.devices_per_node == 0, "parallel.auto: ", world,
                   " ranks do not fill whole nodes of the cluster profile '", cluster.name, "' (",
                   cluster.devices_per_node, " devices per node); use a multiple of ",
                   cluster.devices_per_node, " ranks, or set the layout in [parallel]");
    ranks.nodes = world / cluster.devices_per_node;
  }
  PlanInputs inputs = plan_inputs(transformer_of(config.model), ranks, config.train.global_batch);
  // The runtime trains in train.precision whatever the profile's device would use.
  inputs.precision = config.train.precision;

  SearchOptions options;
  options.top = 2;
  options.allowed = [&config](const PlanLayout& layout) {
    // Recomputation is the run's own choice (train.recompute), as it will run in this layout.
    return layout.recompute ==
           effective_recompute(config.train.recompute, config.model.attention, layout.cp > 1);
  };
  const SearchResult result = search_layouts(inputs, options);
  AutoLayout choice;
  choice.prediction = result.top.front().prediction;
  choice.config = with_layout(config, choice.prediction.layout);
  const Prediction& chosen = choice.prediction;
  choice.explanation =
      str("parallel.auto: ", layout_to_string(chosen.layout), " on ", world, " ranks (profile '",
          cluster.name, "'): predicted ", seconds_text(chosen.step_time_s), " per step, ",
          gigabytes(chosen.memory.total()), " of ", gigabytes(chosen.memory_capacity), " per rank");
  if (result.top.size() > 1) {
    choice.explanation += str("; next best ", layout_to_string(result.top[1].prediction.layout),
                              " lost on ", result.top[1].reason);
  }
  return choice;
}

}  // namespace strata
