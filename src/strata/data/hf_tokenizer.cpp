// Reading tokenizer.json and vocab.json + merges.txt, and the byte-level BPE tokenizer's
// encode/decode around the BytePairModel.
#include "strata/data/hf_tokenizer.h"

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

#include <unicode/bytestream.h>
#include <unicode/normalizer2.h>

#include "strata/core/error.h"
#include "strata/data/utf8.h"

namespace strata {

namespace {

using Json = nlohmann::json;

Json parse_json_file(const std::string& path) {
  std::string text = read_tokenizer_file(path);
  try {
    return Json::parse(text);
  } catch (const Json::parse_error& error) {
    throw UserError(str(path, " is not valid JSON: ", error.what()));
  }
}

// The string at `key` of `node`, or `fallback` when it is absent or null; a UserError naming
// `where`.key when it is something else.
std::string string_or(const Json& node, const char* key, const std::string& where,
                      const std::string& fallback) {
  auto found = node.find(key);
  if (found == node.end() || found->is_null()) return fallback;
  STRATA_REQUIRE(found->is_string(), where, ".", key, " must be a string, not ", found->dump());
  return found->get<std::string>();
}

bool bool_or(const Json& node, const char* key, const std::string& where, bool fallback) {
  auto found = node.find(key);
  if (found == node.end() || found->is_null()) return fallback;
  STRATA_REQUIRE(found->is_boolean(), where, ".", key, " must be true or false, not ",
                 found->dump());
  return found->get<bool>();
}

[[noreturn]] void refuse(const std::string& where, const std::string& type,
                         const std::string& supported) {
  throw UserError(
      str(where, ".type = \"", type, "\" is not supported (strata reads ", supported, ")"));
}

// A literal split string as a PCRE2 pattern: ASCII punctuation escaped, the rest as is.
std::string escape_literal(const std::string& text) {
  std::string pattern;
  for (char c : text) {
    if (static_cast<unsigned char>(c) < 0x80 && !std::isalnum(static_cast<unsigned char>(c))) {
      pattern.push_back('\\');
    }
    pattern.push_back(c);
  }
  return pattern;
}

void append_split_step(const Json& node, const std::string& where,
                       std::vector<PreTokenizerStep>& steps) {
  PreTokenizerStep step;
  const Json& pattern = node.value("pattern", Json());
  if (pattern.contains("Regex") && pattern["Regex"].is_string()) {
    step.pattern = std::make_shared<RegexPattern>(pattern["Regex"].get<std::string>(),
                                                  where + ".pattern.Regex");
  } else if (pattern.contains("String") && pattern["String"].is_string()) {
    step.pattern = std::make_shared<RegexPattern>(
        escape_literal(pattern["String"].get<std::string>()), where + ".pattern.String");
  } else {
    throw UserError(
        str(where, ".pattern must be {\"Regex\": ...} or {\"String\": ...}, not ", pattern.dump()));
  }
  std::string behavior = string_or(node, "behavior", where, "");
  if (behavior == "Isolated") {
    step.behavior = SplitBehavior::kIsolated;
  } else if (behavior == "Removed") {
    step.behavior = SplitBehavior::kRemoved;
  } else {
    throw UserError(str(where, ".behavior = \"", behavior,
                        "\" is not supported (strata reads Isolated and Removed)"));
  }
  step.invert = bool_or(node, "invert", where, false);
  steps.push_back(std::move(step));
}

void append_pre_tokenizer(const Json& node, const std::string& where,
                          std::vector<PreTokenizerStep>& steps) {
  if (node.is_null()) return;
  std::string type = string_or(node, "type", where, "");
  if (type == "Sequence") {
    const Json& list = node.value("pretokenizers", Json::array());
    for (size_t i = 0; i < list.size(); ++i) {
      append_pre_tokenizer(list[i], str(where, ".pretokenizers[", i, "]"), steps);
    }
  } else if (type == "Split") {
    append_split_step(node, where, steps);
  } else if (type == "ByteLevel") {
    // trim_offsets changes only the offsets Hugging Face reports, not the ids.
    PreTokenizerStep step;
    step.add_prefix_space = bool_or(node, "add_prefix_space", where, true);
    if (bool_or(node, "use_regex", where, true)) {
      step.pattern = std::make_shared<RegexPattern>(kGpt2SplitPattern, where);
    }
    steps.push_back(std::move(step));
  } else {
    refuse(where, type, "Sequence, Split and ByteLevel");
  }
}

// Whether the normalizer is NFC (Qwen2's); none is fine too, anything else is refused.
bool reads_nfc(const Json& node, const std::string& where) {
  if (node.is_null()) return false;
  std::string type = string_or(node, "type", where, "");
  if (type == "NFC") return true;
  if (type == "Sequence") {
    bool nfc = false;
    const Json& list = node.value("normalizers", Json::array());
    for (size_t i = 0; i < list.size(); ++i) {
      nfc = reads_nfc(list[i], str(where, ".normalizers[", i, "]")) || nfc;
    }
    return nfc;
  }
  refuse(where, type, "NFC, a Sequence of it, or null");
}

void check_decoder(const Json& node, const std::string& where) {
  if (node.is_null()) return;
  std::string type = string_or(node, "type", where, "");
  if (type != "ByteLevel") refuse(where, type, "ByteLevel");
}

// The merge list: "left right" strings (the classic format) or [left, right] pairs.
std::vector<std::pair<std::string, std::string>> read_merges(const Json& merges,
                                                             const std::string& where) {
  STRATA_REQUIRE(merges.is_array(), where, " must be an array");
  std::vector<std::pair<std::string, std::string>> pairs;
  pairs.reserve(merges.size());
  for (size_t i = 0; i < merges.size(); ++i) {
    const Json& merge = merges[i];
    std::string left, right;
    if (merge.is_string()) {
      const std::string& text = merge.get_ref<const std::string&>();
      size_t space = text.find(' ');
      STRATA_REQUIRE(space != std::string::npos && text.find(' ', space + 1) == std::string::npos,
                     where, "[", i, "] = \"", text, "\" is not two tokens separated by a space");
      left = text.substr(0, space);
      right = text.substr(space + 1);
    } else {
      STRATA_REQUIRE(
          merge.is_array() && merge.size() == 2 && merge[0].is_string() && merge[1].is_string(),
          where, "[", i, "] must be \"left right\" or [\"left\", \"right\"], not ", merge.dump());
      left = merge[0].get<std::string>();
      right = merge[1].get<std::string>();
    }
    auto left_bytes = byte_level_to_bytes(left), right_bytes = byte_level_to_bytes(right);
    STRATA_REQUIRE(left_bytes && right_bytes, where, "[", i, "] (\"", left, " ", right,
                   "\") is not made of byte-level characters");
    pairs.emplace_back(std::move(*left_bytes), std::move(*right_bytes));
  }
  return pairs;
}

// Token bytes indexed by id, from {byte-level token: id}.
std::vector<std::string> read_vocab(const Json& vocab, const std::string& where) {
  STRATA_REQUIRE(vocab.is_object(), where, " must be an object {token: id}");
  std::vector<std::string> tokens;
  for (const auto& [token, id_node] : vocab.items()) {
    STRATA_REQUIRE(id_node.is_number_integer() && id_node.get<int64_t>() >= 0 &&
                       id_node.get<int64_t>() < (int64_t{1} << 31),
                   where, "[\"", token, "\"] must be a non-negative integer id, not ",
                   id_node.dump());
    auto bytes = byte_level_to_bytes(token);
    STRATA_REQUIRE(bytes.has_value(), where, " holds \"", token,
                   "\", which is not a byte-level token: strata reads byte-level BPE ",
                   "(GPT-2, Llama 3, Qwen2); a SentencePiece model loads from tokenizer.model");
    auto id = id_node.get<size_t>();
    if (id >= tokens.size()) tokens.resize(id + 1);
    tokens[id] = std::move(*bytes);
  }
  return tokens;
}

std::vector<AddedToken> read_added_tokens(const Json& list, const std::string& where) {
  std::vector<AddedToken> tokens;
  if (list.is_null()) return tokens;
  STRATA_REQUIRE(list.is_array(), where, " must be an array");
  for (size_t i = 0; i < list.size(); ++i) {
    std::string at = str(where, "[", i, "]");
    const Json& node = list[i];
    STRATA_REQUIRE(node.is_object() && node.contains("id") && node["id"].is_number_integer(), at,
                   " must be an object with an integer id");
    AddedToken token;
    token.content = string_or(node, "content", at, "");
    STRATA_REQUIRE(!token.content.empty(), at, ".content must be a non-empty string");
    token.id = node["id"].get<int32_t>();
    STRATA_REQUIRE(token.id >= 0, at, ".id must not be negative");
    token.special = bool_or(node, "special", at, false);
    token.lstrip = bool_or(node, "lstrip", at, false);
    token.rstrip = bool_or(node, "rstrip", at, false);
    STRATA_REQUIRE(!bool_or(node, "single_word", at, false), at, ".single_word = true (\"",
                   token.content, "\") is not supported");
    tokens.push_back(std::move(token));
  }
  return tokens;
}

// The id of the token whose text is `content`: an added token's, else the model's.
std::optional<int32_t> find_token(const std::string& content, const BytePairModel& model,
                                  const std::vector<AddedToken>& added) {
  for (const auto& token : added) {
    if (token.content == content) return token.id;
  }
  return model.find(content);
}

// eos_token / bos_token of tokenizer_config.json ("<s>" or {"content": "<s>", ...}), if the
// file exists and sets it.
std::optional<std::string> configured_token(const Json& config, const char* key,
                                            const std::string& path) {
  auto found = config.find(key);
  if (found == config.end() || found->is_null()) return std::nullopt;
  if (found->is_string()) return found->get<std::string>();
  if (found->is_object() && found->contains("content") && (*found)["content"].is_string()) {
    return (*found)["content"].get<std::string>();
  }
  throw UserError(
      str(path, ": ", key, " must be a string or {\"content\": ...}, not ", found->dump()));
}

// The end-of-text or begin-of-text token: the one tokenizer_config.json names, else the first
// of the family names that the vocabulary holds.
std::optional<int32_t> special_token(const Json& config, const char* key,
                                     const std::string& config_path,
                                     const std::vector<std::string>& family_names,
                                     const BytePairModel& model,
                                     const std::vector<AddedToken>& added) {
  if (auto content = configured_token(config, key, config_path)) {
    auto id = find_token(*content, model, added);
    STRATA_REQUIRE(id.has_value(), config_path, ": ", key, " = \"", *content,
                   "\" is not a token of this tokenizer");
    return id;
  }
  for (const auto& name : family_names) {
    if (auto id = find_token(name, model, added)) return id;
  }
  return std::nullopt;
}

Json read_tokenizer_config(const std::string& config_path) {
  std::error_code error;
  if (config_path.empty() || !std::filesystem::exists(config_path, error)) return Json::object();
  Json config = parse_json_file(config_path);
  STRATA_REQUIRE(config.is_object(), config_path, " must hold a JSON object");
  return config;
}

std::unique_ptr<Tokenizer> build_tokenizer(const std::string& name, BytePairModel model,
                                           PreTokenizer pre_tokenizer,
                                           std::vector<AddedToken> added, bool nfc,
                                           const std::string& config_path) {
  Json config = read_tokenizer_config(config_path);
  auto end_of_text = special_token(config, "eos_token", config_path,
                                   {"<|endoftext|>", "<|end_of_text|>", "</s>"}, model, added);
  auto begin_of_text =
      special_token(config, "bos_token", config_path, {"<|begin_of_text|>", "<s>"}, model, added);
  return std::make_unique<ByteLevelBpeTokenizer>(name, std::move(model), std::move(pre_tokenizer),
                                                 std::move(added), nfc, end_of_text, begin_of_text);
}

const icu::Normalizer2& nfc_normalizer() {
  UErrorCode status = U_ZERO_ERROR;
  const icu::Normalizer2* normalizer = icu::Normalizer2::getNFCInstance(status);
  STRATA_CHECK(U_SUCCESS(status), "ICU has no NFC data: ", u_errorName(status));
  return *normalizer;
}

// Most text is in NFC already: the check is a quick scan, and only other text is rewritten.
bool is_nfc(std::string_view text) {
  UErrorCode status = U_ZERO_ERROR;
  bool normalized = nfc_normalizer().isNormalizedUTF8(
      icu::StringPiece(text.data(), static_cast<int32_t>(text.size())), status);
  return U_SUCCESS(status) && normalized;
}

std::string to_nfc(std::string_view text) {
  std::string normalized;
  icu::StringByteSink<std::string> sink(&normalized);
  UErrorCode status = U_ZERO_ERROR;
  nfc_normalizer().normalizeUTF8(
      0, icu::StringPiece(text.data(), static_cast<int32_t>(text.size())), sink, nullptr, status);
  STRATA_CHECK(U_SUCCESS(status), "ICU failed to normalize valid UTF-8: ", u_errorName(status));
  return normalized;
}

bool is_ascii_space(char c) {
  return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\v' || c == '\f';
}

}  // namespace

std::string read_tokenizer_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  STRATA_REQUIRE(in, "cannot read tokenizer file ", path, ": ", std::strerror(errno));
  std::ostringstream text;
  text << in.rdbuf();
  STRATA_REQUIRE(!in.bad(), "cannot read tokenizer file ", path, ": ", std::strerror(errno));
  return text.str();
}

