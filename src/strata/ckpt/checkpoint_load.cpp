// Loading a checkpoint into any layout: each requested local region is filled from every saved
// slice it overlaps, reading only those bytes (positioned reads), after the file holding them
// has been checked against the size and CRC-32 that index.json records. Also finding the
// newest complete checkpoint and reading its training state.
#include <algorithm>
#include <filesystem>
#include <functional>
#include <map>

#include "strata/ckpt/checkpoint.h"
#include "strata/ckpt/checkpoint_index.h"
#include "strata/ckpt/crc32.h"
#include "strata/ckpt/file_io.h"
#include "strata/ckpt/safetensors.h"
#include "strata/core/error.h"

namespace strata {
namespace {

namespace fs = std::filesystem;

// Reads of a slice are split into chunks of whole dim-0 rows of about this many bytes, so
// loading a large tensor needs little memory beyond the tensor itself.
constexpr int64_t kReadChunkBytes = 64 << 20;

std::string shape_to_string(const std::vector<int64_t>& shape) {
  return box_to_string(Box{std::vector<int64_t>(shape.size(), 0), shape});
}

void require_complete(const fs::path& dir) {
  std::error_code error;
  STRATA_REQUIRE(fs::is_directory(dir, error), "checkpoint directory ", dir.string(),
                 " does not exist; pass a step_* directory (find_latest_checkpoint(root) "
                 "gives the newest)");
  STRATA_REQUIRE(fs::is_regular_file(dir / kCompleteMarker, error), "checkpoint directory ",
                 dir.string(), " has no ", kCompleteMarker,
                 " marker: the save that wrote it did not finish, so its files cannot be "
                 "trusted; load an earlier checkpoint (find_latest_checkpoint skips incomplete "
                 "ones)");
}

nlohmann::json read_json_file(const fs::path& path) {
  std::string text = read_text_file(path.string());
  try {
    return nlohmann::json::parse(text);
  } catch (const nlohmann::json::exception& error) {
    throw UserError(str("checkpoint file ", path.string(), " is not valid JSON (", error.what(),
                        "); the checkpoint cannot be used"));
  }
}

// The files of one checkpoint, each verified once, on first use. Verified headers are kept;
// open descriptors are capped, so that one process can load whole a checkpoint that thousands
// of ranks wrote without running out of them.
class CheckpointFiles {
 public:
  struct Opened {
    File& file;
    const SafetensorsHeader& header;
  };

  CheckpointFiles(const fs::path& dir, const CheckpointIndex& index) : dir_(dir), index_(index) {}

  Opened open(const std::string& name) {
    auto handle = handles_.find(name);
    if (handle == handles_.end()) {
      if (handles_.size() >= kMaxOpenFiles) handles_.clear();
      handle = handles_.emplace(name, File::open_for_reading((dir_ / name).string())).first;
    }
    auto header = headers_.find(name);
    if (header == headers_.end()) {
      verify(handle->second, index_.files.at(name));
      header = headers_.emplace(name, read_safetensors_header(handle->second)).first;
    }
    return {handle->second, header->second};
  }

 private:
  static constexpr size_t kMaxOpenFiles = 64;

  static void verify(File& file, const IndexFile& expected) {
    const int64_t size = file.size();
    STRATA_REQUIRE(size == expected.size, "checkpoint file ", file.path(), " is corrupt: size ",
                   size, " bytes != ", expected.size,
                   " recorded in index.json (truncated or overwritten); the checkpoint cannot "
                   "be used");
    std::vector<char> buffer(std::min<int64_t>(size, 4 << 20));
    uint32_t crc = 0;
    for (int64_t offset = 0; offset < size;) {
      size_t count = static_cast<size_t>(std::min<int64_t>(buffer.size(), size - offset));
      file.read_at(buffer.data(), count, offset);
      crc = crc32_update(crc, buffer.data(), count);
      offset += static_cast<int64_t>(count);
    }
    STRATA_REQUIRE(crc == expected.crc32, "checkpoint file ", file.path(), " is corrupt: CRC-32 ",
                   crc32_to_hex(crc), " != ", crc32_to_hex(expected.crc32),
                   " recorded in index.json; the checkpoint cannot be used");
  }

