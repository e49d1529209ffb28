// safetensors: every stored dtype round-trips bit for bit (including scalars and 0-element
// tensors), the bytes on disk follow the specification, and damaged files are refused with
// a message naming them.
#include <gtest/gtest.h>

#include <cstring>
#include <fstream>
#include <nlohmann/json.hpp>

#include "expect_error.h"
#include "strata/ckpt/crc32.h"
#include "strata/ckpt/safetensors.h"
#include "strata/core/error.h"
#include "test_support.h"

namespace strata {
namespace {

using testing::TempDir;

using testing::read_bytes;
using testing::write_bytes;

// Distinct, exactly representable values for every dtype (bool alternates).
at::Tensor sample(at::ScalarType dtype, std::vector<int64_t> shape) {
  at::Tensor values =
      at::arange(at::Scalar(1), at::Scalar(1 + c10::multiply_integers(shape)), at::kDouble)
          .reshape(shape);
  if (dtype == at::kBool) return values.remainder(2).eq(0);
  if (at::isFloatingType(dtype)) values = values * 0.5 - 3;  // fractions and negatives
  return values.to(dtype);
}

const std::vector<at::ScalarType> kDtypes = {at::kDouble, at::kFloat, at::kHalf, at::kBFloat16,
                                             at::kLong,   at::kInt,   at::kByte, at::kBool};

TEST(Safetensors, EveryDtypeAndShapeRoundTrips) {
  TempDir dir;
  std::vector<std::pair<std::string, at::Tensor>> tensors;
  for (at::ScalarType dtype : kDtypes) {
    const std::string name = safetensors_dtype_name(dtype);
    tensors.emplace_back(name + ".matrix", sample(dtype, {3, 5}));
    tensors.emplace_back(name + ".scalar", sample(dtype, {}));
    tensors.emplace_back(name + ".empty", sample(dtype, {0, 4}));
    tensors.emplace_back(name + ".vector", sample(dtype, {7}));
  }
  // A non-contiguous input is written by value.
  tensors.emplace_back("transposed", sample(at::kFloat, {4, 3}).t());
  const std::string path = dir.file("all.safetensors");
  WrittenFileInfo info = write_safetensors(path, tensors, {{"format", "pt"}});

  const std::string bytes = read_bytes(path);
  EXPECT_EQ(info.size, static_cast<int64_t>(bytes.size()));
  EXPECT_EQ(info.crc32, crc32(bytes.data(), bytes.size()));

  auto loaded = read_safetensors(path);
  ASSERT_EQ(loaded.size(), tensors.size());
  for (const auto& [key, expected] : tensors) {
    ASSERT_TRUE(loaded.count(key)) << key;
    const at::Tensor& actual = loaded.at(key);
    EXPECT_EQ(actual.scalar_type(), expected.scalar_type()) << key;
    EXPECT_EQ(actual.sizes(), expected.sizes()) << key;
    EXPECT_TRUE(at::equal(actual, expected)) << key;
  }
}

TEST(Safetensors, BytesFollowTheSpecification) {
  TempDir dir;
  const std::string path = dir.file("spec.safetensors");
  write_safetensors(path,
                    {{"flag", sample(at::kBool, {3})},
                     {"weight", sample(at::kFloat, {2, 2})},
                     {"step", sample(at::kLong, {})}},
                    {{"format", "pt"}});
  const std::string bytes = read_bytes(path);

  uint64_t header_length = 0;
  std::memcpy(&header_length, bytes.data(), 8);  // little-endian host, as the format
  ASSERT_LE(8 + header_length, bytes.size());
  EXPECT_EQ(header_length % 8, 0u) << "header padded to 8 bytes";
  const std::string header_text = bytes.substr(8, header_length);
  EXPECT_EQ(header_text.front(), '{');
  const size_t json_end = header_text.find_last_not_of(' ');
  EXPECT_EQ(header_text[json_end], '}') << "padding is spaces after the JSON";

  auto header = nlohmann::json::parse(header_text);
  EXPECT_EQ(header["__metadata__"], nlohmann::json({{"format", "pt"}}));
  EXPECT_EQ(header["weight"]["dtype"], "F32");
  EXPECT_EQ(header["weight"]["shape"], nlohmann::json({2, 2}));
  EXPECT_EQ(header["step"]["shape"], nlohmann::json::array());
  EXPECT_EQ(header["flag"]["dtype"], "BOOL");
  // Largest elements first, back to back: I64 (8 bytes), F32 (16), BOOL (3).
  EXPECT_EQ(header["step"]["data_offsets"], nlohmann::json({0, 8}));
  EXPECT_EQ(header["weight"]["data_offsets"], nlohmann::json({8, 24}));
  EXPECT_EQ(header["flag"]["data_offsets"], nlohmann::json({24, 27}));
  EXPECT_EQ(bytes.size(), 8 + header_length + 27);

  float weight[4];
  std::memcpy(weight, bytes.data() + 8 + header_length + 8, sizeof weight);
  EXPECT_EQ(weight[0], -2.5f);
  EXPECT_EQ(weight[3], -1.0f);
}

TEST(Safetensors, EmptyFileHoldsOnlyMetadata) {
  TempDir dir;
  const std::string path = dir.file("empty.safetensors");
  write_safetensors(path, {}, {{"note", "nothing"}});
  File file = File::open_for_reading(path);
  SafetensorsHeader header = read_safetensors_header(file);
  EXPECT_TRUE(header.entries.empty());
  EXPECT_EQ(header.metadata.at("note"), "nothing");
}

// Expects read_safetensors(path) to throw a UserError whose message holds path and `phrase`.
void expect_refused(const std::string& path, const std::string& phrase) {
  testing::expect_user_error([&] { read_safetensors(path); }, {path, phrase});
}

TEST(Safetensors, DamagedFilesAreRefusedByName) {
  TempDir dir;
  const std::string good = dir.file("good.safetensors");
  write_safetensors(good, {{"w", sample(at::kFloat, {4, 4})}});
  const std::string bytes = read_bytes(good);

  const std::string truncated = dir.file("truncated.safetensors");
  write_bytes(truncated, bytes.substr(0, bytes.size() - 5));
  expect_refused(truncated, "truncated");

  const std::string extra = dir.file("extra.safetensors");
  write_bytes(extra, bytes + "xx");
  expect_refused(extra, "extra bytes");

  const std::string tiny = dir.file("tiny.safetensors");
  write_bytes(tiny, bytes.substr(0, 5));
  expect_refused(tiny, "fewer than the 8");

  std::string huge_length = bytes;
  huge_length[6] = '\x01';
  const std::string huge = dir.file("huge.safetensors");
  write_bytes(huge, huge_length);
  expect_refused(huge, "header length");

  std::string not_json = bytes;
  not_json[9] = '#';
  const std::string garbled = dir.file("garbled.safetensors");
  write_bytes(garbled, not_json);
  expect_refused(garbled, "not JSON");

  std::string wrong_dtype = bytes;
  wrong_dtype.replace(wrong_dtype.find("F32"), 3, "F99");
  const std::string unknown = dir.file("unknown.safetensors");
  write_bytes(unknown, wrong_dtype);
  expect_refused(unknown, "F99");
}

TEST(Safetensors, UnsupportedDtypeIsAUserError) {
  TempDir dir;
  EXPECT_FALSE(safetensors_supports(at::kComplexFloat));
  EXPECT_THROW(
      write_safetensors(dir.file("c.safetensors"), {{"z", at::zeros({2}, at::kComplexFloat)}}),
      UserError);
}

}  // namespace
}  // namespace strata
