// mutate(): the corruptions, picked uniformly.
#include "mutation.h"

#include <cctype>
#include <utility>
#include <vector>

namespace strata::testing {
namespace {

const std::vector<std::string> kHostileValues = {"-1",
                                                 "0",
                                                 "1",
                                                 "7",
                                                 "4096",
                                                 "2147483648",
                                                 "4611686018427387904",
                                                 "9223372036854775807",
                                                 "-9223372036854775808",
                                                 "18446744073709551615",
                                                 "1e308",
                                                 "-0.5",
                                                 "[]",
                                                 "null",
                                                 "\"x\""};

}  // namespace

std::string mutate(const std::string& text, std::mt19937& random) {
  std::string out = text;
  auto position = [&](size_t size) {
    return std::uniform_int_distribution<size_t>(0, size == 0 ? 0 : size - 1)(random);
  };
  switch (std::uniform_int_distribution<int>(0, 4)(random)) {
    case 0:  // flip a few bits
      for (int i = std::uniform_int_distribution<int>(1, 4)(random); i > 0 && !out.empty(); --i) {
        out[position(out.size())] ^=
            static_cast<char>(1 << std::uniform_int_distribution<int>(0, 7)(random));
      }
      break;
    case 1:  // cut
      out.resize(position(out.size()));
      break;
    case 2:  // delete a stretch
      if (!out.empty()) {
        out.erase(position(out.size()), std::uniform_int_distribution<size_t>(1, 16)(random));
      }
      break;
    case 3: {  // digits replaced by a hostile value
      std::vector<std::pair<size_t, size_t>> numbers;
      for (size_t i = 0; i < out.size();) {
        size_t end = i;
        while (end < out.size() && std::isdigit(static_cast<unsigned char>(out[end]))) ++end;
        if (end > i) numbers.emplace_back(i, end - i);
        i = end + 1;
      }
      if (numbers.empty()) break;
      const auto [begin, length] = numbers[position(numbers.size())];
      out.replace(begin, length, kHostileValues[position(kHostileValues.size())]);
      break;
    }
    default: {  // a stretch repeated
      const size_t begin = position(out.size());
      out.insert(begin, out.substr(begin, 32));
    }
  }
  return out;
}

}  // namespace strata::testing
