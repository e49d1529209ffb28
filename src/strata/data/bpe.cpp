// Byte-pair encoding of one piece.
//
// A piece starts as one token per byte. Merging follows the merge list's ranks: the adjacent
// pair with the best (lowest) rank is merged first, the leftmost one among equals, until no
// adjacent pair has a merge. This is what GPT-2's encoder.py and Hugging Face's BPE compute; it
// is done here with a min-heap of candidate pairs keyed (rank, position) over a doubly linked
// list of symbols, so a piece of n bytes costs O(n log n) even when it is a megabyte of letters.
// A candidate whose symbols changed since it was pushed is dropped when it surfaces.
#include "strata/data/bpe.h"

#include <algorithm>
#include <array>
#include <atomic>

#include "strata/core/error.h"
#include "strata/data/utf8.h"

namespace strata {

namespace {

struct ByteLevelAlphabet {
  std::array<char32_t, 256> char_of_byte{};
  std::array<int, 324> byte_of_char{};  // indexed by code point; -1: not in the alphabet

  ByteLevelAlphabet() {
    byte_of_char.fill(-1);
    char32_t next_unprintable = 256;
    for (int byte = 0; byte < 256; ++byte) {
      bool printable = (byte >= '!' && byte <= '~') || (byte >= 0xA1 && byte <= 0xAC) ||
                       (byte >= 0xAE && byte <= 0xFF);
      char32_t c = printable ? static_cast<char32_t>(byte) : next_unprintable++;
      char_of_byte[byte] = c;
      byte_of_char[c] = byte;
    }
  }
};

const ByteLevelAlphabet& alphabet() {
  static const ByteLevelAlphabet table;
  return table;
}

// The per-thread cache of pieces already encoded: their ids live in one array, so a cached
// piece costs no allocation of its own. Holds one model's pieces at a time.
struct PieceCache {
  uint64_t owner = 0;
  std::unordered_map<std::string, std::pair<uint32_t, uint32_t>> spans;  // piece -> ids span
  std::vector<int32_t> ids;
  std::string key;  // reused for lookups

  static constexpr size_t kMaxPieces = 1 << 16;
  static constexpr size_t kMaxPieceBytes = 256;  // longer pieces are rare: not cached

