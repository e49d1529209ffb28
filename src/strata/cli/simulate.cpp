// `strata simulate`: the pipeline simulator from the command line. Every flag is read as text
// and checked here, so that each bad value gets a message naming the flag and exit status 2.
#include "strata/cli/simulate.h"

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <fstream>
#include <iomanip>
#include <iostream>
#include <memory>
#include <optional>
#include <sstream>

#include "strata/core/config_enums.h"
#include "strata/core/error.h"
#include "strata/core/layout_rules.h"
#include "strata/pipeline/generators.h"
#include "strata/pipeline/simulator.h"
#include "strata/pipeline/timeline_svg.h"

namespace strata {
namespace {

// Keeps a mistyped flag from filling the memory: a million (microbatch, virtual stage) cells
// simulate in a few seconds.
constexpr int64_t kMaxComputeCells = 1000000;

struct SimulateOptions {
  std::string pp, microbatches, vpp = "1", schedule, costs = "1,1,1,0", svg_path;
  std::string old_chunks;  // --chunks, now --vpp
  bool json = false;
};

int parse_count(const std::string& flag, const std::string& text, const std::string& example) {
  STRATA_REQUIRE(!text.empty(), flag, " is required, e.g. ", flag, " ", example);
  errno = 0;
  char* end = nullptr;
  const long value = std::strtol(text.c_str(), &end, 10);
  STRATA_REQUIRE(end != text.c_str() && *end == '\0' && errno == 0 && value >= -(1L << 30) &&
                     value <= (1L << 30),
                 flag, " '", text, "' is not a whole number; use e.g. ", flag, " ", example);
  return static_cast<int>(value);
}

// "F,B,W" or "F,B,W,C": non-negative finite numbers.
StageCosts parse_stage_costs(const std::string& text) {
  const std::string usage =
      "; use F,B,W or F,B,W,C (forward, input grad, weight grad, transfer time per microbatch "
      "per stage, non-negative), e.g. --costs 1,2,1,0.1, or one such group per stage "
      "separated by '/', e.g. --costs 1,2,1/1.5,3,1.5";
  std::vector<double> values;
  size_t begin = 0;
  while (begin <= text.size()) {
    const size_t comma = std::min(text.find(',', begin), text.size());
    const std::string item = text.substr(begin, comma - begin);
    begin = comma + 1;
    errno = 0;
    char* end = nullptr;
    const double value = std::strtod(item.c_str(), &end);
    STRATA_REQUIRE(
        !item.empty() && end != item.c_str() && *end == '\0' && errno == 0 && std::isfinite(value),
        "--costs '", text, "': '", item, "' is not a number", usage);
    STRATA_REQUIRE(value >= 0, "--costs '", text, "': ", item, " is negative", usage);
    values.push_back(value);
  }
  STRATA_REQUIRE(values.size() == 3 || values.size() == 4, "--costs '", text, "' has ",
                 values.size(), " values", usage);
  StageCosts costs;
  costs.forward = values[0];
  costs.backward_input = values[1];
  costs.backward_weight = values[2];
  costs.transfer = values.size() == 4 ? values[3] : 0.0;
  return costs;
}

// One group for every stage, or one per stage: "F,B,W[,C]" or "F,B,W[,C]/F,B,W[,C]/...".
std::vector<StageCosts> parse_costs(const std::string& text, int stages) {
  std::vector<StageCosts> costs;
  size_t begin = 0;
  while (begin <= text.size()) {
    const size_t slash = std::min(text.find('/', begin), text.size());
    costs.push_back(parse_stage_costs(text.substr(begin, slash - begin)));
    begin = slash + 1;
  }
  STRATA_REQUIRE(costs.size() == 1 || static_cast<int>(costs.size()) == stages, "--costs '", text,
                 "' has ", costs.size(), " stage groups but --pp is ", stages,
                 ": give one F,B,W[,C] group for all stages or one per stage, separated by '/'");
  return costs;
}

std::string percent(double fraction) {
  std::ostringstream out;
  out << std::fixed << std::setprecision(2) << 100 * fraction << "%";
  return out.str();
}

void print_text(const SimulationResult& result, const std::vector<StageCosts>& costs) {
  std::cout << "schedule " << result.schedule << ": p=" << result.stages
            << " stages, m=" << result.microbatches << " microbatches, v=" << result.chunks
            << (result.chunks == 1 ? " chunk" : " chunks") << " per rank\n"
            << "costs per microbatch per stage:";
  for (size_t stage = 0; stage < costs.size(); ++stage) {
    const StageCosts& cost = costs[stage];
    if (costs.size() > 1) std::cout << (stage ? "," : "") << " stage " << stage << ":";
    std::cout << " F=" << cost.forward << " B=" << cost.backward_input
              << " W=" << cost.backward_weight << " C=" << cost.transfer;
  }
  if (result.chunks > 1) std::cout << " (each chunk costs 1/" << result.chunks << " of these)";
  std::cout << "\nstep time: " << result.step_time << "\n"
            << "bubble fraction: " << percent(result.bubble_fraction)
            << " (idle time of the most idle stage / step time), mean over stages "
            << percent(result.mean_bubble_fraction) << "\n"
            << "peak in-flight: microbatches whose activations are held (forward done, "
            << "backward not finished)";
  if (result.chunks > 1) std::cout << ", in whole-stage units = chunks / " << result.chunks;
  std::cout << "\n\n"
            << std::setw(6) << "stage" << std::setw(12) << "busy" << std::setw(12) << "idle"
            << std::setw(10) << "bubble" << std::setw(18) << "peak in-flight"
            << "\n";
  for (int rank = 0; rank < result.stages; ++rank) {
    const StageReport& stage = result.per_stage[rank];
    std::ostringstream peak;
    peak << stage.peak_inflight_microbatches;
    if (result.chunks > 1) peak << " (" << stage.peak_inflight_chunks << " chunks)";
    std::cout << std::setw(6) << rank << std::setw(12) << stage.busy << std::setw(12) << stage.idle
              << std::setw(10) << percent(stage.bubble_fraction) << std::setw(18) << peak.str()
              << "\n";
  }
}

void run_simulate(const SimulateOptions& options) {
  STRATA_REQUIRE(!options.schedule.empty(), "--schedule is required; use one of ",
                 spellings_joined<PipelineSchedule>());
  const std::optional<PipelineSchedule> kind = parse_choice<PipelineSchedule>(options.schedule);
  STRATA_REQUIRE(kind, "--schedule '", options.schedule, "' is not a known schedule; use one of ",
                 spellings_joined<PipelineSchedule>());
  STRATA_REQUIRE(options.old_chunks.empty(), "--chunks is now --vpp (model chunks per rank, as ",
                 "parallel.vpp and --layout vpp=); use --vpp ", options.old_chunks);
  // The flags are the layout settings' names (core/layout.h).
  const LayoutVocabulary names = LayoutVocabulary::simulate_flags();
  Layout pipeline;
  pipeline.schedule = *kind;
  pipeline.pp = parse_count(names.pp, options.pp, "4");
  pipeline.microbatches = parse_count(names.microbatches, options.microbatches, "8");
  pipeline.vpp = parse_count(names.vpp, options.vpp, "2");
  const std::vector<StageCosts> costs = parse_costs(options.costs, static_cast<int>(pipeline.pp));
  check_schedule(pipeline, names);
  const int64_t actions_per_rank = pipeline.microbatches * pipeline.vpp;
  STRATA_REQUIRE(actions_per_rank * pipeline.pp <= kMaxComputeCells, "--pp (", pipeline.pp,
                 ") x --microbatches (", pipeline.microbatches, ") x --vpp (", pipeline.vpp,
                 ") is over the simulator's limit of ", kMaxComputeCells,
                 " microbatch-stages; use fewer microbatches or stages");
  const Schedule schedule = build_schedule(pipeline, names);
  const SimulationResult result = simulate_schedule(schedule, costs);

  if (!options.svg_path.empty()) {
    std::ofstream file(options.svg_path);
    file << render_timeline_svg(result);
    file.close();
    STRATA_REQUIRE(file.good(), "--svg: cannot write '", options.svg_path,
                   "'; give a path in a writable directory");
  }
  if (options.json) {
    std::cout << simulation_to_json(result, false).dump(2) << std::endl;
  } else {
    print_text(result, costs);
    if (!options.svg_path.empty())
      std::cout << "\ntimeline written to " << options.svg_path << "\n";
  }
}

}  // namespace

CLI::App* add_simulate_command(CLI::App& app) {
  auto options = std::make_shared<SimulateOptions>();
  CLI::App* command = app.add_subcommand(
      "simulate", "Simulate a pipeline schedule on a cost model: step time, bubble, memory");
  command->add_option("--pp", options->pp, "Pipeline stages p (required)")->type_name("P");
  command->add_option("--microbatches", options->microbatches, "Microbatches per step m (required)")
      ->type_name("M");
  command
      ->add_option("--vpp", options->vpp, "Model chunks per rank v (interleaved-1f1b; 2 for zb-v)")
      ->type_name("V");
  command->add_option("--chunks", options->old_chunks)->group("");  // the old name: an error
  command
      ->add_option("--schedule", options->schedule,
                   spellings_joined<PipelineSchedule>() + " (required)")
      ->type_name("S");
  command
      ->add_option("--costs", options->costs,
                   "F,B,W[,C]: forward, input grad, weight grad, transfer time per microbatch "
                   "per stage (default 1,1,1,0); or one group per stage separated by '/'")
      ->type_name("F,B,W,C");
  command->add_option("--svg", options->svg_path, "Write the timeline as SVG to FILE")
      ->type_name("FILE");
  command->add_flag("--json", options->json, "Print the report as JSON");
  command->callback([options] {
    try {
      run_simulate(*options);
    } catch (const UserError& error) {
      std::cerr << "strata: error: " << error.what() << std::endl;
      throw CLI::RuntimeError(2);
    }
  });
  return command;
}

}  // namespace strata
