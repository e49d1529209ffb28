// Building the tokenizer corpus from files on a Debian system and a seeded generator.
#include "tokenizer_corpus.h"

#include <algorithm>
#include <filesystem>
#include <random>

#include "strata/data/utf8.h"
#include "test_support.h"

namespace strata::testing {

namespace {

namespace fs = std::filesystem;

// The regular files under `dir` (recursively) whose name passes `wanted`, sorted.
template <typename Wanted>
std::vector<std::string> files_under(const std::string& dir, Wanted wanted) {
  std::vector<std::string> files;
  std::error_code error;
  for (auto it = fs::recursive_directory_iterator(dir, error);
       !error && it != fs::recursive_directory_iterator(); it.increment(error)) {
    if (it->is_regular_file() && wanted(it->path())) files.push_back(it->path().string());
  }
  std::sort(files.begin(), files.end());
  return files;
}

// Appends documents of `files` (each split at `separator`, if given) until `budget` bytes.
void add_documents(const std::vector<std::string>& files, const std::string& separator,
                   size_t budget, std::vector<std::string>& corpus) {
  size_t added = 0;
  for (const auto& file : files) {
    std::string text = to_valid_utf8(read_bytes(file));
    size_t at = 0;
    while (at < text.size() && added < budget) {
      size_t end = separator.empty() ? std::string::npos : text.find(separator, at);
      if (end == std::string::npos) end = text.size();
      corpus.push_back(text.substr(at, end - at));
      added += end - at;
      at = end + separator.size();
    }
    if (added >= budget) return;
  }
}

struct Generator {
  std::mt19937 random;
  explicit Generator(unsigned seed) : random(seed) {}

  int uniform(int low, int high) { return std::uniform_int_distribution<int>(low, high)(random); }
  bool chance(int percent) { return uniform(1, 100) <= percent; }

  void append(std::string& out, char32_t c) { append_utf8(out, c); }

  // A word of one script: letters from its ranges, Devanagari with vowel signs between.
  void word(std::string& out) {
    static const std::vector<std::pair<char32_t, char32_t>> scripts = {
        {0x4E00, 0x9FA5}, {0x3041, 0x3093}, {0x30A1, 0x30F6}, {0xAC00, 0xD7A3},
        {0x0410, 0x044F}, {0x03B1, 0x03C9}, {0x0627, 0x064A}, {0x05D0, 0x05EA},
        {0x0905, 0x0939}, {0x0E01, 0x0E30}, {0x00C0, 0x00D6}, {'a', 'z'}};
    auto [low, high] = scripts[uniform(0, static_cast<int>(scripts.size()) - 1)];
    int length = uniform(1, 8);
    for (int i = 0; i < length; ++i) {
      append(out, static_cast<char32_t>(uniform(low, high)));
      if (low == 0x0905 && chance(40)) append(out, static_cast<char32_t>(uniform(0x093E, 0x094C)));
    }
  }

  // An emoji, a skin-toned one, a ZWJ family, a flag or a symbol with VS16.
  void emoji(std::string& out) {
    switch (uniform(0, 4)) {
      case 0:
        append(out, static_cast<char32_t>(uniform(0x1F600, 0x1F64F)));
        break;
      case 1:
        append(out, static_cast<char32_t>(uniform(0x1F466, 0x1F469)));
        append(out, static_cast<char32_t>(uniform(0x1F3FB, 0x1F3FF)));
        break;
      case 2:
        for (char32_t c : {0x1F468, 0x200D, 0x1F469, 0x200D, 0x1F467}) append(out, c);
        break;
      case 3:
        append(out, static_cast<char32_t>(uniform(0x1F1E6, 0x1F1FF)));
        append(out, static_cast<char32_t>(uniform(0x1F1E6, 0x1F1FF)));
        break;
      default:
        append(out, static_cast<char32_t>(uniform(0x2600, 0x26FF)));
        append(out, 0xFE0F);
    }
  }

  // Text not in NFC: a Latin letter with a combining mark, or Hangul as conjoining jamo.
  void decomposed(std::string& out) {
    if (chance(50)) {
      append(out, static_cast<char32_t>(uniform('a', 'z')));
      append(out, static_cast<char32_t>(uniform(0x0300, 0x0308)));
    } else {
      append(out, static_cast<char32_t>(uniform(0x1100, 0x1112)));
      append(out, static_cast<char32_t>(uniform(0x1161, 0x1175)));
    }
  }

  void whitespace_run(std::string& out) {
    static const std::vector<std::string> spaces = {" ",        "\t",           "\n", "\r\n", "\r",
                                                    "\xC2\xA0", "\xE3\x80\x80", "\v", "\f"};
    int length = uniform(1, 40);
    for (int i = 0; i < length; ++i) out += spaces[uniform(0, static_cast<int>(spaces.size()) - 1)];
  }

  void separator(std::string& out) {
    static const std::vector<std::string> separators = {
        " ",   " ",    " ",    ", ",  ". ",           "\n",           "  ",        "!? ", "... ",
        "'s ", "'LL ", "'Ve ", " - ", "\xE3\x80\x82", "\xEF\xBC\x8C", "\xD8\x8C ", "\n\n"};
    out += separators[uniform(0, static_cast<int>(separators.size()) - 1)];
  }

  // Appends generated text to `out` until it holds `bytes` bytes.
  void document(size_t bytes, std::string& out) {
    while (out.size() < bytes) {
      int kind = uniform(0, 99);
      if (kind < 66) {
        word(out);
      } else if (kind < 70) {
        decomposed(out);
      } else if (kind < 78) {
        emoji(out);
      } else if (kind < 86) {
        int digits = uniform(1, 12);
        for (int i = 0; i < digits; ++i) out.push_back(static_cast<char>('0' + uniform(0, 9)));
      } else if (kind < 92) {
        whitespace_run(out);
      } else {
        out.append(uniform(1, 5), "!.?#*-=_"[uniform(0, 7)]);
      }
      separator(out);
    }
  }
};

}  // namespace

std::vector<std::string> tokenizer_corpus() {
  std::vector<std::string> corpus;
  auto no_extension = [](const fs::path& path) { return !path.has_extension(); };
  add_documents(files_under("/usr/share/games/fortunes", no_extension), "\n%\n", 450'000, corpus);
  add_documents(files_under("/usr/share/common-licenses", no_extension), "", 250'000, corpus);
  auto is_cpp = [](const fs::path& path) {
    return path.extension() == ".cpp" || path.extension() == ".h";
  };
  add_documents(files_under(STRATA_SOURCE_DIR "/src/strata", is_cpp), "", 250'000, corpus);
  Generator generator(33);
  for (int i = 0; i < 150; ++i) generator.document(1000, corpus.emplace_back());
  return corpus;
}

std::vector<std::string> random_utf8_strings(int count, unsigned seed) {
  Generator generator(seed);
  std::vector<std::string> strings;
  for (int i = 0; i < count; ++i) {
    std::string text;
    int length = generator.uniform(0, 64);
    for (int j = 0; j < length; ++j) {
      char32_t c = generator.chance(50) ? generator.uniform(1, 0x7F)
                                        : generator.uniform(0x80, 0x10FFFF - 0x800);
      if (c >= 0xD800 && c < 0xE000) c += 0x800;  // skip the surrogates
      append_utf8(text, c);
    }
    strings.push_back(text);
  }
  return strings;
}

}  // namespace strata::testing