  void claim(uint64_t model) {
    if (owner == model) return;
    owner = model;
    clear();
  }
  void clear() {
    spans.clear();
    ids.clear();
  }
};

thread_local PieceCache piece_cache;

// One adjacent pair that may merge: (rank, position) orders the heap, the ids tell whether the
// pair is still there when it surfaces.
struct Candidate {
  int32_t rank, position, left_id, right_id, merged_id;
};
bool later(const Candidate& a, const Candidate& b) {
  return a.rank != b.rank ? a.rank > b.rank : a.position > b.position;
}

struct Symbol {
  int32_t id;  // -1 once merged into its left neighbour
  int32_t prev, next;
};

uint64_t pair_key(int32_t left, int32_t right) {
  return (static_cast<uint64_t>(static_cast<uint32_t>(left)) << 32) | static_cast<uint32_t>(right);
}

uint64_t next_cache_owner() {
  static std::atomic<uint64_t> counter{0};
  return ++counter;
}

}  // namespace

char32_t byte_level_char(unsigned char byte) { return alphabet().char_of_byte[byte]; }

std::optional<std::string> byte_level_to_bytes(std::string_view token) {
  std::string bytes;
  bytes.reserve(token.size());
  size_t at = 0;
  while (at < token.size()) {
    size_t length = utf8_sequence_length(token, at);
    if (length == 0) return std::nullopt;
    char32_t c = 0;
    auto lead = static_cast<unsigned char>(token[at]);
    if (length == 1) c = lead;
    if (length == 2) c = ((lead & 0x1F) << 6) | (static_cast<unsigned char>(token[at + 1]) & 0x3F);
    if (length > 2 || c >= alphabet().byte_of_char.size() || alphabet().byte_of_char[c] < 0) {
      return std::nullopt;
    }
    bytes.push_back(static_cast<char>(alphabet().byte_of_char[c]));
    at += length;
  }
  return bytes;
}

std::string bytes_to_byte_level(std::string_view bytes) {
  std::string token;
  token.reserve(bytes.size() * 2);
  for (char byte : bytes) append_utf8(token, byte_level_char(static_cast<unsigned char>(byte)));
  return token;
}

BytePairModel::BytePairModel(std::vector<std::string> tokens,
                             const std::vector<std::pair<std::string, std::string>>& merges,
                             bool ignore_merges, const std::string& source)
    : tokens_(std::move(tokens)), ignore_merges_(ignore_merges), cache_owner_(next_cache_owner()) {
  ids_by_bytes_.reserve(tokens_.size());
  for (size_t id = 0; id < tokens_.size(); ++id) {
    if (!tokens_[id].empty()) ids_by_bytes_.emplace(tokens_[id], static_cast<int32_t>(id));
  }
  for (int byte = 0; byte < 256; ++byte) {
    auto id = find(std::string(1, static_cast<char>(byte)));
    STRATA_REQUIRE(id.has_value(), source, ": the vocabulary has no token for byte 0x", std::hex,
                   byte, std::dec, " (byte-level BPE needs all 256 single-byte tokens)");
    byte_ids_[byte] = *id;
  }
  size_t capacity = 16;
  while (capacity < 2 * merges.size()) capacity *= 2;
  merge_slots_.resize(capacity);
  for (size_t rank = 0; rank < merges.size(); ++rank) {
    const auto& [left, right] = merges[rank];
    auto left_id = find(left), right_id = find(right), merged_id = find(left + right);
    STRATA_REQUIRE(left_id && right_id && merged_id, source, ": merge ", rank + 1, " (\"",
                   bytes_to_byte_level(left), " ", bytes_to_byte_level(right),
                   "\") names a token that is not in the vocabulary");
    add_merge(*left_id, *right_id, static_cast<int32_t>(rank), *merged_id);
  }
}

std::optional<int32_t> BytePairModel::find(const std::string& bytes) const {
  auto found = ids_by_bytes_.find(bytes);
  if (found == ids_by_bytes_.end()) return std::nullopt;
  return found->second;
}

void BytePairModel::add_merge(int32_t left, int32_t right, int32_t rank, int32_t merged_id) {
  uint64_t key = pair_key(left, right);
  size_t mask = merge_slots_.size() - 1;
  size_t slot = (key * 0x9E3779B97F4A7C15ull) & mask;
  while (merge_slots_[slot].pair != kEmptyPair && merge_slots_[slot].pair != key) {
    slot = (slot + 1) & mask;
  }
  // A pair listed twice keeps its first (best) rank, as Hugging Face's loader does.
  if (merge_slots_[slot].pair == key) return;
  merge_slots_[slot] = {key, rank, merged_id};
}

const BytePairModel::MergeSlot* BytePairModel::find_merge(int32_t left, int32_t right) const {
  uint64_t key = pair_key(left, right);
  size_t mask = merge_slots_.size() - 1;
  size_t slot = (key * 0x9E3779B97F4A7C15ull) & mask;
  while (merge_slots_[slot].pair != kEmptyPair) {
    if (merge_slots_[slot].pair == key) return &merge_slots_[slot];
    slot = (slot + 1) & mask;
  }
  return nullptr;
}

void BytePairModel::encode_piece(std::string_view piece, std::vector<int32_t>& ids) const {
  if (piece.size() == 1) {
    ids.push_back(byte_ids_[static_cast<unsigned char>(piece[0])]);
    return;
  }
  PieceCache& cache = piece_cache;
  cache.claim(cache_owner_);
  cache.key.assign(piece.data(), piece.size());
  if (auto hit = cache.spans.find(cache.key); hit != cache.spans.end()) {
    auto [offset, count] = hit->second;
    ids.insert(ids.end(), cache.ids.begin() + offset, cache.ids.begin() + offset + count);
    return;
  }
  size_t first = ids.size();
  auto whole = ignore_merges_ ? find(cache.key) : std::nullopt;
  if (whole) {
    ids.push_back(*whole);
  } else {
    merge_piece(piece, ids);
  }
  if (piece.size() > PieceCache::kMaxPieceBytes) return;
  if (cache.spans.size() >= PieceCache::kMaxPieces) cache.clear();
  auto offset = static_cast<uint32_t>(cache.ids.size());
  cache.ids.insert(cache.ids.end(), ids.begin() + first, ids.end());
  cache.spans.emplace(cache.key, std::make_pair(offset, static_cast<uint32_t>(ids.size() - first)));
}

void BytePairModel::merge_piece(std::string_view piece, std::vector<int32_t>& ids) const {
  thread_local std::vector<Symbol> symbols;
  thread_local std::vector<Candidate> heap;
  symbols.clear();
  heap.clear();
  auto n = static_cast<int32_t>(piece.size());
  for (int32_t i = 0; i < n; ++i) {
    symbols.push_back(
        {byte_ids_[static_cast<unsigned char>(piece[i])], i - 1, i + 1 < n ? i + 1 : -1});
  }
  auto push_candidate = [&](int32_t position) {
    int32_t next = symbols[position].next;
    if (next < 0) return;
    const MergeSlot* merge = find_merge(symbols[position].id, symbols[next].id);
    if (merge == nullptr) return;
    heap.push_back(
        {merge->rank, position, symbols[position].id, symbols[next].id, merge->merged_id});
    std::push_heap(heap.begin(), heap.end(), later);
  };
  for (int32_t i = 0; i + 1 < n; ++i) push_candidate(i);

  while (!heap.empty()) {
    std::pop_heap(heap.begin(), heap.end(), later);
    Candidate top = heap.back();
    heap.pop_back();
    Symbol& left = symbols[top.position];
    if (left.id != top.left_id || left.next < 0 || symbols[left.next].id != top.right_id) continue;
    Symbol& right = symbols[left.next];
    left.id = top.merged_id;
    left.next = right.next;
    if (right.next >= 0) symbols[right.next].prev = top.position;
    right.id = -1;
    if (left.prev >= 0) push_candidate(left.prev);
    push_candidate(top.position);
  }
  for (int32_t i = 0; i >= 0; i = symbols[i].next) ids.push_back(symbols[i].id);
}

}  // namespace strata
