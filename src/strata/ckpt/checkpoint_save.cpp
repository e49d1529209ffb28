// Saving a checkpoint: the atomic protocol of docs/checkpoint.md. Three phases, each ended by
// one all-gather that doubles as a barrier and as an error report, so a failure on one rank
// stops every rank with the same message instead of leaving the others waiting:
//   prepare  rank 0 clears what crashed saves left behind and creates .tmp.step_N
//   write    every rank writes and fsyncs its safetensors file; the gather carries the
//            records (slices, size, CRC-32) to rank 0
//   commit   rank 0 writes index.json, state.json, COMPLETE, fsyncs, renames .tmp.step_N to
//            step_N, fsyncs the root, prunes old checkpoints
// Before the commit's rename nothing is visible under a step_ name; after it, all is synced.
#include <fcntl.h>  // AT_FDCWD
#include <stdio.h>  // renameat2, RENAME_EXCHANGE (glibc, _GNU_SOURCE)

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <functional>

#include "strata/ckpt/checkpoint.h"
#include "strata/ckpt/checkpoint_index.h"
#include "strata/ckpt/file_io.h"
#include "strata/ckpt/safetensors.h"
#include "strata/core/error.h"

namespace strata {
namespace {

namespace fs = std::filesystem;

// Prefixes of the hidden directories a save uses; loaders never look at them.
constexpr const char* kTmpPrefix = ".tmp.";      // being written
constexpr const char* kAsidePrefix = ".old.";    // an earlier save of the same step, replaced
constexpr const char* kTrashPrefix = ".trash.";  // being deleted

bool starts_with(const std::string& text, const std::string& prefix) {
  return text.compare(0, prefix.size(), prefix) == 0;
}

// std::filesystem failures as UserErrors that say where and why.
template <typename Action>
void filesystem_op(const char* what, const fs::path& path, Action action) {
  std::error_code error;
  action(error);
  if (error) {
    throw UserError(str("cannot ", what, " ", path.string(), ": ", error.message(),
                        " (check that the checkpoint root is writable by every rank)"));
  }
}

void remove_tree(const fs::path& path) {
  filesystem_op("remove", path, [&](std::error_code& error) { fs::remove_all(path, error); });
}

void rename_path(const fs::path& from, const fs::path& to) {
  filesystem_op("rename", from, [&](std::error_code& error) { fs::rename(from, to, error); });
}

bool is_complete(const fs::path& dir) {
  std::error_code error;
  return fs::is_regular_file(dir / kCompleteMarker, error);
}

// Every rank's payload from `action`, once every rank has run it. If any rank threw, every
// rank throws the same error, naming the first rank that failed.
std::vector<nlohmann::json> run_phase(CheckpointGroup& group, const std::string& what,
                                      const std::function<nlohmann::json()>& action) {
  nlohmann::json report;
  try {
    report = {{"ok", action()}};
  } catch (const InternalError& error) {
    report = {{"error", error.what()}, {"bug", true}};
  } catch (const std::exception& error) {
    report = {{"error", error.what()}, {"bug", false}};
  }
  // Messages may quote paths that are not UTF-8; replace those bytes rather than fail here.
  std::vector<std::string> replies =
      group.all_gather_bytes(report.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace));
  STRATA_CHECK(static_cast<int>(replies.size()) == group.size(), "all_gather_bytes returned ",
               replies.size(), " replies from a group of ", group.size());

