// Checkpoints across real MPI ranks: tensors saved split along one dim (plus replicas written
// by rank 0 only) load split along another dim and whole on every rank, bit for bit; the
// training state comes back; a save after a crashed one still works; and a failure on one
// rank stops every rank with the same message.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <memory>

#include "expect_error.h"
#include "strata/ckpt/checkpoint.h"
#include "strata/core/error.h"
#include "strata/dist/comm.h"
#include "test_support.h"

namespace strata {
namespace {

namespace fs = std::filesystem;

// A directory every rank sees: rank 0 creates it and removes it once every rank is done.
class SharedTempDir {
 public:
  explicit SharedTempDir(Comm& world) : world_(world) {
    if (world.rank() == 0) owned_ = std::make_unique<testing::TempDir>("strata-ckpt");
    CommCheckpointGroup group(world);
    path_ = group.all_gather_bytes(owned_ ? owned_->path() : "")[0];
  }
  ~SharedTempDir() { world_.barrier(); }
  const std::string& path() const { return path_; }

 private:
  Comm& world_;
  std::unique_ptr<testing::TempDir> owned_;
  std::string path_;
};

// [begin, begin + length) of part `index` when `size` items are dealt to `parts` as evenly as
// possible (the first size % parts parts get one more).
std::pair<int64_t, int64_t> part_of(int64_t size, int64_t parts, int64_t index) {
  const int64_t base = size / parts, extra = size % parts;
  return {index * base + std::min(index, extra), base + (index < extra ? 1 : 0)};
}

at::Tensor global_tensor(std::vector<int64_t> shape, at::ScalarType dtype, double start) {
  return (at::arange(c10::multiply_integers(shape), at::kDouble) + start).reshape(shape).to(dtype);
}

// This rank's part of `global` split along `dim` over the world.
ShardedTensor split_part(const std::string& name, const at::Tensor& global, int64_t dim,
                         const Comm& world) {
  auto [begin, length] = part_of(global.size(dim), world.size(), world.rank());
  std::vector<int64_t> offsets(global.dim(), 0);
  offsets[dim] = begin;
  return {name, global.narrow(dim, begin, length).clone(), global.sizes().vec(), offsets};
}

// An empty region of the same part, to load into.
ShardedTensor empty_part(const std::string& name, const at::Tensor& global, int64_t dim,
                         const Comm& world) {
  ShardedTensor part = split_part(name, global, dim, world);
  part.local = at::full_like(part.local, 77);
  return part;
}

ShardedTensor whole(const std::string& name, const at::Tensor& global, bool write = true) {
  return {name, global.clone(), global.sizes().vec(), std::vector<int64_t>(global.dim(), 0), write};
}

at::Tensor expected_region(const at::Tensor& global, const ShardedTensor& region) {
  at::Tensor expected = global;
  for (int64_t d = 0; d < global.dim(); ++d) {
    expected = expected.narrow(d, region.offsets[d], region.local.size(d));
  }
  return expected;
}

struct Model {
  at::Tensor weight = global_tensor({0, 5}, at::kFloat, 0);  // (2*world + 1, 5), set below
  at::Tensor cube;                                           // (3, 2*world, 4) float64
  at::Tensor embedding;                                      // (world + 2, 3) bfloat16
  at::Tensor bias = global_tensor({7}, at::kFloat, 500);
  at::Tensor count = at::scalar_tensor(12345, at::kLong);

