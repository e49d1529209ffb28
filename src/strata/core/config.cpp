// Reading the run config: TOML text -> Config, "--set section.key=value" overrides, and the
// way back (to_toml). Every message names the key, the file (or --set) with line and column,
// and what is allowed. Cross-key checks live in config_validate.cpp.
#include "strata/core/config.h"

#include <toml++/toml.h>

#include <algorithm>
#include <fstream>
#include <limits>
#include <sstream>
#include <type_traits>

#include "strata/core/config_keys.h"
#include "strata/core/error.h"

namespace strata {
namespace {

using config_detail::FieldRef;
using config_detail::Key;

std::string location(const std::string& origin, const toml::source_region& source) {
  if (source.begin.line == 0) return origin;
  return str(origin, ":", source.begin.line, ":", source.begin.column);
}

std::string join(const std::vector<std::string>& items, const std::string& separator) {
  std::string out;
  for (size_t i = 0; i < items.size(); ++i) out += (i ? separator : "") + items[i];
  return out;
}

// Edit distance where swapping two neighbouring letters costs 1 ("modle" -> "model").
size_t edit_distance(const std::string& a, const std::string& b) {
  std::vector<std::vector<size_t>> d(a.size() + 1, std::vector<size_t>(b.size() + 1));
  for (size_t i = 0; i <= a.size(); ++i) d[i][0] = i;
  for (size_t j = 0; j <= b.size(); ++j) d[0][j] = j;
  for (size_t i = 1; i <= a.size(); ++i) {
    for (size_t j = 1; j <= b.size(); ++j) {
      const size_t substitution = d[i - 1][j - 1] + (a[i - 1] == b[j - 1] ? 0 : 1);
      d[i][j] = std::min({d[i - 1][j] + 1, d[i][j - 1] + 1, substitution});
      if (i > 1 && j > 1 && a[i - 1] == b[j - 2] && a[i - 2] == b[j - 1]) {
        d[i][j] = std::min(d[i][j], d[i - 2][j - 2] + 1);
      }
    }
  }
  return d[a.size()][b.size()];
}

// The candidate most like `name`, or "" when none is close enough to be a likely typo.
// Scores are in half edits: a missing prefix or suffix ("heads" for "n_heads") counts 1.5,
// so a true one-letter slip wins over it ("wramup_steps" is warmup_steps, not steps).
std::string closest(const std::string& name, const std::vector<std::string>& candidates) {
  std::string best;
  size_t best_score = std::numeric_limits<size_t>::max();
  for (const std::string& candidate : candidates) {
    size_t score = 2 * edit_distance(name, candidate);
    const bool contains = name.size() >= 3 && (candidate.find(name) != std::string::npos ||
                                               name.find(candidate) != std::string::npos);
    if (contains) score = std::min<size_t>(score, 3);
    if (score < best_score) {
      best = candidate;
      best_score = score;
    }
  }
  // One edit for short names, about a third of the letters for longer ones; a containment
  // (score 3) always counts.
  const size_t max_edits = name.size() < 4 ? 1 : std::max<size_t>(2, name.size() / 3);
  return best_score <= std::max<size_t>(2 * max_edits, 3) ? best : "";
}

std::vector<std::string> names_in(const std::string& section) {
  std::vector<std::string> names;
  for (const Key* key : config_detail::keys_of(section)) names.push_back(key->name);
  return names;
}

// "train.steps" for "steps": the first section that has a key `name`, else "".
std::string key_in_other_section(const std::string& name) {
  for (const Key& key : config_detail::keys()) {
    if (name == key.name) return key.full_name();
  }
  return "";
}

// Keys that were replaced: the message names the new key and its values.
const char* replacement_of(const std::string& full_name) {
  if (full_name == "train.dtype") {
    return "train.precision (\"fp32\", \"bf16\", \"fp16\" or \"fp64\"; float64 is \"fp64\")";
  }
  if (full_name == "parallel.grad_reduce_dtype") {
    return "compression.gradients (\"bf16\" reduces the data-parallel gradients in bf16, as "
           "grad_reduce_dtype = \"bf16\" did; \"none\" in their own dtype)";
  }
  if (full_name == "fault.collective_timeout_s") {
    return "parallel.comm_timeout_s (seconds any collective or point-to-point wait may take)";
  }
  return nullptr;
}

[[noreturn]] void throw_unknown_key(const std::string& section, const std::string& name,
                                    const std::string& where) {
  if (const char* replacement = replacement_of(section + "." + name)) {
    throw UserError(
        str("key '", section, ".", name, "' in ", where, " was replaced by ", replacement));
  }
  const std::vector<std::string> allowed = names_in(section);
  std::string guess = closest(name, allowed);
  guess = guess.empty() ? key_in_other_section(name) : section + "." + guess;
  throw UserError(str("unknown key '", section, ".", name, "' in ", where,
                      guess.empty() ? "" : "; did you mean '" + guess + "'?",
                      guess.empty() ? "; " : " ", "allowed in [", section,
                      "]: ", join(allowed, ", ")));
}

[[noreturn]] void throw_unknown_section(const std::string& section, const std::string& where) {
  const std::string guess = closest(section, config_detail::sections());
  throw UserError(str("unknown section [", section, "] in ", where,
                      guess.empty() ? "" : "; did you mean [" + guess + "]?",
                      guess.empty() ? "; " : " ",
                      "allowed sections: ", join(config_detail::sections(), ", ")));
}

std::string describe(const toml::node& node) {
  std::ostringstream out;
  switch (node.type()) {
    case toml::node_type::string: {
      std::string text = node.as_string()->get();
      if (text.size() > 60) text = text.substr(0, 57) + "...";
      return "string " + config_detail::quote(text);
    }
    case toml::node_type::integer:
      return str("integer ", node.as_integer()->get());
    case toml::node_type::floating_point:
      return "float " + config_detail::format_double(node.as_floating_point()->get());
    case toml::node_type::boolean:
      return node.as_boolean()->get() ? "boolean true" : "boolean false";
    case toml::node_type::array:
      out << "array " << *node.as_array();
      return out.str();
    case toml::node_type::table:
      return "a table";
    case toml::node_type::date:
      out << "date " << *node.as_date();
      return out.str();
    case toml::node_type::time:
      out << "time " << *node.as_time();
      return out.str();
    case toml::node_type::date_time:
      out << "date-time " << *node.as_date_time();
      return out.str();
    case toml::node_type::none:
      break;
  }
  return "nothing";
}

// Visitors of a FieldRef (namespace scope: an enum field takes a member template, which a
// class local to a function cannot have).
struct TypeNames {
  std::string operator()(int64_t*) const { return "an integer"; }
  std::string operator()(uint64_t*) const { return "a non-negative integer"; }
  std::string operator()(double*) const { return "a number"; }
  std::string operator()(bool*) const { return "a boolean (true or false)"; }
  std::string operator()(std::string*) const { return "a string"; }
  std::string operator()(PipelineLayers*) const { return "an array of integers or \"auto\""; }
  template <typename E, typename = std::enable_if_t<std::is_enum_v<E>>>
  std::string operator()(E*) const {
    return spellings_quoted<E>();
  }
};

std::string expected_type(const FieldRef& field) { return std::visit(TypeNames{}, field); }

// Stores the value spelled `text` into an enum field, or throws
// "model.activation must be "gelu" or "swiglu", got "relu"".
template <typename E>
void assign_choice(E* value, const std::string& text, const std::string& full_name,
                   const std::string& where) {
  const std::optional<E> choice = parse_choice<E>(text);
  if (!choice) {
    throw UserError(str(full_name, " must be ", spellings_quoted<E>(), ", got ",
                        config_detail::quote(text), " (", where, ")"));
  }
  *value = *choice;
}

// parallel.pp_layers given as text: "auto" is the only word it takes.
bool assign_pipeline_layers_text(PipelineLayers* value, const std::string& text) {
  if (text != "auto") return false;
  *value = PipelineLayers{true, {}};
  return true;
}

// Stores a TOML node into the field; false when the node has the wrong type.
struct AssignNode {
  const toml::node& node;
  const std::string& full_name;
  const std::string& where;
  bool operator()(int64_t* value) const {
    if (!node.is_integer()) return false;
    *value = node.as_integer()->get();
    return true;
  }
  bool operator()(uint64_t* value) const {
    if (!node.is_integer() || node.as_integer()->get() < 0) return false;
    *value = static_cast<uint64_t>(node.as_integer()->get());
    return true;
  }
  bool operator()(double* value) const {
    if (node.is_integer()) {
      *value = static_cast<double>(node.as_integer()->get());
      return true;
    }
    if (!node.is_floating_point()) return false;
    *value = node.as_floating_point()->get();
    return true;
  }
  bool operator()(bool* value) const {
    if (!node.is_boolean()) return false;
    *value = node.as_boolean()->get();
    return true;
  }
  bool operator()(std::string* value) const {
    if (!node.is_string()) return false;
    *value = node.as_string()->get();
    return true;
  }
  bool operator()(PipelineLayers* value) const {
    if (node.is_string()) return assign_pipeline_layers_text(value, node.as_string()->get());
    const toml::array* array = node.as_array();
    if (array == nullptr) return false;
    PipelineLayers layers;
    for (const toml::node& item : *array) {
      if (!item.is_integer()) return false;
      layers.layers.push_back(item.as_integer()->get());
    }
    *value = std::move(layers);
    return true;
  }
  template <typename E, typename = std::enable_if_t<std::is_enum_v<E>>>
  bool operator()(E* value) const {
    if (!node.is_string()) return false;
    assign_choice(value, node.as_string()->get(), full_name, where);
    return true;
  }
};

// Stores `node` into the field, or throws "train.lr must be a number, got string "fast"".
void assign(const FieldRef& field, const toml::node& node, const std::string& full_name,
            const std::string& where) {
  if (!std::visit(AssignNode{node, full_name, where}, field)) {
    throw UserError(str(full_name, " must be ", expected_type(field), ", got ", describe(node),
                        " (", where, ")"));
  }
}

toml::table parse_toml(const std::string& text, const std::string& origin) {
  try {
    return toml::parse(text, origin);
  } catch (const toml::parse_error& error) {
    throw UserError(
        str(location(origin, error.source()), ": TOML syntax error: ", error.description()));
  }
}

bool is_section(const std::string& name) {
  const auto& all = config_detail::sections();
  return std::find(all.begin(), all.end(), name) != all.end();
}

// The keys of one section; a nested table that is itself a section ([model.moe]) recurses.
void apply_section(const std::string& section, const toml::table& table, const std::string& origin,
                   Config& config) {
  for (const auto& [name_key, value] : table) {
    const std::string name(name_key.str());
    if (value.is_table() && is_section(section + "." + name)) {
      apply_section(section + "." + name, *value.as_table(), origin, config);
      continue;
    }
    const Key* key = config_detail::find_key(section, name);
    if (!key) throw_unknown_key(section, name, location(origin, name_key.source()));
    assign(key->field(config), value, key->full_name(), location(origin, value.source()));
  }
}

void apply_table(const toml::table& root, const std::string& origin, Config& config) {
  for (const auto& [section_key, section_node] : root) {
    const std::string section(section_key.str());
    const std::string where = location(origin, section_key.source());
    const auto& all = config_detail::sections();
    if (std::find(all.begin(), all.end(), section) == all.end()) {
      if (section_node.is_table()) throw_unknown_section(section, where);
      const std::string guess = key_in_other_section(section);
      throw UserError(str("key '", section, "' in ", where, " is outside any section; ",
                          guess.empty() ? "" : "did you mean '" + guess + "'? ",
                          "every key belongs under one of the sections ",
                          join(config_detail::sections(), ", "), " (e.g. [train] steps = 100)"));
    }
    if (!section_node.is_table()) {
      throw UserError(str("[", section, "] must be a table of keys, got ", describe(section_node),
                          " (", where, ")"));
    }
    apply_section(section, *section_node.as_table(), origin, config);
  }
}

std::string trim(const std::string& text) {
  const size_t first = text.find_first_not_of(" \t");
  if (first == std::string::npos) return "";
  return text.substr(first, text.find_last_not_of(" \t") - first + 1);
}

// The value as TOML spells it.
struct FormatValue {
  std::string operator()(int64_t* value) const { return std::to_string(*value); }
  std::string operator()(uint64_t* value) const { return std::to_string(*value); }
  std::string operator()(double* value) const { return config_detail::format_double(*value); }
  std::string operator()(bool* value) const { return *value ? "true" : "false"; }
  std::string operator()(std::string* value) const { return config_detail::quote(*value); }
  std::string operator()(PipelineLayers* value) const {
    if (value->automatic) return config_detail::quote("auto");
    std::string out = "[";
    for (size_t i = 0; i < value->layers.size(); ++i) {
      out += str(i ? ", " : "", value->layers[i]);
    }
    return out + "]";
  }
  template <typename E, typename = std::enable_if_t<std::is_enum_v<E>>>
  std::string operator()(E* value) const {
    return config_detail::quote(name_of(*value));
  }
};

std::string format_field(const FieldRef& field) { return std::visit(FormatValue{}, field); }

// The field as --set takes it, for "e.g. --set model.pos=learned": text and enum keys bare.
std::string override_example(const FieldRef& field) {
  return std::visit(
      [&](auto* value) -> std::string {
        using T = std::remove_pointer_t<decltype(value)>;
        if constexpr (std::is_same_v<T, std::string>) {
          return value->empty() ? "text" : *value;
        } else if constexpr (std::is_enum_v<T>) {
          return name_of(*value);
        } else {
          return format_field(field);
        }
      },
      field);
}

// Stores bare --set text into a string or enum field; false (and nothing stored) for a field
// of another type, whose text must be a TOML value.
bool assign_bare_text(const FieldRef& field, const std::string& text, const std::string& full_name,
                      const std::string& where) {
  return std::visit(
      [&](auto* value) {
        using T = std::remove_pointer_t<decltype(value)>;
        if constexpr (std::is_same_v<T, std::string>) {
          *value = text;
          return true;
        } else if constexpr (std::is_enum_v<T>) {
          assign_choice(value, text, full_name, where);
          return true;
        } else if constexpr (std::is_same_v<T, PipelineLayers>) {
          return assign_pipeline_layers_text(value, text);
        } else {
          return false;
        }
      },
      field);
}

// "section.key=value", the value read as TOML. A string or enum key also takes the text as it
// is (--set model.pos=rope, --set data.path=/data/x) unless it starts with a quote.
void apply_override(const std::string& text, Config& config) {
  const std::string where = "--set " + text;
  const size_t equals = text.find('=');
  STRATA_REQUIRE(equals != std::string::npos, where,
                 ": expected section.key=value, e.g. --set train.lr=0.001");
  const std::string full_name = trim(text.substr(0, equals));
  const std::string value = trim(text.substr(equals + 1));

  // The longest known section before a dot: model.moe.top_k is in [model.moe].
  size_t dot = full_name.rfind('.');
  if (dot != std::string::npos && !is_section(full_name.substr(0, dot))) dot = full_name.find('.');
  if (dot == std::string::npos) {
    const std::string guess = key_in_other_section(full_name);
    throw UserError(str(where, ": the key must be section.key (e.g. train.lr)",
                        guess.empty() ? "" : "; did you mean '" + guess + "'?"));
  }
  const std::string section = full_name.substr(0, dot);
  const std::string name = full_name.substr(dot + 1);
  const auto& all = config_detail::sections();
  if (std::find(all.begin(), all.end(), section) == all.end()) {
    throw_unknown_section(section, where);
  }
  const Key* key = config_detail::find_key(section, name);
  if (!key) throw_unknown_key(section, name, where);

  const FieldRef field = key->field(config);
  const bool quoted = !value.empty() && (value[0] == '"' || value[0] == '\'');
  if (!quoted && assign_bare_text(field, value, full_name, where)) return;
  // The default, spelled as --set takes it, shows the expected form.
  Config defaults;
  const std::string hint = str(full_name, " must be ", expected_type(field), ", e.g. --set ",
                               full_name, "=", override_example(key->field(defaults)));
  STRATA_REQUIRE(!value.empty(), where, ": missing value; ", hint);
  toml::table parsed;
  try {
    parsed = toml::parse("value = " + value + "\n", std::string_view("--set"));
  } catch (const toml::parse_error& error) {
    throw UserError(
        str(where, ": '", value, "' is not a TOML value; ", hint, " (", error.description(), ")"));
  }
  STRATA_REQUIRE(parsed.size() == 1 && parsed.contains("value"), where, ": '", value,
                 "' is more than one TOML value; give one value per --set");
  assign(field, *parsed.get("value"), full_name, where);
}

}  // namespace

Config parse_config(const std::string& toml_text, const std::string& origin,
                    const std::vector<std::string>& overrides) {
  Config config;
  apply_table(parse_toml(toml_text, origin), origin, config);
  for (const std::string& override_text : overrides) apply_override(override_text, config);
  return config;
}

Config load_config(const std::string& path, const std::vector<std::string>& overrides) {
  std::ifstream file(path, std::ios::binary);
  STRATA_REQUIRE(file, "cannot read config file '", path,
                 "': it does not exist or is not readable");
  std::ostringstream text;
  text << file.rdbuf();
  STRATA_REQUIRE(!file.bad(), "cannot read config file '", path, "': read error");
  return parse_config(text.str(), path, overrides);
}

std::string to_toml(const Config& config) {
  Config copy = config;  // Key::field hands out non-const pointers; printing only reads.
  std::string out;
  std::string section;
  for (const Key& key : config_detail::keys()) {
    if (section != key.section) {
      out += str(section.empty() ? "" : "\n", "[", key.section, "]\n");
      section = key.section;
    }
    out += str(key.name, " = ", format_field(key.field(copy)), "\n");
  }
  return out;
}

std::vector<std::string> config_keys() {
  std::vector<std::string> names;
  for (const Key& key : config_detail::keys()) names.push_back(key.full_name());
  return names;
}

bool operator==(const Config& a, const Config& b) {
  Config left = a, right = b;  // Key::field hands out non-const pointers; this only reads.
  for (const Key& key : config_detail::keys()) {
    const FieldRef field_a = key.field(left);
    const FieldRef field_b = key.field(right);
    const bool same = std::visit(
        [&](auto* value_a) { return *value_a == *std::get<decltype(value_a)>(field_b); }, field_a);
    if (!same) return false;
  }
  return true;
}

}  // namespace strata