  std::vector<nlohmann::json> payloads;
  int failed_ranks = 0;
  std::string first_failure;
  bool first_is_bug = false;
  for (size_t rank = 0; rank < replies.size(); ++rank) {
    nlohmann::json reply = nlohmann::json::parse(replies[rank]);
    if (reply.contains("error")) {
      if (failed_ranks++ == 0) {
        first_failure =
            str(what, " failed on rank ", rank, ": ", reply["error"].get<std::string>());
        first_is_bug = reply["bug"].get<bool>();
      }
      continue;
    }
    payloads.push_back(std::move(reply["ok"]));
  }
  if (failed_ranks > 1) first_failure += str(" (and on ", failed_ranks - 1, " other ranks)");
  if (failed_ranks > 0 && first_is_bug) throw InternalError(first_failure);
  if (failed_ranks > 0) throw UserError(first_failure);
  return payloads;
}

// Repairs and clears what interrupted saves left in `root`: a directory being written or
// deleted goes; an earlier checkpoint moved aside (see install) goes back in place if its
// replacement never arrived, and goes otherwise.
void clean_interrupted_saves(const fs::path& root) {
  std::vector<fs::path> entries;
  filesystem_op("list", root, [&](std::error_code& error) {
    for (fs::directory_iterator it(root, error), end; !error && it != end; it.increment(error)) {
      entries.push_back(it->path());
    }
  });
  for (const fs::path& entry : entries) {
    const std::string name = entry.filename().string();
    if (starts_with(name, kTmpPrefix) || starts_with(name, kTrashPrefix)) {
      remove_tree(entry);
    } else if (starts_with(name, kAsidePrefix)) {
      fs::path original = root / name.substr(std::strlen(kAsidePrefix));
      if (is_complete(original)) {
        remove_tree(entry);
      } else {
        remove_tree(original);
        rename_path(entry, original);
      }
    }
  }
}

// Moves the finished `staged` directory to `final_dir` in one rename. Re-saving a step that
// already has a checkpoint (a run resumed from an earlier one) swaps the two atomically where
// the file system can (RENAME_EXCHANGE: Linux local file systems); elsewhere (NFS, Lustre)
// the old one is moved aside first, and clean_interrupted_saves puts it back should a crash
// fall between the two renames.
void install(const fs::path& staged, const fs::path& final_dir) {
  std::error_code error;
  if (!fs::exists(final_dir, error)) {
    rename_path(staged, final_dir);
    return;
  }
  if (::renameat2(AT_FDCWD, staged.c_str(), AT_FDCWD, final_dir.c_str(), RENAME_EXCHANGE) == 0) {
    remove_tree(staged);  // now the earlier checkpoint
    return;
  }
  if (errno != EINVAL && errno != ENOSYS) {
    throw UserError(str("cannot replace ", final_dir.string(), " with ", staged.string(), ": ",
                        std::strerror(errno)));
  }
  fs::path aside = final_dir.parent_path() / (kAsidePrefix + final_dir.filename().string());
  rename_path(final_dir, aside);
  rename_path(staged, final_dir);
  remove_tree(aside);
}

// Deletes all but the newest `keep` complete checkpoints (renamed out of sight first, so a
// crash mid-delete never leaves a damaged directory under a step_ name).
void prune(const fs::path& root, int64_t keep) {
  if (keep <= 0) return;
  std::vector<std::pair<int64_t, fs::path>> complete;
  filesystem_op("list", root, [&](std::error_code& error) {
    for (fs::directory_iterator it(root, error), end; !error && it != end; it.increment(error)) {
      int64_t step;
      if (parse_step_dir_name(it->path().filename().string(), &step) && is_complete(it->path())) {
        complete.emplace_back(step, it->path());
      }
    }
  });
  std::sort(complete.begin(), complete.end());
  for (size_t i = 0; i + keep < complete.size(); ++i) {
    const fs::path& dir = complete[i].second;
    fs::path trash = root / (kTrashPrefix + dir.filename().string());
    rename_path(dir, trash);
    remove_tree(trash);
  }
}

void check_sharded_tensor(const ShardedTensor& tensor) {
  STRATA_CHECK(tensor.local.defined(), "tensor '", tensor.name, "' has no local data");
  const size_t dims = tensor.global_shape.size();
  STRATA_CHECK(tensor.offsets.size() == dims && static_cast<size_t>(tensor.local.dim()) == dims,
               "tensor '", tensor.name, "': global shape has ", dims, " dims, offsets ",
               tensor.offsets.size(), ", local ", tensor.local.dim());
  for (size_t d = 0; d < dims; ++d) {
    STRATA_CHECK(tensor.offsets[d] >= 0 &&
                     tensor.offsets[d] + tensor.local.size(d) <= tensor.global_shape[d],
                 "tensor '", tensor.name, "': local slice of size ", tensor.local.size(d),
                 " at offset ", tensor.offsets[d], " in dim ", d, " exceeds the global size ",
                 tensor.global_shape[d]);
  }
  STRATA_REQUIRE(safetensors_supports(tensor.local.scalar_type()), "tensor '", tensor.name,
                 "' has dtype ", c10::toString(tensor.local.scalar_type()),
                 ", which checkpoints cannot store; keep it as float64, float32, float16, "
                 "bfloat16, int64, int32, uint8 or bool");
}

// Writes this rank's slices into `dir` and describes the file.
FileRecord write_rank_file(const fs::path& dir, int64_t step, int rank,
                           const std::vector<ShardedTensor>& tensors) {
  FileRecord record;
  std::vector<std::pair<std::string, at::Tensor>> keyed;
  for (const ShardedTensor& tensor : tensors) {
    check_sharded_tensor(tensor);
    if (!tensor.write) {
      if (record.replicas.empty() || record.replicas.back() != tensor.name) {
        record.replicas.push_back(tensor.name);
      }
      continue;
    }
    SliceRecord slice{tensor.name, slice_key(tensor.name, tensor.offsets),
                      safetensors_dtype_name(tensor.local.scalar_type()), tensor.global_shape,
                      Box{tensor.offsets, tensor.local.sizes().vec()}};
    keyed.emplace_back(slice.key, tensor.local.detach());
    record.slices.push_back(std::move(slice));
  }
  if (keyed.empty()) return record;  // replicas only: no file
  record.file = rank_file_name(rank);
  WrittenFileInfo written = write_safetensors((dir / record.file).string(), keyed,
                                              {{"format", "pt"},
                                               {"strata_step", std::to_string(step)},
                                               {"strata_rank", std::to_string(rank)}});
  record.size = written.size;
  record.crc32 = written.crc32;
  return record;
}

}  // namespace

