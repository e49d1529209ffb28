// Boxes, per-rank file records and index.json: building (with the checks that make a save
// trustworthy) and parsing (with the checks that make a load safe).
#include "strata/ckpt/checkpoint_index.h"

#include <algorithm>
#include <cstdio>

#include "strata/core/error.h"

namespace strata {
namespace {

constexpr const char* kFormat = "strata-checkpoint";
constexpr int kVersion = 1;

std::string shape_to_string(const std::vector<int64_t>& shape) {
  std::string text = "[";
  for (size_t d = 0; d < shape.size(); ++d) text += (d ? ", " : "") + std::to_string(shape[d]);
  return text + "]";
}

int64_t numel_of(const std::vector<int64_t>& shape) {
  int64_t numel = 1;
  for (int64_t size : shape) numel *= size;
  return numel;
}

nlohmann::json box_fields(const Box& box) {
  return {{"offsets", box.offsets}, {"shape", box.shape}};
}

Box box_from_json(const nlohmann::json& json) {
  return {json.at("offsets").get<std::vector<int64_t>>(),
          json.at("shape").get<std::vector<int64_t>>()};
}

// Parses "0x1234abcd"; false for anything else.
bool crc32_from_hex(const std::string& text, uint32_t* crc) {
  if (text.size() != 10 || text.compare(0, 2, "0x") != 0 ||
      text.find_first_not_of("0123456789abcdefABCDEF", 2) != std::string::npos) {
    return false;
  }
  *crc = static_cast<uint32_t>(std::stoul(text.substr(2), nullptr, 16));
  return true;
}

}  // namespace

std::string step_dir_name(int64_t step) {
  char name[32];
  std::snprintf(name, sizeof name, "step_%08lld", static_cast<long long>(step));
  return name;
}

bool parse_step_dir_name(const std::string& name, int64_t* step) {
  const std::string prefix = "step_";
  // At most 18 digits, so the value fits int64.
  if (name.size() <= prefix.size() || name.size() > prefix.size() + 18 ||
      name.compare(0, prefix.size(), prefix) != 0 ||
      name.find_first_not_of("0123456789", prefix.size()) != std::string::npos) {
    return false;
  }
  *step = std::stoll(name.substr(prefix.size()));
  return true;
}

std::string rank_file_name(int rank) {
  char name[40];
  std::snprintf(name, sizeof name, "rank_%05d.safetensors", rank);
  return name;
}

int64_t Box::numel() const { return numel_of(shape); }

bool intersect_boxes(const Box& a, const Box& b, Box* common) {
  STRATA_CHECK(a.offsets.size() == b.offsets.size(), "boxes of different ranks: ", box_to_string(a),
               " and ", box_to_string(b));
  Box result;
  for (size_t d = 0; d < a.offsets.size(); ++d) {
    int64_t begin = std::max(a.offsets[d], b.offsets[d]);
    int64_t end = std::min(a.offsets[d] + a.shape[d], b.offsets[d] + b.shape[d]);
    if (end <= begin) return false;
    result.offsets.push_back(begin);
    result.shape.push_back(end - begin);
  }
  *common = std::move(result);
  return true;
}

std::string box_to_string(const Box& box) {
  std::string text = "[";
  for (size_t d = 0; d < box.offsets.size(); ++d) {
    text += str(d ? ", " : "", box.offsets[d], ":", box.offsets[d] + box.shape[d]);
  }
  return text + "]";
}

std::string slice_key(const std::string& name, const std::vector<int64_t>& offsets) {
  std::string key = name + "@";
  for (size_t d = 0; d < offsets.size(); ++d) key += (d ? "," : "") + std::to_string(offsets[d]);
  return key;
}

std::string crc32_to_hex(uint32_t crc) {
  char text[11];
  std::snprintf(text, sizeof text, "0x%08x", crc);
  return text;
}

nlohmann::json file_record_to_json(const FileRecord& record) {
  nlohmann::json slices = nlohmann::json::array();
  for (const SliceRecord& slice : record.slices) {
    nlohmann::json entry = box_fields(slice.box);
    entry["name"] = slice.name;
    entry["key"] = slice.key;
    entry["dtype"] = slice.dtype;
    entry["global_shape"] = slice.global_shape;
    slices.push_back(std::move(entry));
  }
  return {{"file", record.file},
          {"size", record.size},
          {"crc32", crc32_to_hex(record.crc32)},
          {"slices", std::move(slices)},
          {"replicas", record.replicas}};
}

FileRecord file_record_from_json(const nlohmann::json& json) {
  FileRecord record;
  record.file = json.at("file").get<std::string>();
  record.size = json.at("size").get<int64_t>();
  std::string crc = json.at("crc32").get<std::string>();
  STRATA_CHECK(crc32_from_hex(crc, &record.crc32), "bad CRC-32 \"", crc, "\" in a file record");
  for (const auto& entry : json.at("slices")) {
    record.slices.push_back(
        {entry.at("name").get<std::string>(), entry.at("key").get<std::string>(),
         entry.at("dtype").get<std::string>(), entry.at("global_shape").get<std::vector<int64_t>>(),
         box_from_json(entry)});
  }
  record.replicas = json.at("replicas").get<std::vector<std::string>>();
  return record;
}

CheckpointIndex build_index(int64_t step, const std::vector<FileRecord>& records) {
  CheckpointIndex index;
  index.step = step;
  index.world_size = static_cast<int64_t>(records.size());
  for (const FileRecord& record : records) {
    if (record.file.empty()) {
      STRATA_CHECK(record.slices.empty(), "slices recorded without a file");
      continue;
    }
    bool new_file = index.files.emplace(record.file, IndexFile{record.size, record.crc32}).second;
    STRATA_CHECK(new_file, "two ranks wrote ", record.file);
    for (const SliceRecord& slice : record.slices) {
      auto [entry, is_new] = index.tensors.try_emplace(slice.name);
      IndexTensor& tensor = entry->second;
      if (is_new) {
        tensor.dtype = slice.dtype;
        tensor.shape = slice.global_shape;
      }
      STRATA_CHECK(tensor.dtype == slice.dtype && tensor.shape == slice.global_shape,
                   "ranks disagree on tensor '", slice.name, "': ", tensor.dtype, " ",
                   shape_to_string(tensor.shape), " in one file, ", slice.dtype, " ",
                   shape_to_string(slice.global_shape), " in ", record.file);
      tensor.slices.push_back({record.file, slice.key, slice.box});
    }
  }

  for (size_t rank = 0; rank < records.size(); ++rank) {
    for (const std::string& name : records[rank].replicas) {
      STRATA_CHECK(index.tensors.count(name), "tensor '", name, "' is held by rank ", rank,
                   " with write=false, but no rank wrote it");
    }
  }

  // Exact cover: no two slices share an element, and together they hold every element. The
  // pairwise test is quadratic in the slices of one tensor, which number at most the ranks
  // sharding it (a tp or ep group), not the world.
  for (const auto& [name, tensor] : index.tensors) {
    int64_t covered = 0;
    for (size_t i = 0; i < tensor.slices.size(); ++i) {
      const IndexSlice& a = tensor.slices[i];
      covered += a.box.numel();
      for (size_t j = i + 1; j < tensor.slices.size(); ++j) {
        const IndexSlice& b = tensor.slices[j];
        Box common;
        STRATA_CHECK(!intersect_boxes(a.box, b.box, &common), "tensor '", name, "': slice ",
                     box_to_string(a.box), " in ", a.file, " and slice ", box_to_string(b.box),
                     " in ", b.file, " overlap in ", box_to_string(common),
                     ": two writers saved the same region; mark every replica but one "
                     "write=false");
      }
    }
    STRATA_CHECK(covered == numel_of(tensor.shape), "tensor '", name, "' ",
                 shape_to_string(tensor.shape), ": the written slices hold ", covered, " of ",
                 numel_of(tensor.shape),
                 " elements; some region has no writer (write=false on every replica of it?)");
  }
  return index;
}

nlohmann::json index_to_json(const CheckpointIndex& index) {
  nlohmann::json files = nlohmann::json::object();
  for (const auto& [name, file] : index.files) {
    files[name] = {{"size", file.size}, {"crc32", crc32_to_hex(file.crc32)}};
  }
  nlohmann::json tensors = nlohmann::json::object();
  for (const auto& [name, tensor] : index.tensors) {
    nlohmann::json slices = nlohmann::json::array();
    for (const IndexSlice& slice : tensor.slices) {
      nlohmann::json entry = box_fields(slice.box);
      entry["file"] = slice.file;
      entry["key"] = slice.key;
      slices.push_back(std::move(entry));
    }
    tensors[name] = {{"dtype", tensor.dtype}, {"shape", tensor.shape}, {"slices", slices}};
  }
  return {{"format", kFormat},  {"version", kVersion},
          {"step", index.step}, {"world_size", index.world_size},
          {"files", files},     {"tensors", tensors}};
}

std::string index_to_text(const CheckpointIndex& index) {
  const nlohmann::json json = index_to_json(index);
  std::string text = "{";
  const char* separator = "\n";
  for (const auto& [key, value] : json.items()) {
    text += separator + str("  ", nlohmann::json(key).dump(), ": ");
    separator = ",\n";
    if (!value.is_object() || value.empty()) {
      text += value.dump();
      continue;
    }
    const char* member_separator = "{\n";
    for (const auto& [member, member_value] : value.items()) {
      text +=
          member_separator + str("    ", nlohmann::json(member).dump(), ": ", member_value.dump());
      member_separator = ",\n";
    }
    text += "\n  }";
  }
  return text + "\n}\n";
}

CheckpointIndex index_from_json(const nlohmann::json& json, const std::string& path) {
  auto malformed = [&](const std::string& why) {
    return UserError(str("checkpoint index ", path, " is malformed: ", why,
                         "; the checkpoint cannot be used (load an earlier one)"));
  };
  CheckpointIndex index;
  try {
    if (json.value("format", "") != kFormat)
      throw malformed("\"format\" is not \"strata-checkpoint\"");
    int version = json.at("version").get<int>();
    if (version != kVersion) {
      throw UserError(str("checkpoint index ", path, " has version ", version,
                          "; this strata reads version ", kVersion,
                          " (load it with the strata version that wrote it)"));
    }
    index.step = json.at("step").get<int64_t>();
    index.world_size = json.at("world_size").get<int64_t>();
    for (const auto& [name, file] : json.at("files").items()) {
      // Opened as <checkpoint>/<name>: a path that leads elsewhere is not a checkpoint file.
      if (name.empty() || name == "." || name == ".." || name.find('/') != std::string::npos) {
        throw malformed(str("file name \"", name, "\" is not a plain file name"));
      }
      IndexFile& entry = index.files[name];
      entry.size = file.at("size").get<int64_t>();
      std::string crc = file.at("crc32").get<std::string>();
      if (!crc32_from_hex(crc, &entry.crc32)) {
        throw malformed(str("file ", name, " has crc32 \"", crc, "\", not of the form 0x1234abcd"));
      }
    }
    for (const auto& [name, entry] : json.at("tensors").items()) {
      IndexTensor& tensor = index.tensors[name];
      tensor.dtype = entry.at("dtype").get<std::string>();
      tensor.shape = entry.at("shape").get<std::vector<int64_t>>();
      if (std::any_of(tensor.shape.begin(), tensor.shape.end(), [](int64_t s) { return s < 0; })) {
        throw malformed(str("tensor '", name, "' has a negative dimension"));
      }
      for (const auto& slice_json : entry.at("slices")) {
        IndexSlice slice{slice_json.at("file").get<std::string>(),
                         slice_json.at("key").get<std::string>(), box_from_json(slice_json)};
        if (!index.files.count(slice.file)) {
          throw malformed(str("tensor '", name, "' has a slice in ", slice.file,
                              ", which is not listed under \"files\""));
        }
        if (slice.box.offsets.size() != tensor.shape.size() ||
            slice.box.shape.size() != tensor.shape.size()) {
          throw malformed(str("tensor '", name, "' has ", tensor.shape.size(),
                              " dims but a slice with ", slice.box.offsets.size(), " offsets and ",
                              slice.box.shape.size(), " sizes"));
        }
        bool fits = true;
        for (size_t d = 0; fits && d < tensor.shape.size(); ++d) {
          fits = slice.box.offsets[d] >= 0 && slice.box.shape[d] >= 0 &&
                 slice.box.offsets[d] <= tensor.shape[d] &&
                 slice.box.shape[d] <= tensor.shape[d] - slice.box.offsets[d];
        }
        if (!fits) {
          // Offsets and shape as read: their sum may not even be representable.
          throw malformed(str("tensor '", name, "' ", shape_to_string(tensor.shape),
                              " has a slice at offsets ", nlohmann::json(slice.box.offsets).dump(),
                              " of shape ", nlohmann::json(slice.box.shape).dump(), " outside it"));
        }
        tensor.slices.push_back(std::move(slice));
      }
    }
  } catch (const nlohmann::json::exception& error) {
    throw malformed(error.what());
  }
  return index;
}

}  // namespace strata
