// PCRE2 matching for the split patterns, and the split steps.
#include "strata/data/pre_tokenizer.h"

#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>

#include "strata/core/error.h"
#include "strata/data/utf8.h"

namespace strata {

namespace {

std::string pcre2_message(int error_code) {
  PCRE2_UCHAR buffer[256];
  pcre2_get_error_message(error_code, buffer, sizeof(buffer));
  return reinterpret_cast<const char*>(buffer);
}

}  // namespace

RegexPattern::RegexPattern(const std::string& pattern, const std::string& where) {
  int error_code = 0;
  PCRE2_SIZE error_offset = 0;
  code_ = pcre2_compile(reinterpret_cast<PCRE2_SPTR>(pattern.data()), pattern.size(),
                        PCRE2_UTF | PCRE2_UCP, &error_code, &error_offset, nullptr);
  STRATA_REQUIRE(code_ != nullptr, where, " = \"", pattern, "\" is not a regular expression ",
                 "PCRE2 accepts: ", pcre2_message(error_code), " at offset ", error_offset);
  // Without JIT support (some architectures) the interpreter gives the same matches, slower.
  jit_ = pcre2_jit_compile(static_cast<pcre2_code*>(code_), PCRE2_JIT_COMPLETE) == 0;
}

RegexPattern::~RegexPattern() { pcre2_code_free(static_cast<pcre2_code*>(code_)); }

void* RegexPattern::new_match_data() const {
  void* match_data = pcre2_match_data_create_from_pattern(static_cast<pcre2_code*>(code_), nullptr);
  STRATA_CHECK(match_data != nullptr, "out of memory for PCRE2 match data");
  return match_data;
}

void RegexPattern::free_match_data(void* match_data) {
  pcre2_match_data_free(static_cast<pcre2_match_data*>(match_data));
}

bool RegexPattern::next_match(std::string_view text, size_t from, void* match_data, size_t* start,
                              size_t* end) const {
  auto* code = static_cast<pcre2_code*>(code_);
  auto* data = static_cast<pcre2_match_data*>(match_data);
  auto subject = reinterpret_cast<PCRE2_SPTR>(text.data());
  while (from < text.size()) {
    // The text is valid UTF-8 (the tokenizer repairs it first): no need to check it again.
    int result =
        jit_ ? pcre2_jit_match(code, subject, text.size(), from, 0, data, nullptr)
             : pcre2_match(code, subject, text.size(), from, PCRE2_NO_UTF_CHECK, data, nullptr);
    if (result == PCRE2_ERROR_NOMATCH) return false;
    STRATA_REQUIRE(result >= 0, "the pre-tokenizer's regular expression failed on a text of ",
                   text.size(), " bytes: ", pcre2_message(result));
    PCRE2_SIZE* offsets = pcre2_get_ovector_pointer(data);
    if (offsets[1] > offsets[0]) {
      *start = offsets[0];
      *end = offsets[1];
      return true;
    }
    // An empty match splits nothing: look again from the next character.
    size_t length = utf8_sequence_length(text, offsets[0]);
    from = offsets[0] + (length > 0 ? length : 1);
  }
  return false;
}

void PreTokenizer::split(std::string_view text, std::vector<std::string_view>& pieces,
                         std::deque<std::string>& storage) const {
  pieces.clear();
  if (!text.empty()) pieces.push_back(text);
  thread_local std::vector<std::string_view> next;
  for (const auto& step : steps_) {
    next.clear();
    for (std::string_view piece : pieces) {
      if (step.add_prefix_space && piece.front() != ' ') {
        piece = storage.emplace_back(" ").append(piece);
      }
      if (!step.pattern) {
        next.push_back(piece);
        continue;
      }
      // Isolated keeps matches and gaps as pieces; Removed drops the delimiters, which are
      // the matches, or the gaps when the step is inverted.
      bool keep_matches = step.behavior == SplitBehavior::kIsolated || step.invert;
      bool keep_gaps = step.behavior == SplitBehavior::kIsolated || !step.invert;
      size_t gap_start = 0;
      step.pattern->for_each_match(piece, [&](size_t start, size_t end) {
        if (keep_gaps && start > gap_start)
          next.push_back(piece.substr(gap_start, start - gap_start));
        if (keep_matches) next.push_back(piece.substr(start, end - start));
        gap_start = end;
      });
      if (keep_gaps && piece.size() > gap_start) next.push_back(piece.substr(gap_start));
    }
    pieces.swap(next);
  }
}

}  // namespace strata