  fs::path dir_;
  const CheckpointIndex& index_;
  std::map<std::string, SafetensorsHeader> headers_;  // of the files verified so far
  std::map<std::string, File> handles_;               // open files, at most kMaxOpenFiles
};

// Copies region `common` (global coordinates) from a saved slice into `local`. The saved slice
// is row-major: chunks of whole dim-0 rows of `common` are read as one contiguous byte range
// each, from their first element to their last (exact when `common` spans every later dim,
// as for slices split along dim 0; otherwise the range includes bytes between the rows, which
// costs less than a read per row), then viewed with the slice's strides and copied (and cast)
// into place.
void copy_region(File& file, const SafetensorsEntry& entry, const Box& slice, const Box& common,
                 at::Tensor& local, const std::vector<int64_t>& local_offsets) {
  const int64_t element_size = at::elementSize(entry.dtype);
  const auto options = at::TensorOptions().dtype(entry.dtype);
  const size_t dims = common.shape.size();
  if (dims == 0) {
    at::Tensor value = at::empty({}, options);
    file.read_at(value.data_ptr(), element_size, entry.file_begin);
    local.copy_(value);
    return;
  }
  std::vector<int64_t> strides(dims, 1);
  for (size_t d = dims - 1; d > 0; --d) strides[d - 1] = strides[d] * slice.shape[d];

  const int64_t row_bytes = strides[0] * element_size;
  const int64_t rows_per_chunk =
      std::max<int64_t>(1, kReadChunkBytes / std::max<int64_t>(row_bytes, 1));
  for (int64_t row = 0; row < common.shape[0]; row += rows_per_chunk) {
    std::vector<int64_t> chunk_shape = common.shape;
    chunk_shape[0] = std::min(rows_per_chunk, common.shape[0] - row);
    int64_t first = 0;  // flat index in the slice of the chunk's first element
    int64_t span = 1;   // elements from the chunk's first to its last, inclusive
    for (size_t d = 0; d < dims; ++d) {
      first += (common.offsets[d] - slice.offsets[d] + (d == 0 ? row : 0)) * strides[d];
      span += (chunk_shape[d] - 1) * strides[d];
    }
    at::Tensor buffer = at::empty({span}, options);
    file.read_at(buffer.data_ptr(), span * element_size, entry.file_begin + first * element_size);

    at::Tensor destination = local;
    for (size_t d = 0; d < dims; ++d) {
      destination = destination.narrow(d, common.offsets[d] - local_offsets[d] + (d == 0 ? row : 0),
                                       chunk_shape[d]);
    }
    destination.copy_(buffer.as_strided(chunk_shape, strides));
  }
}

void load_tensor(const fs::path& dir, const CheckpointIndex& index, CheckpointFiles& files,
                 ShardedTensor& tensor) {
  auto found = index.tensors.find(tensor.name);
  STRATA_REQUIRE(found != index.tensors.end(), "tensor '", tensor.name, "' is not in checkpoint ",
                 dir.string(), " (it holds ", index.tensors.size(),
                 " tensors); load a checkpoint saved by a model with this parameter");
  const IndexTensor& saved = found->second;
  STRATA_REQUIRE(saved.shape == tensor.global_shape, "tensor '", tensor.name, "' has global shape ",
                 shape_to_string(saved.shape), " in checkpoint ", dir.string(),
                 " but the model expects ", shape_to_string(tensor.global_shape),
                 "; load it with the model configuration it was saved with");

  STRATA_CHECK(tensor.local.defined() &&
                   static_cast<size_t>(tensor.local.dim()) == tensor.global_shape.size() &&
                   tensor.offsets.size() == tensor.global_shape.size(),
               "tensor '", tensor.name,
               "': local tensor, offsets and global shape disagree in "
               "rank");
  const Box local_box{tensor.offsets, tensor.local.sizes().vec()};
  for (size_t d = 0; d < tensor.global_shape.size(); ++d) {
    STRATA_CHECK(local_box.offsets[d] >= 0 &&
                     local_box.offsets[d] + local_box.shape[d] <= tensor.global_shape[d],
                 "tensor '", tensor.name, "': local region ", box_to_string(local_box),
                 " lies outside the global shape ", shape_to_string(tensor.global_shape));
  }

  // The slices that meet this rank's region must cover it exactly, checked before anything
  // is read: the tensor is written only where they lie (a loaded model's parameters are not
  // zeroed first, ParameterInit::loaded). Quadratic in the slices that meet one region, which
  // number at most the ranks that saved it.
  std::vector<std::pair<const IndexSlice*, Box>> parts;
  int64_t covered = 0;
  for (const IndexSlice& slice : saved.slices) {
    Box common;
    if (!intersect_boxes(slice.box, local_box, &common)) continue;
    for (const auto& [other, other_common] : parts) {
      Box shared;
      STRATA_REQUIRE(!intersect_boxes(common, other_common, &shared), "tensor '", tensor.name,
                     "': the slices ", box_to_string(other->box), " in ", other->file, " and ",
                     box_to_string(slice.box), " in ", slice.file, " of ", dir.string(),
                     " overlap in ", box_to_string(shared),
                     "; index.json is damaged, so the checkpoint cannot be used");
    }
    covered += common.numel();
    parts.emplace_back(&slice, common);
  }
  STRATA_REQUIRE(covered == local_box.numel(), "tensor '", tensor.name, "': the slices in ",
                 dir.string(), " hold ", covered, " elements of this rank's region ",
                 box_to_string(local_box), " of ", local_box.numel(),
                 "; index.json does not describe the whole tensor, so the checkpoint cannot be "
                 "used");
  for (const auto& [slice, common] : parts) {
    CheckpointFiles::Opened file = files.open(slice->file);
    auto entry = file.header.entries.find(slice->key);
    STRATA_REQUIRE(entry != file.header.entries.end() &&
                       safetensors_dtype_name(entry->second.dtype) == saved.dtype &&
                       entry->second.shape == slice->box.shape,
                   "checkpoint file ", file.file.path(), " does not hold slice '", slice->key,
                   "' as index.json records it (", saved.dtype, " ",
                   shape_to_string(slice->box.shape), "); the checkpoint cannot be used");
    copy_region(file.file, entry->second, slice->box, common, tensor.local, tensor.offsets);
  }
}

}  // namespace

std::vector<std::string> list_checkpoints(const std::string& root) {
  std::error_code error;
  std::vector<std::pair<int64_t, std::string>> found;
  for (fs::directory_iterator it(root, error), end; !error && it != end; it.increment(error)) {
    int64_t step;
    if (parse_step_dir_name(it->path().filename().string(), &step)) {
      found.emplace_back(step, it->path().string());
    }
  }
  std::sort(found.begin(), found.end(), std::greater<>());
  std::vector<std::string> dirs;
  for (auto& [step, dir] : found) dirs.push_back(std::move(dir));
  return dirs;
}

std::string find_latest_checkpoint(const std::string& root) {
  for (const std::string& dir : list_checkpoints(root)) {
    std::error_code ignored;
    if (fs::is_regular_file(fs::path(dir) / kCompleteMarker, ignored)) return dir;
  }
  return "";
}

nlohmann::json read_checkpoint_state(const std::string& dir) {
  require_complete(dir);
  return read_json_file(fs::path(dir) / kStateFile);
}

nlohmann::json load_checkpoint(const std::string& dir, std::vector<ShardedTensor>& tensors) {
  const fs::path dir_path(dir);
  require_complete(dir_path);
  const fs::path index_path = dir_path / kIndexFile;
  const CheckpointIndex index = index_from_json(read_json_file(index_path), index_path.string());
  CheckpointFiles files(dir_path, index);
  for (ShardedTensor& tensor : tensors) load_tensor(dir_path, index, files, tensor);
  return read_json_file(dir_path / kStateFile);
}

}  // namespace strata
