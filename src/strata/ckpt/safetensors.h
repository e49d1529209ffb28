// The safetensors file format, written and read by our own code (the format is simple enough
// that a dependency would cost more than it saves). Layout, as the specification
// (github.com/huggingface/safetensors) fixes it:
//   8 bytes   N, the header length, unsigned little-endian
//   N bytes   JSON {key: {"dtype": "F32", "shape": [..], "data_offsets": [begin, end]}, ...,
//             "__metadata__": {string: string}}, padded with spaces to a multiple of 8
//   rest      the tensors' bytes, little-endian, row-major; data_offsets are relative to here
// and cover it without holes or overlaps. Python's `safetensors` reads what we write.
#pragma once
#include <ATen/ATen.h>

#include <cstdint>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "strata/ckpt/file_io.h"

namespace strata {

// Dtypes checkpoints store: F64 F32 F16 BF16 I64 I32 U8 BOOL.
bool safetensors_supports(at::ScalarType dtype);
// "F32" for at::kFloat, ...; UserError for a dtype outside the list above.
std::string safetensors_dtype_name(at::ScalarType dtype);
// at::kFloat for "F32", ...; UserError naming the file for an unknown name.
at::ScalarType safetensors_dtype_from_name(const std::string& name, const std::string& path);

struct SafetensorsEntry {
  at::ScalarType dtype = at::kFloat;
  std::vector<int64_t> shape;
  int64_t file_begin = 0;  // byte offset in the file (not in the data section) of the first byte
  int64_t file_end = 0;    // one past the last byte
};

struct SafetensorsHeader {
  std::map<std::string, SafetensorsEntry> entries;  // by key
  std::map<std::string, std::string> metadata;      // "__metadata__"
};

struct WrittenFileInfo {
  int64_t size = 0;    // bytes
  uint32_t crc32 = 0;  // of the whole file
};

// Writes `tensors` (key, tensor; CPU or not, any strides) to a new file at `path`, fsyncs and
// closes it. Keys must be unique. Data is laid out by decreasing element size, so every tensor
// starts at a multiple of its element size (readers may map the file and view it in place).
WrittenFileInfo write_safetensors(const std::string& path,
                                  const std::vector<std::pair<std::string, at::Tensor>>& tensors,
                                  const std::map<std::string, std::string>& metadata = {});

// Parses and validates the header of an open file: UserError naming the file if it is not
// well-formed safetensors (bad length, bad JSON, an entry whose byte count does not match its
// shape, data sections that overlap, leave holes or run past the end of the file).
SafetensorsHeader read_safetensors_header(File& file);

// Every tensor of a safetensors file, by key (for tests and offline tools).
std::map<std::string, at::Tensor> read_safetensors(const std::string& path);

}  // namespace strata
