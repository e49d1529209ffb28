// `strata tokenize`: stdin to ids, or ids to text.
#include "strata/cli/tokenize.h"

#include <charconv>
#include <iostream>
#include <iterator>
#include <nlohmann/json.hpp>

#include "strata/core/error.h"
#include "strata/data/tokenizer.h"

namespace strata {

namespace {

std::string read_stdin() {
  return std::string(std::istreambuf_iterator<char>(std::cin), std::istreambuf_iterator<char>());
}

void print_ids(const std::vector<int32_t>& ids) {
  std::string out = "[";
  char number[16];
  for (size_t i = 0; i < ids.size(); ++i) {
    if (i > 0) out += ", ";
    auto end = std::to_chars(number, number + sizeof(number), ids[i]).ptr;
    out.append(number, end);
  }
  out += "]\n";
  std::cout << out;
}

std::vector<int64_t> parse_ids(const std::string& text) {
  const char* expected = "strata tokenize --decode reads a JSON array of integer ids on stdin";
  nlohmann::json ids;
  try {
    ids = nlohmann::json::parse(text);
  } catch (const nlohmann::json::parse_error& error) {
    throw UserError(str(expected, "; this is not JSON: ", error.what()));
  }
  STRATA_REQUIRE(ids.is_array(), expected, ", not ", ids.type_name());
  std::vector<int64_t> parsed;
  for (size_t i = 0; i < ids.size(); ++i) {
    STRATA_REQUIRE(ids[i].is_number_integer(), expected, "; element ", i, " is ", ids[i].dump());
    parsed.push_back(ids[i].get<int64_t>());
  }
  return parsed;
}

}  // namespace

CLI::App* add_tokenize_command(CLI::App& app) {
  struct Flags {
    std::string tokenizer;
    bool decode = false;
  };
  auto flags = std::make_shared<Flags>();
  CLI::App* command = app.add_subcommand(
      "tokenize",
      "Print the ids of the UTF-8 text on stdin as a JSON array (--decode: the text "
      "of a JSON array of ids)");
  command
      ->add_option("--tokenizer", flags->tokenizer,
                   "\"byte\", or a directory holding tokenizer.json, vocab.json + merges.txt or "
                   "tokenizer.model")
      ->required();
  command->add_flag("--decode", flags->decode, "Read a JSON array of ids, print their text");
  command->callback([flags] {
    try {
      auto tokenizer = make_tokenizer(flags->tokenizer);
      if (flags->decode) {
        std::cout << tokenizer->decode(parse_ids(read_stdin()));
      } else {
        print_ids(tokenizer->encode(read_stdin()));
      }
      std::cout.flush();
    } catch (const UserError& error) {
      std::cerr << "strata: error: " << error.what() << std::endl;
      throw CLI::RuntimeError(2);
    }
  });
  return command;
}

}  // namespace strata
