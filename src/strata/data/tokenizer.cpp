// The byte tokenizer and the registry of tokenizer names.
#include "strata/data/tokenizer.h"

#include "strata/core/error.h"

namespace strata {

namespace {
// UTF-8 of U+FFFD REPLACEMENT CHARACTER: what an id outside the vocabulary decodes to.
constexpr std::string_view kReplacement = "\xEF\xBF\xBD";
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
      text.append(kReplacement);
    }
  }
  return text;
}

std::vector<std::string> available_tokenizers() { return {"byte"}; }

std::unique_ptr<Tokenizer> make_tokenizer(const std::string& name) {
  if (name == "byte") return std::make_unique<ByteTokenizer>();
  std::string allowed;
  for (const auto& known : available_tokenizers()) {
    allowed += (allowed.empty() ? "" : ", ") + known;
  }
  throw UserError(str("data.tokenizer = \"", name, "\" is not available; allowed: ", allowed));
}

}  // namespace strata
