// Checkpoint files are untrusted input: thousands of corrupted and truncated safetensors
// headers and index.json files must each end in a clean UserError (or a valid read), never a
// crash, an overflow or an allocation the file's size does not justify. Also run under
// AddressSanitizer and UndefinedBehaviorSanitizer (label "sanitize").
#include <gtest/gtest.h>

#include <cstring>
#include <filesystem>
#include <fstream>
#include <random>

#include "mutation.h"
#include "strata/ckpt/checkpoint.h"
#include "strata/ckpt/checkpoint_index.h"
#include "strata/ckpt/file_io.h"
#include "strata/ckpt/safetensors.h"
#include "strata/core/error.h"
#include "test_support.h"

namespace strata {
namespace {

namespace fs = std::filesystem;
using testing::TempDir;

constexpr int kMutations = 2000;

using testing::read_bytes;
using testing::write_bytes;

TEST(UntrustedFiles, CorruptSafetensorsHeadersAreRefusedCleanly) {
  TempDir dir;
  const std::string path = dir.file("good.safetensors");
  write_safetensors(path,
                    {{"a", at::arange(24, at::kFloat).reshape({2, 3, 4})},
                     {"b", at::ones({5}, at::kLong)},
                     {"c", at::zeros({0, 3}, at::kDouble)},
                     {"d", at::tensor(3.5, at::kDouble)}},
                    {{"format", "pt"}});
  const std::string good = read_bytes(path);
  uint64_t header_length = 0;
  std::memcpy(&header_length, good.data(), 8);
  const std::string header = good.substr(8, header_length), data = good.substr(8 + header_length);

  std::mt19937 random(14);
  int refused = 0;
  const std::string victim = dir.file("mutated.safetensors");
  for (int mutation = 0; mutation < kMutations; ++mutation) {
    std::string bytes;
    const int kind = mutation % 4;
    if (kind == 0) {  // the header's JSON corrupted, its length kept consistent
      const std::string text = testing::mutate(header, random);
      const uint64_t length = text.size();
      bytes = std::string(reinterpret_cast<const char*>(&length), 8) + text + data;
    } else if (kind == 1) {  // a hostile header length
      const uint64_t length = std::uniform_int_distribution<uint64_t>()(random) >>
                              std::uniform_int_distribution<int>(0, 63)(random);
      bytes = std::string(reinterpret_cast<const char*>(&length), 8) + good.substr(8);
    } else if (kind == 2) {  // truncated anywhere
      bytes = good.substr(0, std::uniform_int_distribution<size_t>(0, good.size() - 1)(random));
    } else {  // a hostile number in the header, or the data section cut short
      bytes = good.substr(0, 8) + testing::mutate(header, random) + data;
      bytes.resize(bytes.size() - std::uniform_int_distribution<size_t>(0, data.size())(random));
    }
    write_bytes(victim, bytes);
    refused += testing::refused_cleanly(mutation, [&] { read_safetensors(victim); });
  }
  EXPECT_GT(refused, kMutations / 2) << "most mutations must be refused";
}

TEST(UntrustedFiles, CorruptIndexFilesAreRefusedCleanly) {
  TempDir root;
  SingleProcessGroup group;
  const at::Tensor weight = at::arange(48, at::kFloat).reshape({8, 6});
  const std::string dir = save_checkpoint(root.path(), 1,
                                          {{"w", weight.narrow(0, 0, 3).clone(), {8, 6}, {0, 0}},
                                           {"w", weight.narrow(0, 3, 5).clone(), {8, 6}, {3, 0}},
                                           {"bias", at::ones({6}, at::kDouble), {6}, {0}}},
                                          {{"step", 1}}, group);
  const std::string index_path = dir + "/" + kIndexFile;
  const std::string good = read_bytes(index_path);

  std::mt19937 random(1414);
  int refused = 0;
  for (int mutation = 0; mutation < kMutations; ++mutation) {
    write_bytes(index_path, testing::mutate(good, random));
    std::vector<ShardedTensor> tensors = {{"w", at::zeros({4, 6}, at::kFloat), {8, 6}, {2, 0}},
                                          {"bias", at::zeros({6}, at::kDouble), {6}, {0}}};
    refused += testing::refused_cleanly(mutation, [&] { load_checkpoint(dir, tensors); });
  }
  EXPECT_GT(refused, kMutations / 2) << "most mutations must be refused";
}

TEST(UntrustedFiles, IndexNamingAFileOutsideTheCheckpointIsRefused) {
  TempDir root;
  SingleProcessGroup group;
  const std::string dir =
      save_checkpoint(root.path(), 1, {{"w", at::ones({4}), {4}, {0}}}, {}, group);
  std::string index = read_bytes(dir + "/" + kIndexFile);
  for (size_t at = index.find("rank_00000.safetensors"); at != std::string::npos;
       at = index.find("rank_00000.safetensors", at + 1)) {
    index.replace(at, std::strlen("rank_00000.safetensors"), "../../rank_00.safetensors");
  }
  write_bytes(dir + "/" + kIndexFile, index);
  std::vector<ShardedTensor> tensors = {{"w", at::zeros({4}), {4}, {0}}};
  try {
    load_checkpoint(dir, tensors);
    ADD_FAILURE() << "a file outside the checkpoint was accepted";
  } catch (const UserError& error) {
    EXPECT_NE(std::string(error.what()).find("is not a plain file name"), std::string::npos)
        << error.what();
  }
}

}  // namespace
}  // namespace strata
