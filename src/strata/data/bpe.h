// Byte-level byte-pair encoding (GPT-2, Llama 3, Qwen2): the model that turns one pre-tokenized
// piece of text into token ids by merging adjacent tokens in the order of the merge list.
// Tokens are held as the raw bytes they stand for, not as GPT-2's printable "byte-level"
// characters (Ġ for a space): the mapping is undone once when the vocabulary loads
// (byte_level_to_bytes), so encoding and decoding never translate characters.
#pragma once
#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <utility>
#include <vector>

namespace strata {

// GPT-2's printable stand-in for a byte (bytes_to_unicode in OpenAI's encoder.py): printable
// Latin-1 bytes stand for themselves, the others for U+0100 upward in byte order.
char32_t byte_level_char(unsigned char byte);

// The bytes a byte-level token string stands for ("Ġthe" -> " the"); none when it holds a
// character outside the byte-level alphabet.
std::optional<std::string> byte_level_to_bytes(std::string_view token);

// The byte-level token string of raw bytes (" the" -> "Ġthe").
std::string bytes_to_byte_level(std::string_view bytes);

class BytePairModel {
 public:
  // tokens[id] is the byte string of token id (ids without a token are empty strings, which
  // never match); merges are byte-string pairs, best first. Throws UserError, naming `source`,
  // when a merge's parts or result are not tokens or a single byte has no token.
  BytePairModel(std::vector<std::string> tokens,
                const std::vector<std::pair<std::string, std::string>>& merges, bool ignore_merges,
                const std::string& source);
  BytePairModel(BytePairModel&&) = default;

  // Appends the ids of one piece (non-empty bytes). Const and safe to call from several threads
  // at once: each thread keeps its own cache of pieces already encoded.
  void encode_piece(std::string_view piece, std::vector<int32_t>& ids) const;

  int64_t size() const { return static_cast<int64_t>(tokens_.size()); }
  // The bytes of token `id` (in range).
  const std::string& token(int32_t id) const { return tokens_[id]; }
  // The id of the token whose bytes are `bytes`, if any.
  std::optional<int32_t> find(const std::string& bytes) const;

 private:
  struct MergeSlot {
    uint64_t pair = kEmptyPair;  // (left id << 32) | right id
    int32_t rank = 0;
    int32_t merged_id = 0;
  };
  static constexpr uint64_t kEmptyPair = ~uint64_t{0};

  void add_merge(int32_t left, int32_t right, int32_t rank, int32_t merged_id);
  const MergeSlot* find_merge(int32_t left, int32_t right) const;
  void merge_piece(std::string_view piece, std::vector<int32_t>& ids) const;

  std::vector<std::string> tokens_;
  std::unordered_map<std::string, int32_t> ids_by_bytes_;
  int32_t byte_ids_[256];
  // Open-addressing hash table from an adjacent pair of ids to its merge (power-of-two size).
  std::vector<MergeSlot> merge_slots_;
  bool ignore_merges_;
  uint64_t cache_owner_;  // tells this model's per-thread cache from another model's
};

}  // namespace strata
