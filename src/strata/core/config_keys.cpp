// The one list of config keys. A field added to a struct in config.h becomes a key by adding
// its line here (and its entry in docs/config.md); nothing else needs to change. A layout
// setting's key is its field's name in core/layout.h (the macro spells it), the name
// layout_settings() gives --layout and strata simulate.
#include "strata/core/config_keys.h"

#include <charconv>
#include <cmath>
#include <cstdio>

#include "strata/core/error.h"

namespace strata::config_detail {

// The lambda has no captures, so it converts to the Key's plain function pointer.
#define STRATA_CONFIG_KEY(section, name)                                              \
  Key {                                                                               \
#section, #name, [](Config & config) -> FieldRef { return &config.section.name; } \
  }

// A key of a nested table: [model.moe] num_experts -> config.model.moe.num_experts.
#define STRATA_CONFIG_SUBKEY(section, table, name)                             \
  Key {                                                                        \
#section "." #table, #name,                                                \
        [](Config & config) -> FieldRef { return &config.section.table.name; } \
  }

const std::vector<Key>& keys() {
  static const std::vector<Key> table = {
      STRATA_CONFIG_KEY(model, vocab_size),
      STRATA_CONFIG_KEY(model, d_model),
      STRATA_CONFIG_KEY(model, n_layers),
      STRATA_CONFIG_KEY(model, n_heads),
      STRATA_CONFIG_KEY(model, n_kv_heads),
      Key{"model", "head_dim",
          [](Config& config) -> FieldRef { return &config.model.head_dim_key; }},
      STRATA_CONFIG_KEY(model, d_ff),
      STRATA_CONFIG_KEY(model, seq_len),
      STRATA_CONFIG_KEY(model, pos),
      STRATA_CONFIG_KEY(model, norm),
      STRATA_CONFIG_KEY(model, activation),
      STRATA_CONFIG_KEY(model, attention),
      STRATA_CONFIG_KEY(model, tie_embeddings),
      STRATA_CONFIG_KEY(model, init_std),
      STRATA_CONFIG_KEY(model, norm_eps),
      STRATA_CONFIG_KEY(model, rope_theta),
      Key{"model", "init", [](Config& config) -> FieldRef { return &config.model_init; }},

      STRATA_CONFIG_SUBKEY(model, moe, num_experts),
      STRATA_CONFIG_SUBKEY(model, moe, top_k),
      STRATA_CONFIG_SUBKEY(model, moe, every),
      STRATA_CONFIG_SUBKEY(model, moe, capacity_factor),
      STRATA_CONFIG_SUBKEY(model, moe, aux_loss_coef),
      STRATA_CONFIG_SUBKEY(model, moe, z_loss_coef),
      STRATA_CONFIG_SUBKEY(model, moe, activation),

      Key{"parallel", "auto",
          [](Config& config) -> FieldRef { return &config.parallel.auto_layout; }},
      STRATA_CONFIG_KEY(parallel, tp),
      STRATA_CONFIG_KEY(parallel, pp),
      STRATA_CONFIG_KEY(parallel, dp),
      STRATA_CONFIG_KEY(parallel, cp),
      STRATA_CONFIG_KEY(parallel, cp_comm),
      STRATA_CONFIG_KEY(parallel, ep),
      STRATA_CONFIG_KEY(parallel, zero),
      STRATA_CONFIG_KEY(parallel, bucket_mb),
      STRATA_CONFIG_KEY(parallel, sequence_parallel),
      STRATA_CONFIG_KEY(parallel, schedule),
      STRATA_CONFIG_KEY(parallel, vpp),
      STRATA_CONFIG_KEY(parallel, microbatches),
      STRATA_CONFIG_KEY(parallel, pp_layers),
      STRATA_CONFIG_KEY(parallel, comm_timeout_s),

      STRATA_CONFIG_KEY(compression, gradients),
      STRATA_CONFIG_KEY(compression, start_step),
      STRATA_CONFIG_KEY(compression, powersgd_rank),
      STRATA_CONFIG_KEY(compression, zero_gather),

      STRATA_CONFIG_KEY(train, steps),
      STRATA_CONFIG_KEY(train, global_batch),
      // The layout's (core/layout.h), kept under [train] where it has always been written.
      Key{"train", "micro_batch",
          [](Config& config) -> FieldRef { return &config.parallel.micro_batch; }},
      STRATA_CONFIG_KEY(train, lr),
      STRATA_CONFIG_KEY(train, min_lr),
      STRATA_CONFIG_KEY(train, warmup_steps),
      STRATA_CONFIG_KEY(train, weight_decay),
      STRATA_CONFIG_KEY(train, beta1),
      STRATA_CONFIG_KEY(train, beta2),
      STRATA_CONFIG_KEY(train, eps),
      STRATA_CONFIG_KEY(train, grad_clip),
      STRATA_CONFIG_KEY(train, seed),
      STRATA_CONFIG_KEY(train, eval_every),
      STRATA_CONFIG_KEY(train, eval_batches),
      STRATA_CONFIG_KEY(train, precision),
      STRATA_CONFIG_KEY(train, recompute),
      STRATA_CONFIG_KEY(train, recompute_layers),
      STRATA_CONFIG_KEY(train, threads),

      STRATA_CONFIG_KEY(data, source),
      STRATA_CONFIG_KEY(data, path),
      STRATA_CONFIG_KEY(data, tokenizer),
      STRATA_CONFIG_KEY(data, eval_fraction),
      STRATA_CONFIG_KEY(data, document_mask),
      STRATA_CONFIG_KEY(data, loss_mask),

      STRATA_CONFIG_KEY(checkpoint, dir),
      STRATA_CONFIG_KEY(checkpoint, every),
      STRATA_CONFIG_KEY(checkpoint, resume),
      STRATA_CONFIG_KEY(checkpoint, keep),
      STRATA_CONFIG_KEY(checkpoint, async),

      STRATA_CONFIG_KEY(fault, max_restarts),
      STRATA_CONFIG_KEY(fault, restart_backoff_s),
      STRATA_CONFIG_KEY(fault, step_timeout_s),
      STRATA_CONFIG_KEY(fault, elastic),
      STRATA_CONFIG_KEY(fault, min_hosts),
      STRATA_CONFIG_KEY(fault, elastic_grow),

      STRATA_CONFIG_KEY(log, dir),
      STRATA_CONFIG_KEY(log, trace),
      STRATA_CONFIG_KEY(log, progress),
      STRATA_CONFIG_KEY(log, every),
      STRATA_CONFIG_KEY(log, samples),
      STRATA_CONFIG_KEY(log, profile_step),

      STRATA_CONFIG_KEY(serve, host),
      STRATA_CONFIG_KEY(serve, port),
      STRATA_CONFIG_KEY(serve, kv_cache_mb),
      STRATA_CONFIG_KEY(serve, max_batch_tokens),
      STRATA_CONFIG_KEY(serve, max_queue),
      STRATA_CONFIG_KEY(serve, request_timeout_s),
      STRATA_CONFIG_KEY(serve, max_request_mb),
      STRATA_CONFIG_KEY(serve, prefix_cache),
      STRATA_CONFIG_KEY(serve, threads),
  };
  return table;
}

#undef STRATA_CONFIG_KEY
#undef STRATA_CONFIG_SUBKEY

const std::vector<std::string>& sections() {
  static const std::vector<std::string> names = [] {
    std::vector<std::string> result;
    for (const Key& key : keys()) {
      if (result.empty() || result.back() != key.section) result.push_back(key.section);
    }
    return result;
  }();
  return names;
}

std::vector<const Key*> keys_of(const std::string& section) {
  std::vector<const Key*> result;
  for (const Key& key : keys()) {
    if (section == key.section) result.push_back(&key);
  }
  return result;
}

const Key* find_key(const std::string& section, const std::string& name) {
  // Old spellings still read (configs saved in checkpoints use them); to_toml writes the new.
  if (section == "parallel" && name == "pp_schedule") return find_key(section, "schedule");
  for (const Key& key : keys()) {
    if (section == key.section && name == key.name) return &key;
  }
  return nullptr;
}

std::string format_double(double value) {
  if (std::isnan(value)) return "nan";
  if (std::isinf(value)) return value > 0 ? "inf" : "-inf";
  char buffer[64];
  const auto result =
      std::to_chars(buffer, buffer + sizeof(buffer), value, std::chars_format::general);
  STRATA_CHECK(result.ec == std::errc(), "to_chars failed for a double");
  std::string text(buffer, result.ptr);
  // TOML reads "10000" as an integer: keep floats recognisable as floats.
  if (text.find_first_of(".e") == std::string::npos) text += ".0";
  return text;
}

std::string quote(const std::string& text) {
  std::string out = "\"";
  for (const char c : text) {
    switch (c) {
      case '"':
        out += "\\\"";
        break;
      case '\\':
        out += "\\\\";
        break;
      case '\b':
        out += "\\b";
        break;
      case '\t':
        out += "\\t";
        break;
      case '\n':
        out += "\\n";
        break;
      case '\f':
        out += "\\f";
        break;
      case '\r':
        out += "\\r";
        break;
      default:
        if (static_cast<unsigned char>(c) < 0x20 || c == 0x7f) {
          char escaped[8];
          std::snprintf(escaped, sizeof(escaped), "\\u%04x", static_cast<unsigned char>(c));
          out += escaped;
        } else {
          out += c;
        }
    }
  }
  return out + "\"";
}

}  // namespace strata::config_detail
