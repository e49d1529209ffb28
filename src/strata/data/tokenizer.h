// Tokenizers turn text into token ids and back: the byte tokenizer (UTF-8 bytes, vocab 256),
// and the tokenizers of Hugging Face model directories (byte-level BPE from tokenizer.json or
// vocab.json + merges.txt, SentencePiece from tokenizer.model). make_tokenizer() chooses, so
// callers never name a concrete class. encode() and decode() are const and safe to call from
// several threads at once.
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

  // The name stored in token shards and written as data.tokenizer: "byte", or the directory a
  // tokenizer was loaded from, as given.
  virtual std::string name() const = 0;
  // Ids are in [0, vocab_size()).
  virtual int64_t vocab_size() const = 0;

  // Text that is not valid UTF-8 is encoded as if each invalid byte sequence were U+FFFD (the
  // byte tokenizer, which encodes bytes, excepted).
  virtual std::vector<int32_t> encode(std::string_view text) const = 0;

  // The token that ends a document (GPT-2's <|endoftext|>, Llama's </s>); none for the byte
  // tokenizer, whose documents are kept apart by a blank line instead.
  virtual std::optional<int32_t> end_of_text_id() const { return std::nullopt; }
  // The token a model's input starts with (Llama's <s>, <|begin_of_text|>), if it has one.
  virtual std::optional<int32_t> begin_of_text_id() const { return std::nullopt; }

  // Never throws on any id: an id outside the vocabulary becomes U+FFFD, so generated ids from
  // a model with a padded vocabulary can always be shown. The byte tokenizer returns raw bytes
  // (half of a multi-byte character stays half); the others return valid UTF-8, each invalid
  // byte sequence replaced by U+FFFD as Hugging Face's decoders do.
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

// The tokenizer called `name` (data.tokenizer): "byte", or a directory holding a model's
// tokenizer files (load_tokenizer). Throws UserError listing what is accepted.
std::unique_ptr<Tokenizer> make_tokenizer(const std::string& name);

// The tokenizer of a model directory, chosen from what it holds, first match wins:
// tokenizer.json (byte-level BPE; but when it is a converted SentencePiece model and
// tokenizer.model is there too, tokenizer.model), vocab.json + merges.txt, tokenizer.model.
// tokenizer_config.json, when present, names the end-of-text and begin-of-text tokens.
// Throws UserError naming the directory when it holds none, or the file that cannot be read.
std::unique_ptr<Tokenizer> load_tokenizer(const std::string& dir);

// Whether `dir` holds tokenizer files load_tokenizer() reads.
bool holds_tokenizer(const std::string& dir);

// Names make_tokenizer() accepts, in the order shown to users.
std::vector<std::string> available_tokenizers();

}  // namespace strata
