// The byte-level BPE tokenizer of the GPT-2, Llama 3 and Qwen2 families, loaded from a Hugging
// Face tokenizer.json or from GPT-2's vocab.json + merges.txt pair. Encoding matches added
// tokens first (special tokens such as <|endoftext|> are never split), pre-tokenizes the text
// between them and encodes each piece with the merge list; decoding concatenates the tokens'
// bytes and repairs invalid UTF-8 with U+FFFD, as Hugging Face's ByteLevel decoder does.
// An NFC normalizer (ICU) is applied; others are refused. Post-processors (a BOS prepended by a
// template) are not applied: encode() returns the text's tokens only, and begin_of_text_id() names
// the BOS for callers that want it.
#pragma once
#include <array>
#include <optional>
#include <string>
#include <vector>

#include "strata/data/bpe.h"
#include "strata/data/pre_tokenizer.h"
#include "strata/data/tokenizer.h"

namespace strata {

struct AddedToken {
  std::string content;
  int32_t id = 0;
  bool special = false;
  bool lstrip = false;  // the match swallows the whitespace before it
  bool rstrip = false;  // ... and after it
};

class ByteLevelBpeTokenizer final : public Tokenizer {
 public:
  ByteLevelBpeTokenizer(std::string name, BytePairModel model, PreTokenizer pre_tokenizer,
                        std::vector<AddedToken> added_tokens, bool nfc,
                        std::optional<int32_t> end_of_text, std::optional<int32_t> begin_of_text);

  std::string name() const override { return name_; }
  int64_t vocab_size() const override { return static_cast<int64_t>(decoded_.size()); }
  std::vector<int32_t> encode(std::string_view text) const override;
  std::string decode(const int64_t* ids, size_t count) const override;
  using Tokenizer::decode;
  std::optional<int32_t> end_of_text_id() const override { return end_of_text_; }
  std::optional<int32_t> begin_of_text_id() const override { return begin_of_text_; }

 private:
  // The leftmost-longest added token in text[from, ...): its index in added_tokens_ and where
  // the match (with stripped whitespace) starts and ends, or -1.
  int find_added_token(std::string_view text, size_t from, size_t* start, size_t* end) const;
  void encode_text(std::string_view text, std::vector<int32_t>& ids) const;

  std::string name_;
  BytePairModel model_;
  PreTokenizer pre_tokenizer_;
  std::vector<AddedToken> added_tokens_;  // longest first
  std::array<bool, 256> starts_added_token_{};
  bool nfc_;  // the text between added tokens is normalized to NFC first (Qwen2)
  std::vector<std::string> decoded_;  // the bytes of each id; empty: no token
  std::optional<int32_t> end_of_text_, begin_of_text_;
};

// Loads a tokenizer.json (Hugging Face tokenizers' format) holding a byte-level BPE model.
// Unsupported models, normalizers, pre-tokenizers and decoders are refused with a UserError
// naming the JSON key and its value. `config_path` (tokenizer_config.json, may be absent)
// names the end-of-text (eos_token) and begin-of-text (bos_token) tokens.
std::unique_ptr<Tokenizer> load_tokenizer_json(const std::string& name, const std::string& path,
                                               const std::string& config_path);

// Loads GPT-2's vocab.json + merges.txt: byte-level BPE with GPT-2's split pattern, and
// <|endoftext|> (when in the vocabulary) as a special token.
std::unique_ptr<Tokenizer> load_vocab_and_merges(const std::string& name,
                                                 const std::string& vocab_path,
                                                 const std::string& merges_path,
                                                 const std::string& config_path);

// The whole file, or a UserError naming it.
std::string read_tokenizer_file(const std::string& path);

}  // namespace strata
