// Pre-tokenization: splitting text into the pieces that byte-pair encoding then encodes one by
// one (Hugging Face's pre_tokenizer; GPT-2's regex split). A pre-tokenizer is a sequence of
// steps, each splitting every piece the previous step produced.
#pragma once
#include <cstddef>
#include <deque>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

namespace strata {

// A compiled regular expression (PCRE2 with Unicode properties, JIT-compiled): the split
// patterns of tokenizer.json use \p{L}, \p{N}, lookahead and (?i:...), which PCRE2 reads as
// Oniguruma (Hugging Face) and fancy-regex (tiktoken) do.
class RegexPattern {
 public:
  // Throws UserError naming `where` (the JSON key) when the pattern does not compile.
  RegexPattern(const std::string& pattern, const std::string& where);
  ~RegexPattern();
  RegexPattern(const RegexPattern&) = delete;
  RegexPattern& operator=(const RegexPattern&) = delete;

  // Calls on_match(start, end) for each non-empty match in `text` (valid UTF-8), left to right.
  template <typename OnMatch>
  void for_each_match(std::string_view text, OnMatch&& on_match) const;

 private:
  // The next non-empty match at or after `from`: true and [*start, *end), or false.
  bool next_match(std::string_view text, size_t from, void* match_data, size_t* start,
                  size_t* end) const;
  void* new_match_data() const;
  static void free_match_data(void* match_data);

  void* code_;  // pcre2_code_8
  bool jit_;
};

// What a split step keeps of the pattern's matches ("behavior" in tokenizer.json).
enum class SplitBehavior { kIsolated, kRemoved };

struct PreTokenizerStep {
  std::shared_ptr<const RegexPattern> pattern;  // null: the step does not split
  SplitBehavior behavior = SplitBehavior::kIsolated;
  bool invert = false;            // the matches are the pieces and the gaps the delimiters
  bool add_prefix_space = false;  // ByteLevel: a piece not starting with ' ' gets one first
};

class PreTokenizer {
 public:
  PreTokenizer() = default;
  explicit PreTokenizer(std::vector<PreTokenizerStep> steps) : steps_(std::move(steps)) {}

  // Replaces `pieces` with the non-empty pieces of `text` (valid UTF-8). A piece points into
  // `text` or, when a step adds a prefix space, into a string appended to `storage`.
  void split(std::string_view text, std::vector<std::string_view>& pieces,
             std::deque<std::string>& storage) const;

 private:
  std::vector<PreTokenizerStep> steps_;
};

// GPT-2's split pattern (OpenAI's encoder.py; Hugging Face's ByteLevel pre-tokenizer with
// use_regex).
inline constexpr const char* kGpt2SplitPattern =
    R"('s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+)";

template <typename OnMatch>
void RegexPattern::for_each_match(std::string_view text, OnMatch&& on_match) const {
  void* match_data = new_match_data();
  size_t at = 0, start = 0, end = 0;
  try {
    while (at < text.size() && next_match(text, at, match_data, &start, &end)) {
      on_match(start, end);
      at = end;
    }
  } catch (...) {
    free_match_data(match_data);
    throw;
  }
  free_match_data(match_data);
}

}  // namespace strata
