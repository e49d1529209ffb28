// UTF-8 validation by the table of well-formed byte sequences (Unicode 15, table 3-7).
#include "strata/data/utf8.h"

namespace strata {

namespace {

bool is_continuation(unsigned char byte, unsigned char low = 0x80, unsigned char high = 0xBF) {
  return byte >= low && byte <= high;
}

// How many bytes starting at text[at] are a prefix of some well-formed sequence (at least 1):
// the "maximal subpart" that one U+FFFD replaces when the sequence is cut short.
size_t maximal_subpart_length(std::string_view text, size_t at) {
  auto lead = static_cast<unsigned char>(text[at]);
  unsigned char second_low = 0x80, second_high = 0xBF;
  size_t expected = 0;
  if (lead >= 0xC2 && lead <= 0xDF) {
    expected = 2;
  } else if (lead >= 0xE0 && lead <= 0xEF) {
    expected = 3;
    if (lead == 0xE0) second_low = 0xA0;   // no overlong forms
    if (lead == 0xED) second_high = 0x9F;  // no surrogates
  } else if (lead >= 0xF0 && lead <= 0xF4) {
    expected = 4;
    if (lead == 0xF0) second_low = 0x90;   // no overlong forms
    if (lead == 0xF4) second_high = 0x8F;  // nothing above U+10FFFF
  } else {
    return 1;
  }
  size_t length = 1;
  while (length < expected && at + length < text.size()) {
    auto byte = static_cast<unsigned char>(text[at + length]);
    bool fits =
        length == 1 ? is_continuation(byte, second_low, second_high) : is_continuation(byte);
    if (!fits) break;
    ++length;
  }
  return length;
}

size_t expected_length(unsigned char lead) {
  if (lead < 0x80) return 1;
  if (lead >= 0xC2 && lead <= 0xDF) return 2;
  if (lead >= 0xE0 && lead <= 0xEF) return 3;
  if (lead >= 0xF0 && lead <= 0xF4) return 4;
  return 0;
}

}  // namespace

size_t utf8_sequence_length(std::string_view text, size_t at) {
  size_t expected = expected_length(static_cast<unsigned char>(text[at]));
  if (expected <= 1) return expected;
  return maximal_subpart_length(text, at) == expected ? expected : 0;
}

bool is_valid_utf8(std::string_view text) {
  size_t at = 0;
  while (at < text.size()) {
    if (static_cast<unsigned char>(text[at]) < 0x80) {
      ++at;
      continue;
    }
    size_t length = utf8_sequence_length(text, at);
    if (length == 0) return false;
    at += length;
  }
  return true;
}

std::string to_valid_utf8(std::string_view text) {
  std::string out;
  out.reserve(text.size());
  size_t at = 0;
  while (at < text.size()) {
    size_t length = utf8_sequence_length(text, at);
    if (length > 0) {
      out.append(text.substr(at, length));
      at += length;
    } else {
      out.append(kReplacementCharacter);
      at += maximal_subpart_length(text, at);
    }
  }
  return out;
}

void append_utf8(std::string& out, char32_t code_point) {
  if (code_point < 0x80) {
    out.push_back(static_cast<char>(code_point));
  } else if (code_point < 0x800) {
    out.push_back(static_cast<char>(0xC0 | (code_point >> 6)));
    out.push_back(static_cast<char>(0x80 | (code_point & 0x3F)));
  } else if (code_point < 0x10000) {
    out.push_back(static_cast<char>(0xE0 | (code_point >> 12)));
    out.push_back(static_cast<char>(0x80 | ((code_point >> 6) & 0x3F)));
    out.push_back(static_cast<char>(0x80 | (code_point & 0x3F)));
  } else {
    out.push_back(static_cast<char>(0xF0 | (code_point >> 18)));
    out.push_back(static_cast<char>(0x80 | ((code_point >> 12) & 0x3F)));
    out.push_back(static_cast<char>(0x80 | ((code_point >> 6) & 0x3F)));
    out.push_back(static_cast<char>(0x80 | (code_point & 0x3F)));
  }
}

}  // namespace strata
