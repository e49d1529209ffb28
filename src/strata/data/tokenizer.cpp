// The byte tokenizer, and choosing a tokenizer by name or from a model directory.
#include "strata/data/tokenizer.h"

#include <filesystem>
#include <nlohmann/json.hpp>

#include "strata/core/error.h"
#include "strata/data/hf_tokenizer.h"
#include "strata/data/sentencepiece_tokenizer.h"
#include "strata/data/utf8.h"

namespace strata {

namespace {

namespace fs = std::filesystem;

bool is_file(const std::string& path) {
  std::error_code error;
  return fs::is_regular_file(path, error);
}

// Whether a tokenizer.json is byte-level BPE, as opposed to the conversion of a SentencePiece
// model (Llama 2, Mistral) that transformers writes next to its tokenizer.model.
bool is_byte_level(const std::string& tokenizer_json) {
  nlohmann::json root;
  try {
    root = nlohmann::json::parse(read_tokenizer_file(tokenizer_json));
  } catch (const nlohmann::json::parse_error& error) {
    throw UserError(str(tokenizer_json, " is not valid JSON: ", error.what()));
  }
  for (const char* key : {"pre_tokenizer", "decoder"}) {
    if (root.contains(key) && root[key].dump().find("\"ByteLevel\"") != std::string::npos) {
      return true;
    }
  }
  return false;
}

}  // namespace

std::string Tokenizer::decode(const std::vector<int32_t>& ids) const {
  std::vector<int64_t> wide(ids.begin(), ids.end());
  return decode(wide.data(), wide.size());
}

std::vector<int32_t> ByteTokenizer::encode(std::string_view text) const {
  std::vector<int32_t> ids(text.size());
  for (size_t i = 0; i < text.size(); ++i) ids[i] = static_cast<unsigned char>(text[i]);
  return ids;
}

std::string ByteTokenizer::decode(const int64_t* ids, size_t count) const {
  std::string text;
  text.reserve(count);
  for (size_t i = 0; i < count; ++i) {
    if (ids[i] >= 0 && ids[i] < 256) {
      text.push_back(static_cast<char>(static_cast<unsigned char>(ids[i])));
    } else {
      text.append(kReplacementCharacter);
    }
  }
  return text;
}

std::vector<std::string> available_tokenizers() { return {"byte"}; }

std::unique_ptr<Tokenizer> make_tokenizer(const std::string& name) {
  if (name == "byte") return std::make_unique<ByteTokenizer>();
  std::error_code error;
  if (!name.empty() && fs::is_directory(name, error)) return load_tokenizer(name);
  std::string allowed;
  for (const auto& known : available_tokenizers()) {
    allowed += (allowed.empty() ? "" : ", ") + known;
  }
  throw UserError(str("data.tokenizer = \"", name, "\" is not available; allowed: ", allowed,
                      ", or a directory holding tokenizer.json, vocab.json + merges.txt or ",
                      "tokenizer.model"));
}

bool holds_tokenizer(const std::string& dir) {
  return is_file(dir + "/tokenizer.json") ||
         (is_file(dir + "/vocab.json") && is_file(dir + "/merges.txt")) ||
         is_file(dir + "/tokenizer.model");
}

std::unique_ptr<Tokenizer> load_tokenizer(const std::string& dir) {
  std::string json = dir + "/tokenizer.json", vocab = dir + "/vocab.json",
              merges = dir + "/merges.txt", model = dir + "/tokenizer.model",
              config = dir + "/tokenizer_config.json";
  if (is_file(json) && !(is_file(model) && !is_byte_level(json))) {
    return load_tokenizer_json(dir, json, config);
  }
  if (is_file(vocab) && is_file(merges)) return load_vocab_and_merges(dir, vocab, merges, config);
  if (is_file(model)) return std::make_unique<SentencePieceTokenizer>(dir, model);
  throw UserError(str("the tokenizer directory ", dir, " holds none of tokenizer.json, ",
                      "vocab.json + merges.txt, tokenizer.model"));
}

}  // namespace strata