ByteLevelBpeTokenizer::ByteLevelBpeTokenizer(std::string name, BytePairModel model,
                                             PreTokenizer pre_tokenizer,
                                             std::vector<AddedToken> added_tokens, bool nfc,
                                             std::optional<int32_t> end_of_text,
                                             std::optional<int32_t> begin_of_text)
    : name_(std::move(name)),
      model_(std::move(model)),
      pre_tokenizer_(std::move(pre_tokenizer)),
      added_tokens_(std::move(added_tokens)),
      nfc_(nfc),
      end_of_text_(end_of_text),
      begin_of_text_(begin_of_text) {
  std::stable_sort(
      added_tokens_.begin(), added_tokens_.end(),
      [](const AddedToken& a, const AddedToken& b) { return a.content.size() > b.content.size(); });
  decoded_.resize(model_.size());
  for (int32_t id = 0; id < model_.size(); ++id) decoded_[id] = model_.token(id);
  for (const auto& token : added_tokens_) {
    starts_added_token_[static_cast<unsigned char>(token.content[0])] = true;
    if (token.id >= static_cast<int32_t>(decoded_.size())) decoded_.resize(token.id + 1);
    decoded_[token.id] = token.content;
  }
}

int ByteLevelBpeTokenizer::find_added_token(std::string_view text, size_t from, size_t* start,
                                            size_t* end) const {
  for (size_t at = from; at < text.size(); ++at) {
    if (!starts_added_token_[static_cast<unsigned char>(text[at])]) continue;
    for (size_t i = 0; i < added_tokens_.size(); ++i) {
      const AddedToken& token = added_tokens_[i];
      if (text.compare(at, token.content.size(), token.content) != 0) continue;
      *start = at;
      *end = at + token.content.size();
      if (token.lstrip) {
        while (*start > from && is_ascii_space(text[*start - 1])) --*start;
      }
      if (token.rstrip) {
        while (*end < text.size() && is_ascii_space(text[*end])) ++*end;
      }
      return static_cast<int>(i);
    }
  }
  return -1;
}

