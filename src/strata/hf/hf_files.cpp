// Memory-mapped safetensors files of a Hugging Face model directory.
#include "strata/hf/hf_files.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "strata/ckpt/file_io.h"
#include "strata/core/error.h"

namespace strata {

HfTensorFiles::HfTensorFiles(const std::string& dir) : dir_(dir) {
  const std::string index_path = dir + "/model.safetensors.index.json";
  if (std::filesystem::exists(index_path)) {
    nlohmann::json index;
    try {
      std::ifstream in(index_path);
      index = nlohmann::json::parse(in);
    } catch (const nlohmann::json::exception& error) {
      throw UserError(str(index_path, " is not JSON (", error.what(), ")"));
    }
    if (!index.is_object() || !index.contains("weight_map") || !index["weight_map"].is_object()) {
      throw UserError(str(index_path, " has no \"weight_map\" object"));
    }
    std::map<std::string, std::string> weight_map;
    for (const auto& [name, file] : index["weight_map"].items()) {
      if (!file.is_string())
        throw UserError(str(index_path, ": the file of ", name, " is not a string"));
      weight_map[name] = file.get<std::string>();
    }
    std::vector<std::string> files;
    for (const auto& [name, file] : weight_map) {
      if (std::find(files.begin(), files.end(), file) == files.end()) files.push_back(file);
    }
    for (const auto& file : files) map_file(file);
    for (const auto& [name, file] : weight_map) {
      auto found = entries_.find(name);
      if (found == entries_.end() || files_[found->second.file]->path != dir + "/" + file) {
        throw UserError(
            str(index_path, " places ", name, " in ", file, ", which does not hold it"));
      }
    }
  } else if (std::filesystem::exists(dir + "/model.safetensors")) {
    map_file("model.safetensors");
  } else {
    throw UserError(str("no model.safetensors or model.safetensors.index.json in ", dir,
                        std::filesystem::exists(dir + "/pytorch_model.bin")
                            ? " (pytorch_model.bin is not read: convert it to safetensors)"
                            : ""));
  }
}

HfTensorFiles::MappedFile::~MappedFile() {
  if (data) munmap(const_cast<char*>(data), size);
}

void HfTensorFiles::map_file(const std::string& file_name) {
  const std::string path = dir_ + "/" + file_name;
  File file = File::open_for_reading(path);
  SafetensorsHeader header = read_safetensors_header(file);
  auto mapped = std::make_shared<MappedFile>();
  mapped->path = path;
  mapped->size = static_cast<size_t>(file.size());
  if (mapped->size > 0) {
    const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
    if (fd < 0) throw UserError(str("cannot open ", path, ": ", std::strerror(errno)));
    void* data = mmap(nullptr, mapped->size, PROT_READ, MAP_PRIVATE, fd, 0);
    const int map_errno = errno;
    ::close(fd);
    if (data == MAP_FAILED)
      throw UserError(str("cannot map ", path, ": ", std::strerror(map_errno)));
    mapped->data = static_cast<const char*>(data);
  }
  files_.push_back(std::move(mapped));
  for (auto& [name, entry] : header.entries) {
    if (entries_.count(name)) {
      throw UserError(
          str("the tensor ", name, " is in two files of ", dir_, " (the second: ", file_name, ")"));
    }
    entries_[name] = Entry{files_.size() - 1, entry};
  }
}

std::vector<std::string> HfTensorFiles::names() const {
  std::vector<std::string> names;
  for (const auto& [name, entry] : entries_) names.push_back(name);
  return names;
}

at::Tensor HfTensorFiles::view(const std::string& name) const {
  auto found = entries_.find(name);
  if (found == entries_.end()) {
    throw UserError(str("the model in ", dir_, " has no tensor ", name));
  }
  const SafetensorsEntry& entry = found->second.entry;
  const std::shared_ptr<const MappedFile>& file = files_[found->second.file];
  const char* bytes = file->data + entry.file_begin;
  const auto options = at::TensorOptions().dtype(entry.dtype);
  // The format does not promise aligned tensors (every writer we know aligns them): an
  // unaligned one is copied once rather than read through misaligned pointers.
  if (reinterpret_cast<uintptr_t>(bytes) % at::elementSize(entry.dtype) != 0) {
    at::Tensor copy = at::empty(entry.shape, options);
    std::memcpy(copy.data_ptr(), bytes, entry.file_end - entry.file_begin);
    return copy;
  }
  return at::from_blob(
      const_cast<char*>(bytes), entry.shape, [file](void*) {}, options);
}

namespace {

// The bytes under a view: from its first element to the end of its last.
std::pair<uintptr_t, uintptr_t> extent_of(const at::Tensor& view) {
  int64_t last = 0;  // the offset of the view's last element, in elements
  for (int64_t d = 0; d < view.dim(); ++d) last += (view.size(d) - 1) * view.stride(d);
  const auto begin = reinterpret_cast<uintptr_t>(view.data_ptr());
  return {begin, begin + static_cast<uintptr_t>(last + 1) * view.element_size()};
}

}  // namespace

bool HfTensorFiles::is_mapped(const at::Tensor& view) const {
  if (view.numel() == 0) return false;
  const auto [begin, end] = extent_of(view);
  for (const auto& file : files_) {
    const auto base = reinterpret_cast<uintptr_t>(file->data);
    if (file->data && begin >= base && end <= base + file->size) return true;
  }
  return false;
}

int64_t read_ahead(const at::Tensor& view) {
  if (view.numel() == 0) return 0;
  const auto [begin, end] = extent_of(view);
  const auto page = static_cast<uintptr_t>(sysconf(_SC_PAGESIZE));
  const uintptr_t first = begin & ~(page - 1);
  madvise(reinterpret_cast<void*>(first), end - first, MADV_WILLNEED);
  return static_cast<int64_t>(end - first);
}

}  // namespace strata
