// The table of config keys (section, name, and where the value lives in Config) that
// parsing, overrides, printing and comparison all walk, plus the TOML spelling of values.
// Internal to core: the public interface is config.h.
#pragma once
#include <cstdint>
#include <string>
#include <variant>
#include <vector>

#include "strata/core/config.h"

namespace strata::config_detail {

// Points at one field of a Config; the alternative says the key's type. An enum field is
// written in TOML as a string, one of its Spellings.
using FieldRef =
    std::variant<int64_t*, uint64_t*, double*, bool*, std::string*, PipelineLayers*,
                 PositionEncoding*, Norm*, Activation*, AttentionKernel*, PipelineSchedule*,
                 ContextParallelComm*, Recompute*, Precision*, GradientCompression*,
                 GatherCompression*, DataSource*, LossMask*, ProgressDisplay*>;

struct Key {
  const char* section;
  const char* name;
  FieldRef (*field)(Config& config);

  std::string full_name() const { return std::string(section) + "." + name; }
};

// Sections in the order of keys(): model, parallel, compression, train, data, checkpoint,
// fault, log, serve.
const std::vector<std::string>& sections();

// Every key, grouped by section in sections() order, each section in struct order.
const std::vector<Key>& keys();

// The keys of one section, in order; empty for an unknown section.
std::vector<const Key*> keys_of(const std::string& section);

// nullptr when section.name is not a key.
const Key* find_key(const std::string& section, const std::string& name);

// The shortest decimal that reads back as exactly `value`, always spelled as a TOML float
// ("0.0003", "1e-05", "10000.0", "inf", "nan").
std::string format_double(double value);

// A TOML basic string with quotes and escapes: "rope" -> "\"rope\"".
std::string quote(const std::string& text);

}  // namespace strata::config_detail