void ByteLevelBpeTokenizer::encode_text(std::string_view text, std::vector<int32_t>& ids) const {
  thread_local std::vector<std::string_view> pieces;
  std::deque<std::string> storage;
  if (nfc_ && !is_nfc(text)) text = storage.emplace_back(to_nfc(text));
  pre_tokenizer_.split(text, pieces, storage);
  for (std::string_view piece : pieces) model_.encode_piece(piece, ids);
}

std::vector<int32_t> ByteLevelBpeTokenizer::encode(std::string_view text) const {
  std::string repaired;
  if (!is_valid_utf8(text)) {
    repaired = to_valid_utf8(text);
    text = repaired;
  }
  std::vector<int32_t> ids;
  ids.reserve(text.size() / 3);
  size_t at = 0;
  while (at < text.size()) {
    size_t start = 0, end = 0;
    int added = added_tokens_.empty() ? -1 : find_added_token(text, at, &start, &end);
    if (added < 0) {
      encode_text(text.substr(at), ids);
      break;
    }
    encode_text(text.substr(at, start - at), ids);
    ids.push_back(added_tokens_[added].id);
    at = end;
  }
  return ids;
}

std::string ByteLevelBpeTokenizer::decode(const int64_t* ids, size_t count) const {
  std::string bytes;
  for (size_t i = 0; i < count; ++i) {
    bool known = ids[i] >= 0 && ids[i] < vocab_size() && !decoded_[ids[i]].empty();
    bytes.append(known ? std::string_view(decoded_[ids[i]]) : kReplacementCharacter);
  }
  return is_valid_utf8(bytes) ? bytes : to_valid_utf8(bytes);
}

