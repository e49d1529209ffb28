// Checkpoints in one process (SingleProcessGroup): resharding loads (one process may hold
// several slices of a tensor), dtype conversion, replicas, the index, refusals of damaged or
// incomplete checkpoints, and the directory life cycle (stale saves, re-saves, pruning).
// The same protocol over MPI ranks is tested in mpi_checkpoint.cpp.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>

#include "expect_error.h"
#include "strata/ckpt/async_checkpoint.h"
#include "strata/ckpt/checkpoint.h"
#include "strata/ckpt/checkpoint_index.h"
#include "strata/ckpt/crc32.h"
#include "strata/ckpt/safetensors.h"
#include "strata/core/error.h"
#include "test_support.h"

namespace strata {
namespace {

namespace fs = std::filesystem;
using testing::TempDir;

// Distinct values, exact in every dtype used here (< 256 for bf16 integers would not hold, so
// compare loads against the same values cast the same way).
at::Tensor global_tensor(std::vector<int64_t> shape, at::ScalarType dtype, double start = 0) {
  return (at::arange(c10::multiply_integers(shape), at::kDouble) + start).reshape(shape).to(dtype);
}

// Rows [begin, begin + length) of `global` along `dim`, as one rank would hold them.
ShardedTensor slice_of(const std::string& name, const at::Tensor& global, int64_t dim,
                       int64_t begin, int64_t length, bool write = true) {
  std::vector<int64_t> offsets(global.dim(), 0);
  offsets[dim] = begin;
  return {name, global.narrow(dim, begin, length).clone(), global.sizes().vec(), offsets, write};
}

// An unfilled (NaN or zero) region of `name` to load into.
ShardedTensor region(const std::string& name, std::vector<int64_t> global_shape,
                     std::vector<int64_t> offsets, std::vector<int64_t> shape,
                     at::ScalarType dtype) {
  at::Tensor local =
      at::isFloatingType(dtype) ? at::full(shape, NAN, dtype) : at::zeros(shape, dtype);
  return {name, local, std::move(global_shape), std::move(offsets), true};
}

std::string save(const std::string& root, int64_t step, const std::vector<ShardedTensor>& tensors,
                 const nlohmann::json& state = {{"step", 0}}, int64_t keep = 0) {
  SingleProcessGroup group;
  return save_checkpoint(root, step, tensors, state, group, keep);
}

std::vector<std::string> entries_of(const std::string& dir) {
  std::vector<std::string> names;
  for (const auto& entry : fs::directory_iterator(dir)) names.push_back(entry.path().filename());
  std::sort(names.begin(), names.end());
  return names;
}

nlohmann::json read_json(const std::string& path) {
  std::ifstream in(path);
  return nlohmann::json::parse(in);
}

void expect_equal(const at::Tensor& actual, const at::Tensor& expected, const std::string& what) {
  ASSERT_EQ(actual.sizes(), expected.sizes()) << what;
  EXPECT_EQ(testing::compare_tensors(actual, expected, 0.0), "") << what;
}

TEST(Checkpoint, LoadsIntoAnyOtherSlicing) {
  TempDir root;
  const at::Tensor weight = global_tensor({6, 4}, at::kFloat);
  const at::Tensor cube = global_tensor({4, 6, 5}, at::kDouble, 1000);
  const std::string dir =
      save(root.path(), 10,
           {slice_of("weight", weight, 0, 0, 3), slice_of("weight", weight, 0, 3, 3),
            slice_of("cube", cube, 1, 0, 4), slice_of("cube", cube, 1, 4, 2)});
  EXPECT_EQ(dir, root.file("step_00000010"));

  // Split along the other dim, in three parts that straddle the saved boundary, whole, and an
  // interior box of a 3-d tensor split along its last dim.
  std::vector<ShardedTensor> wanted = {
      region("weight", {6, 4}, {0, 0}, {6, 1}, at::kFloat),
      region("weight", {6, 4}, {0, 1}, {6, 3}, at::kFloat),
      region("weight", {6, 4}, {0, 0}, {2, 4}, at::kFloat),
      region("weight", {6, 4}, {2, 0}, {2, 4}, at::kFloat),
      region("weight", {6, 4}, {4, 0}, {2, 4}, at::kFloat),
      region("weight", {6, 4}, {0, 0}, {6, 4}, at::kFloat),
      region("cube", {4, 6, 5}, {1, 2, 0}, {2, 3, 2}, at::kDouble),
      region("cube", {4, 6, 5}, {0, 0, 2}, {4, 6, 3}, at::kDouble),
  };
  load_checkpoint(dir, wanted);
  for (const ShardedTensor& tensor : wanted) {
    const at::Tensor& global = tensor.name == "weight" ? weight : cube;
    at::Tensor expected = global;
    for (int64_t d = 0; d < global.dim(); ++d) {
      expected = expected.narrow(d, tensor.offsets[d], tensor.local.size(d));
    }
    expect_equal(
        tensor.local, expected,
        tensor.name + " at " + box_to_string({tensor.offsets, tensor.local.sizes().vec()}));
  }
}

TEST(Checkpoint, ScalarsEmptyTensorsAndEveryDtype) {
  TempDir root;
  std::vector<ShardedTensor> saved;
  for (at::ScalarType dtype : {at::kDouble, at::kFloat, at::kHalf, at::kBFloat16, at::kLong,
                               at::kInt, at::kByte, at::kBool}) {
    std::string name = std::string("t_") + c10::toString(dtype);
    saved.push_back({name, global_tensor({5, 3}, dtype), {5, 3}, {0, 0}});
  }
  saved.push_back({"scalar", at::scalar_tensor(2.5, at::kFloat), {}, {}});
  saved.push_back({"empty", at::zeros({0, 3}, at::kFloat), {0, 3}, {0, 0}});
  const std::string dir = save(root.path(), 1, saved);

  std::vector<ShardedTensor> loaded;
  for (const ShardedTensor& tensor : saved) {
    loaded.push_back(region(tensor.name, tensor.global_shape, tensor.offsets,
                            tensor.local.sizes().vec(), tensor.local.scalar_type()));
  }
  load_checkpoint(dir, loaded);
  for (size_t i = 0; i < saved.size(); ++i) {
    EXPECT_TRUE(at::equal(loaded[i].local, saved[i].local)) << saved[i].name;
  }
}

TEST(Checkpoint, ConvertsDtypeOnLoad) {
  TempDir root;
  const at::Tensor weight = at::randn({3, 4}, at::kFloat);
  const std::string dir = save(
      root.path(), 2,
      {{"weight", weight, {3, 4}, {0, 0}}, {"half", weight.to(at::kBFloat16), {3, 4}, {0, 0}}});
  std::vector<ShardedTensor> wanted = {region("weight", {3, 4}, {0, 0}, {3, 4}, at::kDouble),
                                       region("half", {3, 4}, {1, 0}, {2, 4}, at::kFloat)};
  load_checkpoint(dir, wanted);
  expect_equal(wanted[0].local, weight.to(at::kDouble), "F32 into F64");
  expect_equal(wanted[1].local, weight.to(at::kBFloat16).to(at::kFloat).narrow(0, 1, 2),
               "BF16 into F32");
}

TEST(Checkpoint, LargeSlicesAreReadInChunks) {
  // Rows of 24 MB: reading in chunks of about 64 MB takes two rows, then one.
  TempDir root;
  const at::Tensor big = at::randn({3, 6 << 20}, at::kFloat);
  const std::string dir = save(root.path(), 3, {{"big", big, {3, 6 << 20}, {0, 0}}});
  std::vector<ShardedTensor> wanted = {
      region("big", {3, 6 << 20}, {0, 1}, {3, 5}, at::kFloat),
      region("big", {3, 6 << 20}, {0, 0}, {3, 6 << 20}, at::kFloat)};
  load_checkpoint(dir, wanted);
  EXPECT_TRUE(at::equal(wanted[0].local, big.narrow(1, 1, 5)));
  EXPECT_TRUE(at::equal(wanted[1].local, big));
}

TEST(Checkpoint, LoadsFromMoreFilesThanItKeepsOpen) {
  // A checkpoint as 70 ranks would write it, one row each, assembled by hand.
  TempDir root;
  const std::string dir = root.file("step_00000001");
  fs::create_directory(dir);
  const at::Tensor weight = global_tensor({70, 2}, at::kFloat);
  std::vector<FileRecord> records;
  for (int rank = 0; rank < 70; ++rank) {
    FileRecord record;
    record.file = rank_file_name(rank);
    SliceRecord slice{"w", slice_key("w", {rank, 0}), "F32", {70, 2}, Box{{rank, 0}, {1, 2}}};
    WrittenFileInfo written =
        write_safetensors(dir + "/" + record.file, {{slice.key, weight.narrow(0, rank, 1)}});
    record.size = written.size;
    record.crc32 = written.crc32;
    record.slices.push_back(slice);
    records.push_back(record);
  }
  std::ofstream(dir + "/index.json") << index_to_text(build_index(1, records));
  std::ofstream(dir + "/state.json") << "{}";
  std::ofstream(dir + "/COMPLETE") << "";

  std::vector<ShardedTensor> wanted = {region("w", {70, 2}, {0, 0}, {70, 2}, at::kFloat),
                                       region("w", {70, 2}, {0, 1}, {70, 1}, at::kFloat)};
  load_checkpoint(dir, wanted);
  expect_equal(wanted[0].local, weight, "whole");
  expect_equal(wanted[1].local, weight.narrow(1, 1, 1), "column 1");
}

TEST(Checkpoint, IndexRecordsSlicesFilesAndChecksums) {
  TempDir root;
  const at::Tensor weight = global_tensor({4, 2}, at::kFloat);
  const at::Tensor bias = global_tensor({2}, at::kFloat);
  const std::string dir = save(root.path(), 42,
                               {slice_of("weight", weight, 0, 0, 2),
                                slice_of("weight", weight, 0, 2, 2),
                                {"bias", bias, {2}, {0}, true},
                                {"bias", bias, {2}, {0}, /*write=*/false}},
                               {{"step", 42}, {"data", {{"position", 7}}}});
  EXPECT_EQ(entries_of(dir), (std::vector<std::string>{"COMPLETE", "index.json",
                                                       "rank_00000.safetensors", "state.json"}));

  nlohmann::json index = read_json(dir + "/index.json");
  EXPECT_EQ(index["format"], "strata-checkpoint");
  EXPECT_EQ(index["version"], 1);
  EXPECT_EQ(index["step"], 42);
  EXPECT_EQ(index["world_size"], 1);
  EXPECT_EQ(index["tensors"]["weight"]["dtype"], "F32");
  EXPECT_EQ(index["tensors"]["weight"]["shape"], nlohmann::json({4, 2}));
  EXPECT_EQ(index["tensors"]["weight"]["slices"], nlohmann::json::parse(R"([
              {"file": "rank_00000.safetensors", "key": "weight@0,0", "offsets": [0, 0], "shape": [2, 2]},
              {"file": "rank_00000.safetensors", "key": "weight@2,0", "offsets": [2, 0], "shape": [2, 2]}])"));
  EXPECT_EQ(index["tensors"]["bias"]["slices"].size(), 1u)
      << "the write=false replica is not saved";

  std::ifstream in(dir + "/rank_00000.safetensors", std::ios::binary);
  std::string bytes((std::istreambuf_iterator<char>(in)), {});
  const nlohmann::json& file = index["files"]["rank_00000.safetensors"];
  EXPECT_EQ(file["size"], bytes.size());
  EXPECT_EQ(file["crc32"], crc32_to_hex(crc32(bytes.data(), bytes.size())));

  EXPECT_EQ(read_checkpoint_state(dir),
            nlohmann::json({{"step", 42}, {"data", {{"position", 7}}}}));
  std::vector<ShardedTensor> none;
  EXPECT_EQ(load_checkpoint(dir, none)["data"]["position"], 7);
}

TEST(Checkpoint, OverlappingOrMissingWritersAreBugs) {
  TempDir root;
  const at::Tensor weight = global_tensor({4, 2}, at::kFloat);
  EXPECT_THROW(
      save(root.path(), 1, {slice_of("w", weight, 0, 0, 3), slice_of("w", weight, 0, 2, 2)}),
      InternalError);
  EXPECT_THROW(
      save(root.path(), 1, {slice_of("w", weight, 0, 0, 2), slice_of("w", weight, 0, 0, 2)}),
      InternalError);
  EXPECT_THROW(save(root.path(), 1, {slice_of("w", weight, 0, 0, 2)}), InternalError);
  EXPECT_THROW(save(root.path(), 1, {slice_of("w", weight, 0, 0, 4, /*write=*/false)}),
               InternalError);
  EXPECT_EQ(find_latest_checkpoint(root.path()), "") << "failed saves leave nothing loadable";

  std::string message = testing::user_error([&] {
    save(root.path(), 1, {{"z", at::zeros({2}, at::kComplexFloat), {2}, {0}}});
  });
  EXPECT_CONTAINS(message, "'z'");
}

// A saved checkpoint with one two-slice tensor, for the refusal tests.
struct SavedCheckpoint {
  TempDir root;
  std::string dir;
  std::string file;
  SavedCheckpoint() {
    const at::Tensor weight = global_tensor({8, 4}, at::kFloat);
    dir = save(root.path(), 5,
               {slice_of("weight", weight, 0, 0, 4), slice_of("weight", weight, 0, 4, 4)});
    file = dir + "/rank_00000.safetensors";
  }
  std::string load_error() {
    std::vector<ShardedTensor> wanted = {region("weight", {8, 4}, {0, 0}, {8, 4}, at::kFloat)};
    return testing::user_error([&] { load_checkpoint(dir, wanted); });
  }
};

TEST(Checkpoint, FlippedByteIsRefusedNamingTheFile) {
  SavedCheckpoint checkpoint;
  {
    std::fstream file(checkpoint.file, std::ios::in | std::ios::out | std::ios::binary);
    file.seekg(-3, std::ios::end);
    char byte = 0;
    file.read(&byte, 1);
    file.seekp(-3, std::ios::end);
    byte ^= 0x10;
    file.write(&byte, 1);
  }
  std::string message = checkpoint.load_error();
  EXPECT_CONTAINS(message, "checkpoint file " + checkpoint.file + " is corrupt: CRC-32 0x");
  EXPECT_CONTAINS(message, "recorded in index.json; the checkpoint cannot be used");
}

TEST(Checkpoint, TruncatedFileIsRefusedNamingTheFile) {
  SavedCheckpoint checkpoint;
  fs::resize_file(checkpoint.file, fs::file_size(checkpoint.file) - 1);
  std::string message = checkpoint.load_error();
  EXPECT_CONTAINS(message, checkpoint.file + " is corrupt: size");
}

TEST(Checkpoint, MissingMarkerIsRefusedAndSkipped) {
  SavedCheckpoint checkpoint;
  fs::remove(checkpoint.dir + "/COMPLETE");
  std::string message = checkpoint.load_error();
  EXPECT_CONTAINS(message, checkpoint.dir + " has no COMPLETE marker");
  EXPECT_CONTAINS(message, "load an earlier checkpoint");
  message = testing::user_error([&] { read_checkpoint_state(checkpoint.dir); });
  EXPECT_CONTAINS(message, "COMPLETE");
  EXPECT_EQ(find_latest_checkpoint(checkpoint.root.path()), "");
  message =
      testing::user_error([&] { read_checkpoint_state(checkpoint.root.file("step_00000099")); });
  EXPECT_CONTAINS(message, "does not exist");
}

TEST(Checkpoint, MissingTensorWrongShapeAndUncoveredRegionAreRefused) {
  SavedCheckpoint checkpoint;
  std::vector<ShardedTensor> wanted = {region("bias", {4}, {0}, {4}, at::kFloat)};
  std::string message = testing::user_error([&] { load_checkpoint(checkpoint.dir, wanted); });
  EXPECT_CONTAINS(message, "tensor 'bias' is not in checkpoint " + checkpoint.dir);

  wanted = {region("weight", {8, 5}, {0, 0}, {8, 5}, at::kFloat)};
  message = testing::user_error([&] { load_checkpoint(checkpoint.dir, wanted); });
  EXPECT_CONTAINS(message, "tensor 'weight' has global shape [0:8, 0:4]");
  EXPECT_CONTAINS(message, "the model expects [0:8, 0:5]");

  // An index that lost a slice no longer covers rows 4..8.
  nlohmann::json index = read_json(checkpoint.dir + "/index.json");
  index["tensors"]["weight"]["slices"].erase(1);
  std::ofstream(checkpoint.dir + "/index.json") << index.dump();
  message = checkpoint.load_error();
  EXPECT_CONTAINS(message, "tensor 'weight'");
  EXPECT_CONTAINS(message, "hold 16 elements of this rank's region [0:8, 0:4] of 32");
  std::vector<ShardedTensor> first_half = {region("weight", {8, 4}, {0, 0}, {4, 4}, at::kFloat)};
  EXPECT_NO_THROW(load_checkpoint(checkpoint.dir, first_half));

  // Two slices over the same rows, the last rows in none: the counts add up, but the rows
  // left out would keep whatever the tensor held.
  index["tensors"]["weight"]["slices"].push_back(index["tensors"]["weight"]["slices"][0]);
  std::ofstream(checkpoint.dir + "/index.json") << index.dump();
  message = checkpoint.load_error();
  EXPECT_CONTAINS(message, "overlap in [0:4, 0:4]");
}

TEST(Checkpoint, StaleSavesAreIgnoredThenCleaned) {
  TempDir root;
  const at::Tensor weight = global_tensor({2, 2}, at::kFloat);
  const std::string first = save(root.path(), 1, {{"w", weight, {2, 2}, {0, 0}}});
  // A crashed save of step 2: complete-looking inside, but under the .tmp name.
  fs::create_directory(root.file(".tmp.step_00000002"));
  std::ofstream(root.file(".tmp.step_00000002/COMPLETE")) << "step 2\n";
  // And a step directory whose save never finished.
  fs::create_directory(root.file("step_00000003"));
  EXPECT_EQ(find_latest_checkpoint(root.path()), first);

  const std::string second = save(root.path(), 4, {{"w", weight, {2, 2}, {0, 0}}});
  EXPECT_EQ(find_latest_checkpoint(root.path()), second);
  EXPECT_EQ(entries_of(root.path()),
            (std::vector<std::string>{"step_00000001", "step_00000003", "step_00000004"}));
}

TEST(Checkpoint, ResavingAStepReplacesIt) {
  TempDir root;
  save(root.path(), 7, {{"w", global_tensor({2, 2}, at::kFloat), {2, 2}, {0, 0}}}, {{"run", 1}});
  const std::string dir =
      save(root.path(), 7, {{"w", global_tensor({2, 2}, at::kFloat, 100), {2, 2}, {0, 0}}},
           {{"run", 2}});
  std::vector<ShardedTensor> wanted = {region("w", {2, 2}, {0, 0}, {2, 2}, at::kFloat)};
  EXPECT_EQ(load_checkpoint(dir, wanted)["run"], 2);
  expect_equal(wanted[0].local, global_tensor({2, 2}, at::kFloat, 100), "re-saved values");
  EXPECT_EQ(entries_of(root.path()), (std::vector<std::string>{"step_00000007"}));
}

TEST(Checkpoint, CheckpointMovedAsideIsRestoredAfterACrash) {
  // A crash between moving step 7 aside and renaming its replacement in (file systems without
  // an atomic exchange) leaves only .old.step_00000007; the next save puts it back.
  TempDir root;
  const std::string dir =
      save(root.path(), 7, {{"w", global_tensor({2, 2}, at::kFloat), {2, 2}, {0, 0}}});
  fs::rename(dir, root.file(".old.step_00000007"));
  fs::create_directory(root.file(".tmp.step_00000007"));
  save(root.path(), 8, {{"w", global_tensor({2, 2}, at::kFloat), {2, 2}, {0, 0}}});
  EXPECT_EQ(entries_of(root.path()), (std::vector<std::string>{"step_00000007", "step_00000008"}));
  std::vector<ShardedTensor> wanted = {region("w", {2, 2}, {0, 0}, {2, 2}, at::kFloat)};
  load_checkpoint(dir, wanted);
  expect_equal(wanted[0].local, global_tensor({2, 2}, at::kFloat), "restored step 7");
}

TEST(Checkpoint, KeepPrunesAllButTheNewest) {
  TempDir root;
  for (int64_t step = 1; step <= 5; ++step) {
    save(root.path(), step * 10, {{"w", global_tensor({2}, at::kFloat), {2}, {0}}}, {}, /*keep=*/2);
  }
  EXPECT_EQ(entries_of(root.path()), (std::vector<std::string>{"step_00000040", "step_00000050"}));
  EXPECT_EQ(find_latest_checkpoint(root.path()), root.file("step_00000050"));
}

TEST(Checkpoint, FindLatestOrdersByStepNumberAndSkipsOtherNames) {
  TempDir root;
  EXPECT_EQ(find_latest_checkpoint(root.file("missing")), "");
  save(root.path(), 9, {});
  save(root.path(), 123456789, {});
  fs::create_directory(root.file("step_9x"));
  std::ofstream(root.file("step_9x/COMPLETE")) << "";
  EXPECT_EQ(find_latest_checkpoint(root.path()), root.file("step_123456789"));
}

TEST(Checkpoint, ListsEveryStepDirectoryNewestFirst) {
  TempDir root;
  EXPECT_TRUE(list_checkpoints(root.file("missing")).empty());
  save(root.path(), 9, {});
  save(root.path(), 10, {});
  fs::create_directory(root.file("step_00000011"));  // no COMPLETE: listed, but not the latest
  fs::create_directory(root.file(".tmp.step_00000012"));
  EXPECT_EQ(list_checkpoints(root.path()),
            (std::vector<std::string>{root.file("step_00000011"), root.file("step_00000010"),
                                      root.file("step_00000009")}));
  EXPECT_EQ(find_latest_checkpoint(root.path()), root.file("step_00000010"));
}

// The background writer works on copies: the originals change right after save() returns,
// and the checkpoint still holds the values of the moment of the save.
TEST(AsyncCheckpoint, CommitsTheValuesOfTheMomentOfTheSave) {
  TempDir root;
  SingleProcessGroup group;
  AsyncCheckpointer checkpointer(group);
  at::Tensor weight = global_tensor({64, 32}, at::kFloat);
  const at::Tensor saved = weight.clone();
  checkpointer.save(root.path(), 1, {{"w", weight, {64, 32}, {0, 0}}}, {{"step", 1}}, 0);
  EXPECT_TRUE(checkpointer.in_flight());
  weight.add_(1);
  EXPECT_EQ(find_latest_checkpoint(root.path()), "") << "committed before poll() or finish()";
  std::string committed;
  while (committed.empty()) committed = checkpointer.poll();
  EXPECT_EQ(committed, root.file("step_00000001"));
  EXPECT_FALSE(checkpointer.in_flight());

  // A second save while one is in flight waits for it and commits it first.
  checkpointer.save(root.path(), 2, {{"w", weight, {64, 32}, {0, 0}}}, {{"step", 2}}, 0);
  checkpointer.save(root.path(), 3, {{"w", weight, {64, 32}, {0, 0}}}, {{"step", 3}}, 0);
  EXPECT_EQ(find_latest_checkpoint(root.path()), root.file("step_00000002"));
  EXPECT_EQ(checkpointer.finish(), root.file("step_00000003"));
  EXPECT_EQ(checkpointer.finish(), "");

  std::vector<ShardedTensor> loaded = {region("w", {64, 32}, {0, 0}, {64, 32}, at::kFloat)};
  EXPECT_EQ(load_checkpoint(root.file("step_00000001"), loaded)["step"], 1);
  EXPECT_TRUE(at::equal(loaded[0].local, saved));
  load_checkpoint(root.file("step_00000003"), loaded);
  EXPECT_TRUE(at::equal(loaded[0].local, weight));
}

TEST(AsyncCheckpoint, WriteFailureIsReportedAtTheCommit) {
  TempDir root;
  SingleProcessGroup group;
  AsyncCheckpointer checkpointer(group);
  checkpointer.save(root.path(), 1, {{"w", global_tensor({4}, at::kFloat), {4}, {0}}}, {}, 0);
  // The staging directory disappears under the writer, or before it starts.
  fs::remove_all(root.file(".tmp.step_00000001"));
  std::string message = testing::user_error([&] { checkpointer.finish(); });
  EXPECT_CONTAINS(message, "saving checkpoint " + root.file("step_00000001") + " failed on rank 0");
  EXPECT_FALSE(checkpointer.in_flight());
  EXPECT_EQ(find_latest_checkpoint(root.path()), "");
}

TEST(Checkpoint, UnwritableRootIsAUserErrorNamingIt) {
  TempDir root;
  std::ofstream(root.file("file")) << "not a directory";
  std::string message = testing::user_error([&] { save(root.file("file"), 1, {}); });
  EXPECT_CONTAINS(message, "failed on rank 0");
  EXPECT_CONTAINS(message, root.file("file"));
}

}  // namespace
}  // namespace strata
