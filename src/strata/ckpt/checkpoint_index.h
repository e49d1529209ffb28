// The bookkeeping of a checkpoint, apart from any I/O or communication: boxes (a slice's place
// in its global tensor) and their intersection, the record each rank sends of the file it
// wrote, and index.json, which rank 0 builds from those records and every loader reads.
#pragma once
#include <cstdint>
#include <map>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

namespace strata {

// A rectangular region of a global tensor: start `offsets` and `shape` per dim (0 dims for a
// scalar, whose box holds its one element).
struct Box {
  std::vector<int64_t> offsets;
  std::vector<int64_t> shape;
  int64_t numel() const;
};

// The common region of two boxes of the same tensor; false (and *common untouched) when they
// share no element.
bool intersect_boxes(const Box& a, const Box& b, Box* common);
// "[0:4, 8:16]" (start:end per dim), "[]" for a scalar.
std::string box_to_string(const Box& box);

// Names inside a checkpoint root and step directory (layout in checkpoint.h).
constexpr const char* kCompleteMarker = "COMPLETE";
constexpr const char* kIndexFile = "index.json";
constexpr const char* kStateFile = "state.json";
std::string step_dir_name(int64_t step);  // "step_00001200"
// The step of a "step_<digits>" name; false for any other name.
bool parse_step_dir_name(const std::string& name, int64_t* step);
std::string rank_file_name(int rank);  // "rank_00003.safetensors"

// The key of a slice inside a rank's safetensors file: unique per (tensor, offsets), so one
// file can hold several slices of one tensor. "blocks.0.mlp.w@0,128"; "scale@" for a scalar.
std::string slice_key(const std::string& name, const std::vector<int64_t>& offsets);
// "0xcbf43926", the form index.json and messages use.
std::string crc32_to_hex(uint32_t crc);

// One slice one rank wrote.
struct SliceRecord {
  std::string name;   // global tensor name
  std::string key;    // key in the rank's file
  std::string dtype;  // safetensors dtype name, "F32"
  std::vector<int64_t> global_shape;
  Box box;
};

// What one rank wrote, as it tells rank 0. A rank with nothing to write writes no file: then
// `file` is empty and so is `slices`.
struct FileRecord {
  std::string file;  // name inside the checkpoint directory, "rank_00003.safetensors"
  int64_t size = 0;
  uint32_t crc32 = 0;
  std::vector<SliceRecord> slices;
  std::vector<std::string> replicas;  // tensors this rank holds with write=false
};
nlohmann::json file_record_to_json(const FileRecord& record);
FileRecord file_record_from_json(const nlohmann::json& json);

// index.json, parsed.
struct IndexSlice {
  std::string file;
  std::string key;
  Box box;
};
struct IndexTensor {
  std::string dtype;           // safetensors dtype name
  std::vector<int64_t> shape;  // global shape
  std::vector<IndexSlice> slices;
};
struct IndexFile {
  int64_t size = 0;
  uint32_t crc32 = 0;
};
struct CheckpointIndex {
  int64_t step = 0;
  int64_t world_size = 0;  // ranks of the run that saved
  std::map<std::string, IndexFile> files;
  std::map<std::string, IndexTensor> tensors;
};

// Merges the records of every rank (in rank order). The writers' slices of each tensor must
// agree on dtype and global shape, must not overlap, and must together cover the tensor, and
// every replica must have a writer: any violation is a bug in how the caller marked replicas
// (write=false) and throws InternalError.
CheckpointIndex build_index(int64_t step, const std::vector<FileRecord>& records);

nlohmann::json index_to_json(const CheckpointIndex& index);
// index.json as written: one line per file and per tensor, so that a checkpoint of thousands of
// slices stays readable and greppable.
std::string index_to_text(const CheckpointIndex& index);
// UserError naming `path` if the JSON does not have the index.json schema.
CheckpointIndex index_from_json(const nlohmann::json& json, const std::string& path);

}  // namespace strata