std::unique_ptr<Tokenizer> load_tokenizer_json(const std::string& name, const std::string& path,
                                               const std::string& config_path) {
  Json root = parse_json_file(path);
  STRATA_REQUIRE(root.is_object(), path, " must hold a JSON object");
  auto where = [&](const std::string& key) { return str(path, ": ", key); };

  bool nfc = reads_nfc(root.value("normalizer", Json()), where("normalizer"));
  check_decoder(root.value("decoder", Json()), where("decoder"));
  std::vector<PreTokenizerStep> steps;
  append_pre_tokenizer(root.value("pre_tokenizer", Json()), where("pre_tokenizer"), steps);

  STRATA_REQUIRE(root.contains("model") && root["model"].is_object(), where("model"),
                 " is missing");
  const Json& model = root["model"];
  std::string type = string_or(model, "type", where("model"), "BPE");
  if (type != "BPE") refuse(where("model"), type, "BPE");
  STRATA_REQUIRE(model.value("dropout", Json()).is_null() || model["dropout"] == 0,
                 where("model.dropout"), " = ", model["dropout"].dump(),
                 " is not supported (set it to null: strata encodes deterministically)");
  STRATA_REQUIRE(
      !bool_or(model, "byte_fallback", where("model"), false), where("model"),
      ".byte_fallback = true is a SentencePiece-style BPE: strata reads byte-level BPE; ",
      "load the model's tokenizer.model instead");
  for (const char* key : {"continuing_subword_prefix", "end_of_word_suffix"}) {
    std::string affix = string_or(model, key, where("model"), "");
    STRATA_REQUIRE(affix.empty(), where("model"), ".", key, " = \"", affix,
                   "\" is not supported (byte-level BPE has none)");
  }
  std::vector<std::string> tokens = read_vocab(model.value("vocab", Json()), where("model.vocab"));
  auto merges = read_merges(model.value("merges", Json::array()), where("model.merges"));
  bool ignore_merges = bool_or(model, "ignore_merges", where("model"), false);
  BytePairModel bpe(std::move(tokens), merges, ignore_merges, path);
  auto added = read_added_tokens(root.value("added_tokens", Json()), where("added_tokens"));
  return build_tokenizer(name, std::move(bpe), PreTokenizer(std::move(steps)), std::move(added),
                         nfc, config_path);
}

std::unique_ptr<Tokenizer> load_vocab_and_merges(const std::string& name,
                                                 const std::string& vocab_path,
                                                 const std::string& merges_path,
                                                 const std::string& config_path) {
  std::vector<std::string> tokens = read_vocab(parse_json_file(vocab_path), vocab_path);
  std::istringstream lines(read_tokenizer_file(merges_path));
  Json merge_list = Json::array();
  std::string line;
  for (int number = 1; std::getline(lines, line); ++number) {
    if (!line.empty() && line.back() == '\r') line.pop_back();
    if (line.empty() || (number == 1 && line.rfind("#version", 0) == 0)) continue;
    merge_list.push_back(line);
  }
  auto merges = read_merges(merge_list, merges_path);
  BytePairModel bpe(std::move(tokens), merges, false, merges_path);
  std::vector<AddedToken> added;
  if (auto id = bpe.find("<|endoftext|>")) added.push_back({"<|endoftext|>", *id, true});
  PreTokenizerStep split;
  split.pattern = std::make_shared<RegexPattern>(kGpt2SplitPattern, "GPT-2's split pattern");
  return build_tokenizer(name, std::move(bpe), PreTokenizer({split}), std::move(added), false,
                         config_path);
}

}  // namespace strata
