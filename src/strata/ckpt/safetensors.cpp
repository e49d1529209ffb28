// safetensors writer and reader (format in safetensors.h). The writer checksums while it
// writes, so saving a checkpoint reads nothing back.
#include "strata/ckpt/safetensors.h"

#include <algorithm>
#include <nlohmann/json.hpp>

#include "strata/ckpt/crc32.h"
#include "strata/core/error.h"

static_assert(__BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__,
              "safetensors stores little-endian bytes; this code copies host memory as is");

namespace strata {
namespace {

struct DtypeName {
  at::ScalarType dtype;
  const char* name;
};

constexpr DtypeName kDtypes[] = {
    {at::kDouble, "F64"}, {at::kFloat, "F32"}, {at::kHalf, "F16"}, {at::kBFloat16, "BF16"},
    {at::kLong, "I64"},   {at::kInt, "I32"},   {at::kByte, "U8"},  {at::kBool, "BOOL"},
};

// The Rust reference refuses headers above 100 MB; so do we, before allocating for one.
constexpr int64_t kMaxHeaderBytes = 100'000'000;

[[noreturn]] void malformed(const std::string& path, const std::string& why) {
  throw UserError(str("checkpoint file ", path, " is not a valid safetensors file: ", why,
                      "; the file is damaged or was not written by a safetensors writer"));
}

// Feeds every byte written into the CRC, so the caller learns the file's checksum for free.
class ChecksummingWriter {
 public:
  explicit ChecksummingWriter(File& file) : file_(file) {}
  void write(const void* data, size_t size) {
    file_.write_all(data, size);
    crc_ = crc32_update(crc_, data, size);
    written_ += static_cast<int64_t>(size);
  }
  WrittenFileInfo info() const { return {written_, crc_}; }

