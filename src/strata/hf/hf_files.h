// The tensors of a Hugging Face model directory, read in place: model.safetensors, or the
// shards model.safetensors.index.json lists, each memory-mapped read-only. A tensor is a view
// of the mapped file (at::from_blob, no copy), so a rank that narrows it to the slice its
// layout needs and copies that slice out touches only those pages: no rank ever holds a
// copy of the whole model.
#pragma once
#include <ATen/ATen.h>

#include <map>
#include <memory>
#include <string>
#include <vector>

#include "strata/ckpt/safetensors.h"

namespace strata {

class HfTensorFiles {
 public:
  // Maps every file of the model in `dir`. UserError naming the file for a directory with
  // neither model.safetensors nor an index (pytorch_model.bin is not read), an index that
  // is not JSON or names a missing file, or a file that is not well-formed safetensors.
  explicit HfTensorFiles(const std::string& dir);
  HfTensorFiles(const HfTensorFiles&) = delete;
  HfTensorFiles& operator=(const HfTensorFiles&) = delete;

  bool contains(const std::string& name) const { return entries_.count(name) > 0; }
  std::vector<std::string> names() const;  // every tensor of every file, sorted
  // The stored tensor: a read-only view of the mapped bytes (never write to it), in the
  // file's dtype and shape; it keeps its file mapped while it lives. UserError naming the
  // directory for a missing tensor.
  at::Tensor view(const std::string& name) const;
  const std::string& dir() const { return dir_; }
  // Whether `view` (view() or a narrowing of it) reads the mapped file, rather than a copy
  // (a tensor stored unaligned).
  bool is_mapped(const at::Tensor& view) const;

 private:
  // Unmapped when the last of this object and the views of it goes.
  struct MappedFile {
    std::string path;
    const char* data = nullptr;
    size_t size = 0;
    ~MappedFile();
  };
  struct Entry {
    size_t file = 0;  // index into files_
    SafetensorsEntry entry;
  };
  void map_file(const std::string& file_name);

  std::string dir_;
  std::vector<std::shared_ptr<const MappedFile>> files_;
  std::map<std::string, Entry> entries_;
};

// Asks the kernel to start reading the file pages under `view` (a view of the mapped file:
// HfTensorFiles::is_mapped) and returns without waiting (madvise MADV_WILLNEED): the bytes
// from its first element's page to its last element, which it returns. Advice the kernel does
// not take changes nothing but the speed: the pages are read when touched.
int64_t read_ahead(const at::Tensor& view);

}  // namespace strata