std::string checkpoint_dir(const std::string& root, int64_t step) {
  return (fs::path(root) / step_dir_name(step)).string();
}

CheckpointSave::CheckpointSave(const std::string& root, int64_t step, CheckpointGroup& group,
                               int64_t keep)
    : root_(root),
      step_(step),
      keep_(keep),
      group_(group),
      staging_dir_((fs::path(root) / (kTmpPrefix + step_dir_name(step))).string()),
      what_(str("saving checkpoint ", checkpoint_dir(root, step))) {
  STRATA_REQUIRE(step >= 0, "checkpoint step must be >= 0, got ", step);
  STRATA_REQUIRE(keep >= 0, "checkpoint keep must be >= 0 (0 keeps all), got ", keep);
  run_phase(group_, what_, [&]() -> nlohmann::json {
    if (group_.rank() == 0) {
      const fs::path root_path(root_), staging_dir(staging_dir_);
      filesystem_op("create", root_path,
                    [&](std::error_code& error) { fs::create_directories(root_path, error); });
      clean_interrupted_saves(root_path);
      filesystem_op("create", staging_dir,
                    [&](std::error_code& error) { fs::create_directory(staging_dir, error); });
    }
    return nullptr;
  });
}

nlohmann::json CheckpointSave::write(const std::vector<ShardedTensor>& tensors) const {
  return file_record_to_json(write_rank_file(staging_dir_, step_, group_.rank(), tensors));
}

std::string CheckpointSave::commit(const std::function<nlohmann::json()>& record,
                                   const nlohmann::json& state) {
  const fs::path root_path(root_), staging_dir(staging_dir_);
  const fs::path final_dir = root_path / step_dir_name(step_);
  std::vector<nlohmann::json> records = run_phase(group_, what_, record);
  run_phase(group_, what_, [&]() -> nlohmann::json {
    if (group_.rank() != 0) return nullptr;
    std::vector<FileRecord> parsed;
    for (const nlohmann::json& json : records) parsed.push_back(file_record_from_json(json));
    CheckpointIndex index = build_index(step_, parsed);
    write_file_synced((staging_dir / kIndexFile).string(), index_to_text(index));
    write_file_synced((staging_dir / kStateFile).string(), state.dump(1) + "\n");
    // Written last: its presence promises that everything above is on disk.
    write_file_synced((staging_dir / kCompleteMarker).string(), str("step ", step_, "\n"));
    sync_directory(staging_dir.string());
    install(staging_dir, final_dir);
    sync_directory(root_path.string());
    prune(root_path, keep_);
    return nullptr;
  });
  return final_dir.string();
}

std::string save_checkpoint(const std::string& root, int64_t step,
                            const std::vector<ShardedTensor>& tensors, const nlohmann::json& state,
                            CheckpointGroup& group, int64_t keep) {
  CheckpointSave save(root, step, group, keep);
  return save.commit([&] { return save.write(tensors); }, state);
}

}  // namespace strata
