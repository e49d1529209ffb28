// `strata plan` and `strata plan calibrate`. Flags are read as text and checked here, so each
// bad value gets a message naming the flag and exit status 2.
#include "strata/cli/plan.h"

#include <toml++/toml.h>
#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <memory>
#include <optional>
#include <utility>
#include <vector>

#include "strata/core/config.h"
#include "strata/core/error.h"
#include "strata/core/precision.h"
#include "strata/dist/comm.h"
#include "strata/dist/launcher.h"
#include "strata/dist/runtime.h"
#include "strata/hf/hf_config.h"
#include "strata/plan/calibrate.h"
#include "strata/plan/checkpoint_plan.h"
#include "strata/plan/layer_profile.h"
#include "strata/plan/published_report.h"
#include "strata/plan/published_runs.h"
#include "strata/plan/report.h"
#include "strata/plan/serve_plan.h"
#include "strata/train/layer_timing.h"

namespace strata {
namespace {

struct PlanOptions {
  std::string model_path, cluster, nodes, global_batch, layout, top = "5";
  bool json = false, allow_tp_across_nodes = false, explain = false, serve = false;
  std::string calibrate_out, calibrate_nproc = "2", profile_layers;
  std::string published_runs, published_fit;
  std::string mtbf_hours, checkpoint_gbs = "2", restart_s = "60";
};

int64_t parse_positive(const std::string& flag, const std::string& text,
                       const std::string& example) {
  errno = 0;
  char* end = nullptr;
  const long long value = std::strtoll(text.c_str(), &end, 10);
  STRATA_REQUIRE(!text.empty() && end != text.c_str() && *end == '\0' && errno == 0 && value >= 1,
                 flag, " '", text, "' must be a whole number >= 1, e.g. ", flag, " ", example);
  return value;
}

double parse_number(const std::string& flag, const std::string& text, const std::string& example) {
  errno = 0;
  char* end = nullptr;
  const double value = std::strtod(text.c_str(), &end);
  STRATA_REQUIRE(!text.empty() && end != text.c_str() && *end == '\0' && errno == 0 &&
                     std::isfinite(value) && value >= 0,
                 flag, " '", text, "' must be a number >= 0, e.g. ", flag, " ", example);
  return value;
}

// --mtbf-hours and its companions, checked before any planning; nullopt without --mtbf-hours.
std::optional<CheckpointCosts> checkpoint_costs(const PlanOptions& options) {
  if (options.mtbf_hours.empty()) return std::nullopt;
  CheckpointCosts costs;
  costs.mtbf_hours_per_node = parse_number("--mtbf-hours", options.mtbf_hours, "5000");
  costs.write_gbs_per_node = parse_number("--checkpoint-gbs", options.checkpoint_gbs, "2");
  costs.restart_s = parse_number("--restart-s", options.restart_s, "60");
  check_checkpoint_costs(costs);
  return costs;
}

// What a training config given as --model fixes for the plan: its [model] (checked as
// `strata train` checks it; unknown keys in any section are errors), and of the keys the file
// sets, train.precision, train.global_batch (the default of --global-batch), and as --layout
// items the [parallel] layout keys, train.micro_batch and train.recompute.
struct ConfigPlan {
  TransformerSpec model;
  std::optional<Precision> precision;
  std::optional<int64_t> global_batch;
  std::vector<std::string> layout_items;  // "key=value" in --layout's spelling
  std::optional<Recompute> recompute;     // train.recompute (also an item above)
  int64_t max_batch_tokens = 0;           // serve.max_batch_tokens (its default when unset)
};

// The config at `path` (`flag` names it in errors), its model checked as `strata train` checks
// it; a [model] init = DIR names its shape in DIR/config.json. Its layout is not checked.
Config load_with_valid_model(const std::string& flag, const std::string& path) {
  const Config config = with_hf_model(load_config(path));
  Config model_only;
  model_only.model = config.model;
  try {
    validate_config(model_only, 1);
  } catch (const UserError& error) {
    throw UserError(str(flag, " ", path, ": ", error.what()));
  }
  return config;
}

ConfigPlan load_model(const std::string& path) {
  STRATA_REQUIRE(!path.empty(), "--model is required: a TOML file with a [model] section, e.g. ",
                 "--model configs/tiny.toml");
  STRATA_REQUIRE(
      std::filesystem::is_regular_file(path), "--model '", path,
      "' is not a readable file; give a training config or a file with a [model] section");
  const Config config = load_with_valid_model("--model", path);
  ConfigPlan plan;
  plan.model = transformer_of(config.model);
  plan.max_batch_tokens = config.serve.max_batch_tokens;
  // Which keys the file itself sets (the parsed config holds defaults for the rest).
  const toml::table file = toml::parse_file(path);
  auto given = [&file](const char* section, const char* key) {
    return file[section][key].node() != nullptr;
  };
  if (given("train", "precision")) plan.precision = config.train.precision;
  if (given("train", "global_batch")) plan.global_batch = config.train.global_batch;
  // The layout settings the file sets, as --layout items: the names are the same.
  const ParallelConfig& parallel = config.parallel;
  for (const LayoutSetting& setting : layout_settings()) {
    const std::string name = setting.name;
    const bool set = given(setting.section, setting.name) ||
                     (name == "schedule" && given("parallel", "pp_schedule"));  // the old key
    // microbatches follow from the batch; dp = -1 is "the devices left over", as in any layout.
    if (!set || name == "microbatches" || (name == "dp" && parallel.dp == -1)) continue;
    plan.layout_items.push_back(name + "=" + setting_text(parallel, setting));
  }
  // The search keeps no compression unless the config asks for one (the layout prints it so).
  const CompressionConfig& compression = config.compression;
  if (given("compression", "gradients") && compression.gradients != GradientCompression::none) {
    plan.layout_items.push_back(str("compression=", name_of(compression.gradients)));
    if (compression.gradients == GradientCompression::powersgd) {
      plan.layout_items.push_back(str("powersgd_rank=", compression.powersgd_rank));
    }
  }
  if (given("compression", "zero_gather") && compression.zero_gather != GatherCompression::none) {
    plan.layout_items.push_back(str("zero_gather=", name_of(compression.zero_gather)));
  }
  if (given("train", "recompute")) {
    plan.layout_items.push_back(str("recompute=", name_of(config.train.recompute)));
    plan.recompute = config.train.recompute;
  }
  if (parallel.pp_layers.automatic) plan.layout_items.push_back("pp_layers=auto");
  return plan;
}

// Whether a candidate layout has every item the config fixes ("schedule" only with a pipeline).
bool matches(const PlanLayout& layout, const std::vector<std::string>& items) {
  const std::string printed = " " + layout_to_string(layout) + " ";
  for (const std::string& item : items) {
    const bool pipeline_item = item.rfind("schedule=", 0) == 0 || item == "pp_layers=auto";
    if (pipeline_item && layout.pp == 1) continue;
    if (printed.find(" " + item + " ") == std::string::npos) return false;
  }
  return true;
}

std::string joined(const std::vector<std::string>& items, const char* separator) {
  std::string out;
  for (const std::string& item : items) out += (out.empty() ? "" : separator) + item;
  return out;
}

// `--serve`: the memory, KV cache and decode speed of a serving layout (tp and pp of --layout or
// the config), or of every tp x pp that fits in a node.
void run_serve_plan(const PlanOptions& options, const ConfigPlan& config,
                    const ClusterProfile& cluster) {
  for (const auto& [given, flag] : {std::make_pair(!options.global_batch.empty(), "--global-batch"),
                                    std::make_pair(options.explain, "--explain"),
                                    std::make_pair(!options.mtbf_hours.empty(), "--mtbf-hours")}) {
    STRATA_REQUIRE(!given, "--serve plans serving; ", flag,
                   " belongs to a training plan: leave it out, or drop --serve");
  }
  PlanInputs inputs = plan_inputs(config.model, cluster, 1);
  if (config.precision) inputs.precision = *config.precision;
  std::vector<std::string> items;
  for (const std::string& item : config.layout_items) {
    if (item.rfind("tp=", 0) == 0 || item.rfind("pp=", 0) == 0) items.push_back(item);
  }
  std::vector<ServePrediction> predictions;
  if (!options.layout.empty() || !items.empty()) {
    const std::string layout = joined(items, ",") + "," + options.layout;
    predictions.push_back(predict_serving(inputs, parse_layout(layout), config.max_batch_tokens));
  } else {
    predictions = search_serving(inputs, config.max_batch_tokens);
  }
  if (options.json) {
    nlohmann::json list = nlohmann::json::array();
    for (const ServePrediction& prediction : predictions)
      list.push_back(serving_to_json(prediction));
    std::cout << (predictions.size() == 1 ? list[0] : list).dump(2) << std::endl;
    return;
  }
  const std::string heading = plan_heading(inputs);  // its batch line is training's
  std::cout << heading.substr(0, heading.find("global batch:"))
            << "serve.max_batch_tokens: " << config.max_batch_tokens << "\n";
  for (size_t i = 0; i < predictions.size(); ++i) {
    std::cout << "\n"
              << (predictions.size() > 1 ? str("#", i + 1, " ") : "")
              << serving_to_text(predictions[i]);
  }
}

void run_plan(const PlanOptions& options) {
  const ConfigPlan config = load_model(options.model_path);
  ClusterProfile cluster = load_cluster(options.cluster);
  if (!cluster.efficiency_note.empty()) std::cerr << "strata: " << cluster.efficiency_note << "\n";
  if (!options.nodes.empty()) cluster.nodes = parse_positive("--nodes", options.nodes, "128");
  if (options.serve) {
    run_serve_plan(options, config, cluster);
    return;
  }
  STRATA_REQUIRE(!options.global_batch.empty() || config.global_batch,
                 "--global-batch is required (the --model file sets no train.global_batch): "
                 "sequences per optimizer step, e.g. --global-batch 1536");
  const int64_t global_batch = options.global_batch.empty()
                                   ? *config.global_batch
                                   : parse_positive("--global-batch", options.global_batch, "1536");
  PlanInputs inputs = plan_inputs(config.model, cluster, global_batch);
  // This machine's measured layers split pp_layers=auto layouts where they apply.
  if (cluster.name == "local") inputs.layer_profile = load_layer_profile(layer_profile_path());
  if (config.precision) {
    inputs.precision = *config.precision;
    if (mixed_precision(*config.precision) != (cluster.device.precision != "fp32")) {
      std::cerr << "strata: note: the plan runs train.precision = " << name_of(*config.precision)
                << " on a profile whose peak_tflops is its " << cluster.device.precision
                << " rate\n";
    }
  }
  if (!config.layout_items.empty() && !options.json) {
    std::cout << "from " << options.model_path << ": " << joined(config.layout_items, " ")
              << (options.layout.empty() ? " (the search keeps these)" : "") << "\n";
    if (config.recompute == Recompute::selective &&
        !selective_recomputes_attention(inputs.model.attention, false)) {
      std::cout << "recompute=selective repeats the " << name_of(inputs.model.attention)
                << " kernel's attention core only with cp > 1; elsewhere it runs as none\n";
    }
  }

  const std::optional<CheckpointCosts> costs = checkpoint_costs(options);
  if (!options.layout.empty()) {
    // The config's items first: --layout's own items override them.
    const std::string layout = joined(config.layout_items, ",") + "," + options.layout;
    const Prediction prediction = predict_layout(inputs, parse_layout(layout));
    const std::optional<CheckpointPlan> checkpoints =
        costs ? std::optional(plan_checkpoints(prediction, cluster, *costs)) : std::nullopt;
    if (options.json) {
      nlohmann::json json = prediction_to_json(prediction);
      if (checkpoints) json["checkpoints"] = checkpoints_to_json(*checkpoints);
      std::cout << json.dump(2) << std::endl;
    } else {
      std::cout << plan_heading(inputs) << "\n"
                << prediction_to_text(prediction, inputs, options.explain)
                << (checkpoints ? checkpoints_to_text(*checkpoints, *costs) : "");
    }
    return;
  }
  SearchOptions search;
  search.top = parse_positive("--top", options.top, "5");
  search.allow_tp_across_nodes = options.allow_tp_across_nodes;
  if (!config.layout_items.empty()) {
    // train.recompute as it runs in each layout: selective that repeats no attention core is
    // the same run as none (effective_recompute), which is the one the search keeps.
    std::vector<std::string> items;
    for (const std::string& item : config.layout_items) {
      if (item.rfind("recompute=", 0) != 0) items.push_back(item);
    }
    search.allowed = [items, recompute = config.recompute,
                      attention = inputs.model.attention](const PlanLayout& layout) {
      return matches(layout, items) &&
             (!recompute ||
              layout.recompute == effective_recompute(*recompute, attention, layout.cp > 1));
    };
  }
  const SearchResult result = search_layouts(inputs, search);
  const std::optional<CheckpointPlan> checkpoints =
      costs ? std::optional(plan_checkpoints(result.top.front().prediction, cluster, *costs))
            : std::nullopt;
  if (options.json) {
    nlohmann::json json = search_to_json(result);
    if (checkpoints) json[0]["checkpoints"] = checkpoints_to_json(*checkpoints);
    std::cout << json.dump(2) << std::endl;
  } else {
    std::cout << plan_heading(inputs) << "\n"
              << search_to_text(result, inputs, options.explain)
              << (checkpoints
                      ? "\nthe fastest layout's " + checkpoints_to_text(*checkpoints, *costs)
                      : "");
  }
}

// This process's command line, with the binary's absolute path, to re-run under mpirun.
std::vector<std::string> own_command_line() {
  std::ifstream file("/proc/self/cmdline", std::ios::binary);
  std::vector<std::string> args;
  std::string arg;
  while (std::getline(file, arg, '\0')) args.push_back(arg);
  std::error_code error;
  const auto self = std::filesystem::read_symlink("/proc/self/exe", error);
  if (!error && !args.empty()) args[0] = self.string();
  return args;
}

// --profile-layers CONFIG: times a layer, the embedding and the head and loss of the config's
// model (its micro batch and precision) on every rank at once, and saves the slowest rank's
// beside the cluster profile `cluster_path`.
void profile_layers(Comm& world, const std::string& config_path, const std::string& cluster_path) {
  // Its layout is not the one timed here.
  const Config config = load_with_valid_model("--profile-layers", config_path);
  STRATA_REQUIRE(config.parallel.micro_batch >= 1, "--profile-layers ", config_path,
                 ": train.micro_batch (", config.parallel.micro_batch, ") must be >= 1");
  constexpr int kRounds = 5;
  LayerProfile profile;
  profile.model = layer_profile_model(transformer_of(config.model));
  profile.precision = config.train.precision;
  profile.micro_batch = config.parallel.micro_batch;
  profile.seconds = time_split_costs(world, config, kRounds);
  if (world.rank() != 0) return;
  const std::string path =
      (std::filesystem::path(cluster_path).parent_path() / "local_layers.toml").string();
  save_layer_profile(path, profile);
  std::cout << "layers of " << config_path << " (micro_batch " << profile.micro_batch << ", "
            << name_of(profile.precision) << "), forward + backward of one microbatch, the "
            << "slowest rank:\n  a layer " << profile.seconds.layer * 1e3 << " ms\n  the embedding "
            << profile.seconds.embedding * 1e3 << " ms\n  the head and loss "
            << profile.seconds.head * 1e3 << " ms\n"
            << "layer profile written to " << path
            << " (parallel.pp_layers = \"auto\" splits this model's stages by it)\n";
}

void run_calibrate(const PlanOptions& options) {
  const int64_t nproc = parse_positive("--nproc", options.calibrate_nproc, "2");
  const std::string out =
      options.calibrate_out.empty() ? local_profile_path() : options.calibrate_out;
  if (nproc > 1 && !started_by_mpi_launcher()) {
    relaunch_under_mpirun(static_cast<int>(nproc), own_command_line());
  }
  int argc = 0;
  char** no_args = nullptr;
  init_mpi(&argc, &no_args);
  int rank = 0;
  try {
    Comm world = Comm::world();
    rank = world.rank();
    configure_rank_threads(0);
    const CalibrationReport report = calibrate_local(world);
    if (rank == 0) {
      save_local_profile(out, report.profile);
      std::cout << calibration_to_text(report) << "profile written to " << out
                << " (use it with --cluster local"
                << (options.calibrate_out.empty() ? "" : str(" or --cluster ", out)) << ")\n";
    }
    if (!options.profile_layers.empty()) profile_layers(world, options.profile_layers, out);
  } catch (const UserError&) {
    finalize_mpi();
    throw;
  }
  finalize_mpi();
}

// --fit's list: comma-separated constant names, or "none".
std::vector<std::string> fit_list(const std::string& text) {
  std::vector<std::string> names;
  if (text == "none") return names;
  size_t start = 0;
  while (start <= text.size()) {
    const size_t comma = std::min(text.find(',', start), text.size());
    const std::string name = text.substr(start, comma - start);
    STRATA_REQUIRE(!name.empty(), "--fit '", text,
                   "': give constant names separated by commas, e.g. "
                   "--fit matmul_efficiency,kernel_overhead_us,stack, or none");
    names.push_back(name);
    start = comma + 1;
  }
  return names;
}

// Every published run's in-sample and leave-one-out prediction next to its published number;
// exit status 1 when an in-sample one is off by more than the file's tolerance.
void run_published(const PlanOptions& options) {
  const PublishedRuns runs = load_published_runs(options.published_runs);
  const std::vector<std::string> free =
      options.published_fit.empty() ? runs.fit : fit_list(options.published_fit);
  const PublishedReport report = published_runs_report(runs, free);
  std::cout << report.text;
  if (report.within < runs.runs.size()) throw CLI::RuntimeError(1);
}

}  // namespace

CLI::App* add_plan_command(CLI::App& app) {
  auto options = std::make_shared<PlanOptions>();
  CLI::App* plan = app.add_subcommand(
      "plan", "Predict memory, step time and throughput of a layout, or search the best layouts");
  plan->add_option("--model", options->model_path, "Training config whose [model] section to plan")
      ->type_name("FILE");
  plan->add_option("--cluster", options->cluster,
                   "Cluster profile: a100-80gb, h100-80gb, h200, local, or a TOML file")
      ->type_name("NAME|FILE");
  plan->add_option("--nodes", options->nodes, "Number of nodes (overrides the profile's)")
      ->type_name("N");
  plan->add_option("--global-batch", options->global_batch, "Sequences per optimizer step")
      ->type_name("B");
  plan->add_option("--layout", options->layout,
                   "Predict this layout: tp=..,pp=..,dp=..,cp=..,"
                   "cp_comm=ring|all-gather|all-to-all,ep=..,vpp=..,zero=..,micro_batch=..,"
                   "recompute=none|selective|full,sequence_parallel=true|false,schedule=..,"
                   "pp_layers=auto")
      ->type_name("K=V,...");
  plan->add_option("--top", options->top, "How many layouts a search returns (default 5)")
      ->type_name("K");
  plan->add_flag("--allow-tp-across-nodes", options->allow_tp_across_nodes,
                 "Let the search place tensor-parallel groups across nodes");
  plan->add_flag("--json", options->json, "Print JSON");
  plan->add_option("--mtbf-hours", options->mtbf_hours,
                   "Mean time between failures of one node: adds the checkpoint interval by "
                   "Young's formula and the throughput lost, sync and async")
      ->type_name("H");
  plan->add_option("--checkpoint-gbs", options->checkpoint_gbs,
                   "Write bandwidth to checkpoint storage per node, GB/s (default 2)")
      ->type_name("G");
  plan->add_option("--restart-s", options->restart_s,
                   "Seconds to relaunch and reload after a failure (default 60)")
      ->type_name("S");
  plan->add_flag("--serve", options->serve,
                 "Plan serving instead: weights, KV cache per token, the sequences that fit and "
                 "decode speed of a tp x pp layout (--layout), or of every one in a node");
  plan->add_flag("--explain", options->explain,
                 "Break the step down: compute by kind, exposed communication by kind and link, "
                 "bubble, optimizer (of the fastest layout in a search)");

  CLI::App* calibrate =
      plan->add_subcommand("calibrate", "Measure this machine and write the local cluster profile");
  calibrate->add_option("--nproc", options->calibrate_nproc, "Ranks to measure with (default 2)")
      ->type_name("N");
  calibrate
      ->add_option("--out", options->calibrate_out,
                   "Where to write the profile (default " + local_profile_path() + ")")
      ->type_name("FILE");
  calibrate
      ->add_option("--profile-layers", options->profile_layers,
                   "Also time a layer, the embedding and the head and loss of this training "
                   "config's model (its train.micro_batch and train.precision), for "
                   "parallel.pp_layers = \"auto\"; saved beside the profile as local_layers.toml")
      ->type_name("CONFIG");

  CLI::App* published = plan->add_subcommand(
      "published", "Predict the published training runs the presets are calibrated on");
  published
      ->add_option("--runs", options->published_runs,
                   "A runs file (default: configs/published/training_runs.toml, built in)")
      ->type_name("FILE");
  published
      ->add_option("--fit", options->published_fit,
                   "The constants to fit instead of the file's `fit`: a comma-separated list of "
                   "matmul_efficiency, matmul_half_dim, kernel_overhead_us, stack; or none")
      ->type_name("LIST");

  auto guarded = [](auto run) {
    try {
      run();
    } catch (const UserError& error) {
      std::cerr << "strata: error: " << error.what() << std::endl;
      throw CLI::RuntimeError(2);
    }
  };
  calibrate->callback([options, guarded] { guarded([&] { run_calibrate(*options); }); });
  published->callback([options, guarded] { guarded([&] { run_published(*options); }); });
  plan->callback([options, calibrate, published, guarded] {
    if (calibrate->parsed() || published->parsed()) return;
    guarded([&] { run_plan(*options); });
  });
  return plan;
}

}  // namespace strata
