#include "strata/plan/published_runs.h"

#include <toml++/toml.h>
#include <algorithm>
#include <cmath>

#include "strata/core/error.h"
#include "strata/plan/calibration_fit.h"

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

PublishedRun read_run(const toml::table& table, const std::string& where) {
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
  return run;
}

// `fit`: a list of fittable_constants(), each at most once.
std::vector<std::string> read_fit(const toml::table& root, const std::string& origin) {
  const toml::array* list = root["fit"].as_array();
  STRATA_REQUIRE(list != nullptr, origin, ": fit must be a list of the constants to fit, of ",
                 listed(fittable_constants()));
  std::vector<std::string> fit;
  for (const toml::node& item : *list) {
    const std::optional<std::string> name = item.value<std::string>();
    STRATA_REQUIRE(name && std::find(fittable_constants().begin(), fittable_constants().end(),
                                     *name) != fittable_constants().end(),
                   origin, ": fit: '", name.value_or("(not a string)"),
                   "' is not a constant the calibration fits; it fits ",
                   listed(fittable_constants()));
    STRATA_REQUIRE(std::find(fit.begin(), fit.end(), *name) == fit.end(), origin, ": fit: '", *name,
                   "' is listed twice");
    fit.push_back(*name);
  }
  return fit;
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
  static const std::vector<std::string> kKeys = {"tolerance", "reference_stack", "fit", "run"};
  for (const auto& [key, value] : root) {
    const std::string name(key.str());
    STRATA_REQUIRE(std::find(kKeys.begin(), kKeys.end(), name) != kKeys.end(), origin,
                   ": unknown key '", name, "'; the file has ", listed(kKeys));
  }
  out.reference_stack = text_key(root, "reference_stack", origin);
  out.fit = read_fit(root, origin);
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
    out.runs.push_back(read_run(*table, where));
  }
  return out;
}

double metric_of(const Prediction& prediction, const std::string& metric) {
  if (metric == "mfu") return prediction.mfu;
  STRATA_CHECK(metric == "hardware_tflops_per_device", "unknown metric ", metric);
  return prediction.hardware_tflops_per_device;
}

}  // namespace strata