 private:
  File& file_;
  uint32_t crc_ = 0;
  int64_t written_ = 0;
};

}  // namespace

bool safetensors_supports(at::ScalarType dtype) {
  return std::any_of(std::begin(kDtypes), std::end(kDtypes),
                     [&](const DtypeName& entry) { return entry.dtype == dtype; });
}

std::string safetensors_dtype_name(at::ScalarType dtype) {
  for (const DtypeName& entry : kDtypes) {
    if (entry.dtype == dtype) return entry.name;
  }
  throw UserError(str("dtype ", c10::toString(dtype),
                      " cannot be stored in a checkpoint; convert the tensor to one of "
                      "float64, float32, float16, bfloat16, int64, int32, uint8, bool"));
}

at::ScalarType safetensors_dtype_from_name(const std::string& name, const std::string& path) {
  for (const DtypeName& entry : kDtypes) {
    if (name == entry.name) return entry.dtype;
  }
  throw UserError(str("checkpoint file ", path, " uses dtype \"", name,
                      "\", which strata does not read (it reads F64 F32 F16 BF16 I64 I32 U8 "
                      "BOOL)"));
}

WrittenFileInfo write_safetensors(const std::string& path,
                                  const std::vector<std::pair<std::string, at::Tensor>>& tensors,
                                  const std::map<std::string, std::string>& metadata) {
  // Largest elements first: with the data section starting 8-aligned, each tensor then starts
  // at a multiple of its own element size (the order the Rust reference writes, too).
  std::vector<std::pair<std::string, at::Tensor>> ordered;
  ordered.reserve(tensors.size());
  for (const auto& [key, tensor] : tensors) {
    safetensors_dtype_name(tensor.scalar_type());  // refuses unsupported dtypes up front
    ordered.emplace_back(key, tensor.to(at::kCPU).contiguous());
  }
  std::stable_sort(ordered.begin(), ordered.end(), [](const auto& a, const auto& b) {
    return a.second.element_size() > b.second.element_size();
  });

  nlohmann::json header = nlohmann::json::object();
  int64_t offset = 0;
  for (const auto& [key, tensor] : ordered) {
    STRATA_CHECK(!header.contains(key), "duplicate safetensors key '", key, "' for ", path);
    int64_t bytes = tensor.numel() * static_cast<int64_t>(tensor.element_size());
    header[key] = {{"dtype", safetensors_dtype_name(tensor.scalar_type())},
                   {"shape", tensor.sizes().vec()},
                   {"data_offsets", {offset, offset + bytes}}};
    offset += bytes;
  }
  if (!metadata.empty()) header["__metadata__"] = metadata;
  std::string header_text = header.dump();
  header_text.resize((header_text.size() + 7) / 8 * 8, ' ');

  File file = File::create(path);
  ChecksummingWriter writer(file);
  uint64_t header_length = header_text.size();
  writer.write(&header_length, sizeof header_length);
  writer.write(header_text.data(), header_text.size());
  for (const auto& entry : ordered) {
    const at::Tensor& tensor = entry.second;
    writer.write(tensor.data_ptr(), tensor.numel() * tensor.element_size());
  }
  file.sync();
  file.close();
  return writer.info();
}

SafetensorsHeader read_safetensors_header(File& file) {
  const std::string& path = file.path();
  const int64_t file_size = file.size();
  if (file_size < 8)
    malformed(path, str("it has ", file_size, " bytes, fewer than the 8 of the header length"));
  uint64_t header_length = 0;
  file.read_at(&header_length, sizeof header_length, 0);
  if (header_length > static_cast<uint64_t>(std::min(kMaxHeaderBytes, file_size - 8))) {
    malformed(path, str("header length ", header_length, " exceeds the file (", file_size,
                        " bytes) or the 100 MB limit"));
  }
  std::string header_text(header_length, '\0');
  file.read_at(header_text.data(), header_text.size(), 8);
  if (header_text.empty() || header_text[0] != '{')
    malformed(path, "the header does not start with '{'");

  nlohmann::json header;
  try {
    header = nlohmann::json::parse(header_text);
  } catch (const nlohmann::json::exception& error) {
    malformed(path, str("the header is not JSON (", error.what(), ")"));
  }
  if (!header.is_object()) malformed(path, "the header is not a JSON object");

  const int64_t data_start = 8 + static_cast<int64_t>(header_length);
  const int64_t data_size = file_size - data_start;
  SafetensorsHeader result;
  std::vector<std::pair<int64_t, int64_t>> ranges;  // data_offsets of every entry, to check cover
  for (const auto& [key, value] : header.items()) {
    try {
      if (key == "__metadata__") {
        result.metadata = value.get<std::map<std::string, std::string>>();
        continue;
      }
      SafetensorsEntry entry;
      entry.dtype = safetensors_dtype_from_name(value.at("dtype").get<std::string>(), path);
      entry.shape = value.at("shape").get<std::vector<int64_t>>();
      auto offsets = value.at("data_offsets").get<std::vector<int64_t>>();
      if (offsets.size() != 2)
        malformed(path, str("tensor '", key, "' has data_offsets of length ", offsets.size()));
      if (std::any_of(entry.shape.begin(), entry.shape.end(), [](int64_t s) { return s < 0; })) {
        malformed(path, str("tensor '", key, "' has a negative dimension"));
      }
      // The product is checked against the data section as it grows: a corrupt shape must
      // not overflow it.
      int64_t bytes = static_cast<int64_t>(at::elementSize(entry.dtype));
      for (int64_t size : entry.shape) {
        if (__builtin_mul_overflow(bytes, size, &bytes) || bytes > data_size) {
          malformed(path, str("tensor '", key, "' has shape ", nlohmann::json(entry.shape).dump(),
                              ", larger than the data section of ", data_size, " bytes"));
        }
      }
      if (offsets[0] < 0 || offsets[1] < offsets[0] || offsets[1] > data_size ||
          offsets[1] - offsets[0] != bytes) {
        malformed(path, str("tensor '", key, "' has data_offsets [", offsets[0], ", ", offsets[1],
                            "] but its dtype and shape need ", bytes,
                            " bytes inside a data section of ", data_size));
      }
      entry.file_begin = data_start + offsets[0];
      entry.file_end = data_start + offsets[1];
      ranges.emplace_back(offsets[0], offsets[1]);
      result.entries.emplace(key, std::move(entry));
    } catch (const nlohmann::json::exception& error) {
      malformed(path, str("header entry '", key, "' is not well-formed (", error.what(), ")"));
    }
  }

  // The data section is exactly the entries' bytes, back to back in some order.
  std::sort(ranges.begin(), ranges.end());
  int64_t expected_begin = 0;
  for (const auto& [begin, end] : ranges) {
    if (begin != expected_begin) {
      malformed(path, str("the data section has a hole or overlap at byte ", expected_begin));
    }
    expected_begin = end;
  }
  if (expected_begin != data_size) {
    malformed(path, str("the tensors cover ", expected_begin, " bytes of a data section of ",
                        data_size, " (truncated, or extra bytes at the end)"));
  }
  return result;
}

std::map<std::string, at::Tensor> read_safetensors(const std::string& path) {
  File file = File::open_for_reading(path);
  SafetensorsHeader header = read_safetensors_header(file);
  std::map<std::string, at::Tensor> tensors;
  for (const auto& [key, entry] : header.entries) {
    at::Tensor tensor = at::empty(entry.shape, at::TensorOptions().dtype(entry.dtype));
    file.read_at(tensor.data_ptr(), entry.file_end - entry.file_begin, entry.file_begin);
    tensors.emplace(key, std::move(tensor));
  }
  return tensors;
}

}  // namespace strata