  explicit Model(int64_t world_size) {
    weight = global_tensor({2 * world_size + 1, 5}, at::kFloat, 0);
    cube = global_tensor({3, 2 * world_size, 4}, at::kDouble, 1000);
    embedding = global_tensor({world_size + 2, 3}, at::kBFloat16, -20);
  }
  const at::Tensor& operator[](const std::string& name) const {
    if (name == "weight") return weight;
    if (name == "cube") return cube;
    if (name == "embedding") return embedding;
    if (name == "bias") return bias;
    return count;
  }
  // Split along dim 0 (dim 1 for cube); replicas written by rank 0 only.
  std::vector<ShardedTensor> saved_layout(const Comm& world) const {
    const bool rank0 = world.rank() == 0;
    return {split_part("weight", weight, 0, world), split_part("cube", cube, 1, world),
            split_part("embedding", embedding, 0, world), whole("bias", bias, rank0),
            whole("count", count, rank0)};
  }
};

void expect_loaded(const Model& model, const std::vector<ShardedTensor>& loaded, int rank) {
  for (const ShardedTensor& tensor : loaded) {
    at::Tensor expected = expected_region(model[tensor.name], tensor);
    EXPECT_TRUE(at::equal(tensor.local, expected))
        << "rank " << rank << " tensor " << tensor.name << ": "
        << testing::compare_tensors(tensor.local, expected, 0.0);
  }
}

TEST(CheckpointMpi, SavedSplitOneWayLoadsSplitAnotherWayAndWhole) {
  Comm world = Comm::world();
  SharedTempDir root(world);
  const Model model(world.size());
  const nlohmann::json state = {{"step", 30}, {"data", {{"position", 123}}}, {"layout", "dp"}};
  const std::string dir =
      save_checkpoint(root.path(), 30, model.saved_layout(world), state, world, 0);
  EXPECT_EQ(dir, checkpoint_dir(root.path(), 30));
  EXPECT_EQ(find_latest_checkpoint(root.path()), dir);

  std::vector<ShardedTensor> resplit = {
      empty_part("weight", model.weight, 1, world), empty_part("cube", model.cube, 2, world),
      empty_part("embedding", model.embedding, 1, world), whole("bias", at::zeros({7})),
      whole("count", at::zeros({}, at::kLong))};
  EXPECT_EQ(load_checkpoint(dir, resplit), state);
  expect_loaded(model, resplit, world.rank());

  std::vector<ShardedTensor> whole_tensors;
  for (const char* name : {"weight", "cube", "embedding", "bias", "count"}) {
    whole_tensors.push_back(whole(name, at::full_like(model[name], 9)));
  }
  load_checkpoint(dir, whole_tensors);
  expect_loaded(model, whole_tensors, world.rank());
  EXPECT_EQ(read_checkpoint_state(dir), state);

  // One file per rank, each listed with its size and CRC-32.
  std::ifstream in(dir + "/index.json");
  nlohmann::json index = nlohmann::json::parse(in);
  EXPECT_EQ(index["files"].size(), static_cast<size_t>(world.size()));
  EXPECT_EQ(index["world_size"], world.size());
  EXPECT_EQ(index["tensors"]["weight"]["slices"].size(), static_cast<size_t>(world.size()));
  EXPECT_EQ(index["tensors"]["bias"]["slices"].size(), 1u);
}

TEST(CheckpointMpi, SaveAfterACrashedSaveWorks) {
  Comm world = Comm::world();
  SharedTempDir root(world);
  const Model model(world.size());
  const std::string first =
      save_checkpoint(root.path(), 1, model.saved_layout(world), {{"step", 1}}, world, 1);

  // A save of step 2 that died after some ranks wrote: a .tmp directory with a half file.
  if (world.rank() == 0) {
    fs::create_directory(root.path() + "/.tmp.step_00000002");
    std::ofstream(root.path() + "/.tmp.step_00000002/rank_00000.safetensors") << "half";
  }
  world.barrier();
  EXPECT_EQ(find_latest_checkpoint(root.path()), first);

  const std::string second =
      save_checkpoint(root.path(), 2, model.saved_layout(world), {{"step", 2}}, world, 1);
  EXPECT_EQ(find_latest_checkpoint(root.path()), second);
  std::vector<ShardedTensor> loaded = {empty_part("weight", model.weight, 1, world)};
  EXPECT_EQ(load_checkpoint(second, loaded)["step"], 2);
  expect_loaded(model, loaded, world.rank());
  world.barrier();
  if (world.rank() == 0) {
    std::vector<std::string> names;
    for (const auto& entry : fs::directory_iterator(root.path())) {
      names.push_back(entry.path().filename());
    }
    EXPECT_EQ(names, std::vector<std::string>{"step_00000002"}) << "keep = 1 pruned step 1";
  }
}

TEST(CheckpointMpi, FailureOnOneRankStopsEveryRank) {
  Comm world = Comm::world();
  SharedTempDir root(world);
  const int last = world.size() - 1;
  std::vector<ShardedTensor> tensors = {
      {"z",
       at::zeros({1}, world.rank() == last ? at::kComplexFloat : at::kFloat),
       {world.size()},
       {world.rank()}}};
  EXPECT_CONTAINS(testing::user_error([&] { save_checkpoint(root.path(), 3, tensors, {}, world); }),
                  str("failed on rank ", last, ": tensor 'z'"));
  EXPECT_EQ(find_latest_checkpoint(root.path()), "");
}

}  // namespace
}  // namespace strata
