// A tiny byte-level BPE tokenizer.json for the tests of the loader and of `strata tokenize`:
// the 256 byte tokens (id = byte value) and a few merges spelling "hello", patched per test.
#pragma once
#include <nlohmann/json.hpp>
#include <string>

#include "strata/data/bpe.h"
#include "test_support.h"

namespace strata::testing {

// Ids of the merged tokens in tiny_tokenizer_json().
enum TinyId { kLl = 256, kEl = 257, kHe = 258, kHell = 259, kHello = 260, kXyz = 261 };

// {"model": {"type": "BPE", vocab, merges}, "pre_tokenizer": ByteLevel, "decoder": ByteLevel}.
// "ll" merges before "el" (so "ell" is e + ll); "xyz" is a token no merge makes.
inline nlohmann::json tiny_tokenizer_json() {
  nlohmann::json vocab = nlohmann::json::object();
  for (int byte = 0; byte < 256; ++byte) {
    vocab[bytes_to_byte_level(std::string(1, static_cast<char>(byte)))] = byte;
  }
  vocab["ll"] = kLl;
  vocab["el"] = kEl;
  vocab["he"] = kHe;
  vocab["hell"] = kHell;
  vocab["hello"] = kHello;
  vocab["xyz"] = kXyz;
  nlohmann::json byte_level = {{"type", "ByteLevel"},
                               {"add_prefix_space", false},
                               {"trim_offsets", true},
                               {"use_regex", true}};
  return {{"version", "1.0"},
          {"added_tokens", nlohmann::json::array()},
          {"normalizer", nullptr},
          {"pre_tokenizer", byte_level},
          {"decoder", byte_level},
          {"model",
           {{"type", "BPE"},
            {"dropout", nullptr},
            {"vocab", vocab},
            {"merges", {"l l", "e l", "h e", "he ll", "hell o"}}}}};
}

inline void write_json(const std::string& path, const nlohmann::json& json) {
  write_bytes(path, json.dump());
}

}  // namespace strata::testing
