// The bookkeeping under checkpoints, without files: box intersection, names, merging the
// records of several ranks into index.json (and the bugs that merge refuses), and parsing an
// index back (and the damage that parse refuses).
#include <gtest/gtest.h>

#include "expect_error.h"
#include "strata/ckpt/checkpoint_index.h"
#include "strata/core/error.h"

namespace strata {
namespace {

TEST(CheckpointBox, IntersectionOfOverlappingDisjointAndTouchingBoxes) {
  Box common;
  ASSERT_TRUE(intersect_boxes({{0, 2}, {4, 4}}, {{2, 0}, {4, 3}}, &common));
  EXPECT_EQ(common.offsets, (std::vector<int64_t>{2, 2}));
  EXPECT_EQ(common.shape, (std::vector<int64_t>{2, 1}));
  EXPECT_EQ(box_to_string(common), "[2:4, 2:3]");
  EXPECT_FALSE(intersect_boxes({{0}, {4}}, {{4}, {4}}, &common)) << "touching is not overlapping";
  EXPECT_FALSE(intersect_boxes({{0, 0}, {4, 0}}, {{0, 0}, {4, 4}}, &common)) << "empty box";
  ASSERT_TRUE(intersect_boxes({{}, {}}, {{}, {}}, &common)) << "scalars hold one element";
  EXPECT_EQ(common.numel(), 1);
  EXPECT_EQ(box_to_string(common), "[]");
}

TEST(CheckpointNames, StepDirectoriesRankFilesAndKeys) {
  EXPECT_EQ(step_dir_name(1200), "step_00001200");
  EXPECT_EQ(step_dir_name(1234567890), "step_1234567890");
  int64_t step = -1;
  EXPECT_TRUE(parse_step_dir_name("step_00001200", &step));
  EXPECT_EQ(step, 1200);
  for (const char* other : {"step_", "step_12a", ".tmp.step_00000001", "step_-1", "xstep_1",
                            "step_1234567890123456789"}) {
    EXPECT_FALSE(parse_step_dir_name(other, &step)) << other;
  }
  EXPECT_EQ(rank_file_name(3), "rank_00003.safetensors");
  EXPECT_EQ(slice_key("blocks.0.w", {0, 128}), "blocks.0.w@0,128");
  EXPECT_EQ(slice_key("scale", {}), "scale@");
  EXPECT_EQ(crc32_to_hex(0xCBF43926u), "0xcbf43926");
}

SliceRecord slice(const std::string& name, std::vector<int64_t> global_shape,
                  std::vector<int64_t> offsets, std::vector<int64_t> shape,
                  const std::string& dtype = "F32") {
  return {name, slice_key(name, offsets), dtype, std::move(global_shape),
          Box{std::move(offsets), std::move(shape)}};
}

// Three ranks: w (6, 4) split along dim 0, b (4) written by rank 0 and held by the others.
std::vector<FileRecord> three_ranks() {
  std::vector<FileRecord> records(3);
  for (int rank = 0; rank < 3; ++rank) {
    records[rank].file = rank_file_name(rank);
    records[rank].size = 100 + rank;
    records[rank].crc32 = 0xABC00000u + rank;
    records[rank].slices.push_back(slice("w", {6, 4}, {2 * rank, 0}, {2, 4}));
    if (rank == 0) records[rank].slices.push_back(slice("b", {4}, {0}, {4}));
    if (rank != 0) records[rank].replicas.push_back("b");
  }
  return records;
}

TEST(CheckpointIndex, MergesRecordsOfEveryRankAndRoundTripsThroughJson) {
  std::vector<FileRecord> records = three_ranks();
  for (FileRecord& record : records) record = file_record_from_json(file_record_to_json(record));
  CheckpointIndex index = build_index(7, records);
  EXPECT_EQ(index.step, 7);
  EXPECT_EQ(index.world_size, 3);
  ASSERT_EQ(index.files.size(), 3u);
  EXPECT_EQ(index.files.at("rank_00002.safetensors").crc32, 0xABC00002u);
  ASSERT_EQ(index.tensors.at("w").slices.size(), 3u);
  EXPECT_EQ(index.tensors.at("w").slices[1].file, "rank_00001.safetensors");
  EXPECT_EQ(index.tensors.at("w").slices[1].key, "w@2,0");
  EXPECT_EQ(index.tensors.at("b").slices.size(), 1u);

  nlohmann::json json = index_to_json(index);
  EXPECT_EQ(json["files"]["rank_00001.safetensors"],
            nlohmann::json({{"size", 101}, {"crc32", "0xabc00001"}}));
  CheckpointIndex parsed = index_from_json(json, "index.json");
  EXPECT_EQ(index_to_json(parsed), json);

  const std::string text = index_to_text(index);
  EXPECT_EQ(nlohmann::json::parse(text), json);
  EXPECT_NE(
      text.find("\n    \"rank_00001.safetensors\": {\"crc32\":\"0xabc00001\",\"size\":101},\n"),
      std::string::npos)
      << text;
}

TEST(CheckpointIndex, RanksWithOnlyReplicasWriteNoFile) {
  std::vector<FileRecord> records = three_ranks();
  records[2].slices.clear();
  records[2].file.clear();
  records[1].slices[0].box = {{2, 0}, {4, 4}};  // rank 1 writes rows 2..6 instead
  CheckpointIndex index = build_index(1, records);
  EXPECT_EQ(index.files.size(), 2u);
}

TEST(CheckpointIndex, OverlapGapDisagreementAndUnwrittenReplicasAreBugs) {
  auto expect_bug = [](std::vector<FileRecord> records, const std::string& phrase) {
    EXPECT_CONTAINS(testing::message_of<InternalError>([&] { build_index(1, records); }), phrase);
  };
  auto records = three_ranks();
  records[1].slices[0].box = {{1, 0}, {2, 4}};
  expect_bug(records, "overlap in [1:2, 0:4]");

  records = three_ranks();
  records[2].slices[0].box = {{4, 0}, {1, 4}};
  expect_bug(records, "hold 20 of 24 elements");

  records = three_ranks();
  records[1].slices[0].dtype = "BF16";
  expect_bug(records, "ranks disagree on tensor 'w'");

  records = three_ranks();
  records[0].slices.pop_back();  // b's writer forgot it
  expect_bug(records, "tensor 'b' is held by rank 1 with write=false, but no rank wrote it");
}

TEST(CheckpointIndex, DamagedIndexIsAUserErrorNamingIt) {
  const nlohmann::json good = index_to_json(build_index(1, three_ranks()));
  auto expect_refused = [](const nlohmann::json& json, const std::string& phrase) {
    testing::expect_user_error([&] { index_from_json(json, "/ckpt/step_00000001/index.json"); },
                               {"/ckpt/step_00000001/index.json", phrase});
  };
  nlohmann::json bad = good;
  bad["files"]["rank_00000.safetensors"]["crc32"] = "cbf43926";
  expect_refused(bad, "not of the form 0x1234abcd");
  bad = good;
  bad["tensors"]["w"]["slices"][0]["shape"] = {9, 4};
  expect_refused(bad, "outside it");
  bad = good;
  bad["tensors"]["w"]["slices"][0]["file"] = "rank_00009.safetensors";
  expect_refused(bad, "not listed");
  bad = good;
  bad["tensors"]["w"]["slices"][0]["offsets"] = {0};
  expect_refused(bad, "2 dims but a slice with 1 offsets");
  bad = good;
  bad.erase("tensors");
  expect_refused(bad, "tensors");
  bad = good;
  bad["version"] = 2;
  expect_refused(bad, "version 2");
}

}  // namespace
}  // namespace strata
