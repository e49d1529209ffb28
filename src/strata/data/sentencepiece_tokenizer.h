// A SentencePiece model (tokenizer.model: Llama 2, Mistral), through Debian's libsentencepiece
// (reached through libstrata_sentencepiece.so: sentencepiece_shim.h says why). Encoding applies
// the model's own normalization, so decode(encode(text)) == text for text that normalization
// leaves alone (all text, for a model trained with the identity rule and byte_fallback);
// decoding repairs invalid UTF-8 with U+FFFD.
#pragma once
#include <memory>
#include <string>

#include "strata/data/tokenizer.h"

namespace strata {

class SentencePieceTokenizer final : public Tokenizer {
 public:
  // Throws UserError naming `path` when it cannot be read or is not a SentencePiece model.
  SentencePieceTokenizer(std::string name, const std::string& path);
  ~SentencePieceTokenizer() override;
  SentencePieceTokenizer(const SentencePieceTokenizer&) = delete;
  SentencePieceTokenizer& operator=(const SentencePieceTokenizer&) = delete;

  std::string name() const override { return name_; }
  int64_t vocab_size() const override { return vocab_size_; }
  std::vector<int32_t> encode(std::string_view text) const override;
  std::string decode(const int64_t* ids, size_t count) const override;
  using Tokenizer::decode;
  std::optional<int32_t> end_of_text_id() const override { return end_of_text_; }
  std::optional<int32_t> begin_of_text_id() const override { return begin_of_text_; }

 private:
  std::string name_;
  void* processor_;  // the shim's handle
  int64_t vocab_size_;
  std::optional<int32_t> end_of_text_, begin_of_text_;
};

}  // namespace strata
