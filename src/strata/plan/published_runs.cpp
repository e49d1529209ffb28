#include "strata/plan/published_runs.h"

#include <toml++/toml.h>
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <map>

#include "strata/core/error.h"

namespace strata {

// configs/published/training_runs.toml, compiled in by src/CMakeLists.txt.
extern const char* const kPublishedRunsToml;

namespace {

const toml::node& required(const toml::table& run, const std::string& key,
                           const std::string& where) {
  const toml::node* node = run.get(key);
  STRATA_REQUIRE(node != nullptr, where, ": ", key, " is missing");
  return *node;
}

std::string text_key(const toml::table& run, const std::string& key, const std::string& where) {
  const std::optional<std::string> value = required(run, key, where).value<std::string>();
  STRATA_REQUIRE(value && !value->empty(), where, ": ", key, " must be a non-empty string");
  return *value;
}

int64_t count_key(const toml::table& run, const std::string& key, const std::string& where) {
  const std::optional<int64_t> value = required(run, key, where).value_exact<int64_t>();
  STRATA_REQUIRE(value && *value >= 1, where, ": ", key, " must be a whole number >= 1");
  return *value;
}

double positive_key(const toml::table& run, const std::string& key, const std::string& where) {
  const toml::node& node = required(run, key, where);
  const std::optional<double> value = node.value<double>();
  STRATA_REQUIRE(node.is_number() && value && *value > 0 && std::isfinite(*value), where, ": ", key,
                 " must be a number > 0");
  return *value;
}

std::string listed(const std::vector<std::string>& names) {
  std::string out;
  for (const std::string& name : names) out += (out.empty() ? "" : ", ") + name;
  return out;
}

PublishedRun read_run(const toml::table& table, const std::string& where,
                      const std::map<std::string, double>& stacks) {
  static const std::vector<std::string> kKeys = {
      "name",  "source", "cluster",      "nodes",  "layers", "hidden",    "heads",
      "vocab", "seq",    "global_batch", "layout", "metric", "published", "stack"};
  for (const auto& [key, value] : table) {
    const std::string name(key.str());
    STRATA_REQUIRE(std::find(kKeys.begin(), kKeys.end(), name) != kKeys.end(), where,
                   ": unknown key '", name, "'; a run has ", listed(kKeys));
  }
  PublishedRun run;
  run.name = text_key(table, "name", where);
  const std::string named = str(where, " (", run.name, ")");
  run.source = text_key(table, "source", named);
  ClusterProfile cluster = load_cluster(text_key(table, "cluster", named));
  cluster.nodes = count_key(table, "nodes", named);
  const TransformerSpec model =
      megatron_gpt(count_key(table, "layers", named), count_key(table, "hidden", named),
                   count_key(table, "heads", named), count_key(table, "vocab", named),
                   count_key(table, "seq", named));
  run.inputs = plan_inputs(model, cluster, count_key(table, "global_batch", named));
  run.layout = resolve_layout(parse_layout(text_key(table, "layout", named)), cluster.devices());
  const std::vector<std::string> problems =
      layout_problems(model, run.layout, cluster.devices(), run.inputs.global_batch);
  STRATA_REQUIRE(problems.empty(), named, ": layout: ", problems.empty() ? "" : problems.front());
  run.metric = text_key(table, "metric", named);
  STRATA_REQUIRE(run.metric == "mfu" || run.metric == "hardware_tflops_per_device", named,
                 ": metric '", run.metric, "' must be \"mfu\" or \"hardware_tflops_per_device\"");
  run.published = positive_key(table, "published", named);
  run.stack = text_key(table, "stack", named);
  const auto stack = stacks.find(run.stack);
  STRATA_REQUIRE(stack != stacks.end(), named, ": stack '", run.stack, "' is not a key of [stack]");
  run.stack_efficiency = stack->second;
  return run;
}

}  // namespace

PublishedRuns load_published_runs(const std::string& path) {
  toml::table root;
  const std::string origin = path.empty() ? "the built-in published runs" : path;
  try {
    root = path.empty() ? toml::parse(kPublishedRunsToml) : toml::parse_file(path);
  } catch (const toml::parse_error& error) {
    throw UserError(
        str(origin, ": ", error.description(), " (line ", error.source().begin.line, ")"));
  }
  PublishedRuns out;
  for (const auto& [key, value] : root) {
    const std::string name(key.str());
    STRATA_REQUIRE(name == "tolerance" || name == "stack" || name == "run", origin,
                   ": unknown key '", name,
                   "'; the file has tolerance, [stack] and [[run]] tables");
  }
  std::map<std::string, double> stacks;
  if (const toml::table* table = root["stack"].as_table()) {
    for (const auto& [key, value] : *table) {
      const std::optional<double> efficiency = value.value<double>();
      STRATA_REQUIRE(efficiency && *efficiency > 0 && *efficiency <= 1, origin, ": stack.",
                     key.str(), " must be a throughput fraction in (0, 1]");
      stacks[std::string(key.str())] = *efficiency;
    }
  }
  if (const toml::node* tolerance = root.get("tolerance")) {
    const std::optional<double> value = tolerance->value<double>();
    STRATA_REQUIRE(value && *value > 0 && *value < 1, origin,
                   ": tolerance must be a fraction in (0, 1), e.g. 0.10");
    out.tolerance = *value;
  }
  const toml::array* runs = root["run"].as_array();
  STRATA_REQUIRE(runs != nullptr && !runs->empty(), origin, ": no [[run]] tables");
  for (size_t i = 0; i < runs->size(); ++i) {
    const toml::table* table = (*runs)[i].as_table();
    const std::string where = str(origin, ": run ", i + 1);
    STRATA_REQUIRE(table != nullptr, where, " must be a [[run]] table");
    out.runs.push_back(read_run(*table, where, stacks));
  }
  return out;
}

double metric_of(const Prediction& prediction, const std::string& metric) {
  if (metric == "mfu") return prediction.mfu;
  STRATA_CHECK(metric == "hardware_tflops_per_device", "unknown metric ", metric);
  return prediction.hardware_tflops_per_device;
}

double predicted_value(const PublishedRun& run, const Prediction& prediction) {
  return metric_of(prediction, run.metric) * run.stack_efficiency;
}

PublishedReport published_runs_report(const PublishedRuns& runs) {
  auto format = [](const std::string& metric, double value) {
    char buffer[32];
    if (metric == "mfu") {
      std::snprintf(buffer, sizeof buffer, "%.1f%% MFU", 100 * value);
    } else {
      std::snprintf(buffer, sizeof buffer, "%.0f TFLOP/s", value);
    }
    return std::string(buffer);
  };
  PublishedReport report;
  std::string& out = report.text;
  out =
      "| run | devices | layout | published | predicted | predicted / published | step (s) | "
      "compute | tp comm | bubble | dp comm | stack | source |\n"
      "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |\n";
  for (const PublishedRun& run : runs.runs) {
    CostModel model(run.inputs);
    const Prediction prediction = model.predict(run.layout);
    const double predicted = predicted_value(run, prediction);
    if (std::abs(predicted / run.published - 1) <= runs.tolerance) ++report.within;
    char numbers[160];
    std::snprintf(numbers, sizeof numbers, "%.3f | %.2f | %.2f | %.2f | %.2f | %.2f",
                  predicted / run.published, prediction.step_time_s, prediction.time.compute,
                  prediction.time.tensor_parallel, prediction.time.pipeline_bubble,
                  prediction.time.data_parallel);
    out += str("| ", run.name, " | ", run.inputs.cluster.devices(), " ",
               run.inputs.cluster.device.name, " | ", layout_to_string(run.layout), " | ",
               format(run.metric, run.published), " | ", format(run.metric, predicted), " | ",
               numbers, " | ", run.stack, " (", run.stack_efficiency, ") | ", run.source, " |\n");
  }
  out += str(report.within, " of ", runs.runs.size(), " runs within ", 100 * runs.tolerance,
             "% of their published number\n");
  return report;
}

}  // namespace strata
