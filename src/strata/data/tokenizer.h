// Tokenizers turn text into token ids and back. The byte tokenizer (UTF-8 bytes, vocab 256)
// is the one available now; make_tokenizer() is where others (BPE) will be registered, so
// callers never name a concrete class.
#pragma once
#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace strata {

class Tokenizer {
 public:
  virtual ~Tokenizer() = default;

  // The name stored in token shards and written as data.tokenizer ("byte").
  virtual std::string name() const = 0;
  // Ids are in [0, vocab_size()).
  virtual int64_t vocab_size() const = 0;

  virtual std::vector<int32_t> encode(std::string_view text) const = 0;

  // The token that ends a document (GPT-2's <|endoftext|>, Llama's </s>); none for the byte
  // tokenizer, whose documents are kept apart by a blank line instead.
  virtual std::optional<int32_t> end_of_text_id() const { return std::nullopt; }

  // Never throws on any id: the result is raw bytes (not necessarily valid UTF-8, e.g. when a
  // model emits half of a multi-byte character), and an id outside the vocabulary becomes
  // U+FFFD, so generated ids from a model with a padded vocabulary can always be shown.
  virtual std::string decode(const int64_t* ids, size_t count) const = 0;

  std::string decode(const std::vector<int64_t>& ids) const {
    return decode(ids.data(), ids.size());
  }
  std::string decode(const std::vector<int32_t>& ids) const;
};

// Each UTF-8 byte is one token: id = byte value. Round-trips every byte string exactly.
class ByteTokenizer final : public Tokenizer {
 public:
  std::string name() const override { return "byte"; }
  int64_t vocab_size() const override { return 256; }
  std::vector<int32_t> encode(std::string_view text) const override;
  std::string decode(const int64_t* ids, size_t count) const override;
  using Tokenizer::decode;
};

// The tokenizer called `name` (data.tokenizer). Throws UserError listing the available names.
std::unique_ptr<Tokenizer> make_tokenizer(const std::string& name);

// Names make_tokenizer() accepts, in the order shown to users.
std::vector<std::string> available_tokenizers();

}  // namespace strata
