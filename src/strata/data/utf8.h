// UTF-8 checks and repair shared by the tokenizers: every tokenizer works on valid UTF-8, and
// text that is not (a file with a stray byte, a decode that ends mid-character) is repaired the
// way Hugging Face's tokenizers and Rust's String::from_utf8_lossy do it.
#pragma once
#include <cstddef>
#include <string>
#include <string_view>

namespace strata {

// UTF-8 of U+FFFD REPLACEMENT CHARACTER.
inline constexpr std::string_view kReplacementCharacter = "\xEF\xBF\xBD";

// The length of the valid UTF-8 sequence starting at text[at], or 0 when the bytes there do
// not start one (overlong forms, surrogates and code points above U+10FFFF are invalid).
size_t utf8_sequence_length(std::string_view text, size_t at);

bool is_valid_utf8(std::string_view text);

// `text` with each maximal invalid subpart replaced by U+FFFD (the Unicode standard's
// "substitution of maximal subparts", as from_utf8_lossy and the WHATWG decoder do).
std::string to_valid_utf8(std::string_view text);

// Appends the UTF-8 encoding of `code_point` (at most U+10FFFF).
void append_utf8(std::string& out, char32_t code_point);

}  // namespace strata
