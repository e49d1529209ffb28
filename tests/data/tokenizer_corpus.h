// The ≥ 1 MB corpus the BPE tokenizers are compared on: English (Debian's fortunes and
// licenses), C++ (this repository's sources), and generated text in other scripts (CJK, Kana,
// Hangul, Cyrillic, Greek, Arabic, Hebrew, Devanagari, Thai), emoji sequences, numbers,
// contractions and whitespace runs. Deterministic: fixed files, fixed seed.
//
// Left out on purpose: characters the regex engines class differently as whitespace (U+0085,
// U+180E, U+FEFF: JavaScript's \s and Unicode's White_Space disagree on them).
#pragma once
#include <string>
#include <vector>

namespace strata::testing {

std::vector<std::string> tokenizer_corpus();

// `count` random strings of valid UTF-8 drawn from every plane (surrogates excluded).
std::vector<std::string> random_utf8_strings(int count, unsigned seed);

}  // namespace strata::testing
