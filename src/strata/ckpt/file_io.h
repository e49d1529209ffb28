// POSIX file I/O for checkpoints: writes that can be fsynced (the save protocol's durability
// rests on them), positioned reads (loading reads only the byte ranges it needs), and directory
// syncs (so a rename survives a crash). Every failure is a UserError naming the path and the
// operating system's reason.
#pragma once
#include <cstddef>
#include <cstdint>
#include <string>

namespace strata {

class File {
 public:
  // A new file (truncated if it exists), for writing.
  static File create(const std::string& path);
  static File open_for_reading(const std::string& path);

  File(File&& other) noexcept;
  File& operator=(File&& other) noexcept;
  File(const File&) = delete;
  File& operator=(const File&) = delete;
  ~File();  // closes without checking: call close() where a failed close must be reported

  void write_all(const void* data, size_t size);
  // Reads up to `size` bytes at the current position; 0 at end of file.
  size_t read_some(void* data, size_t size);
  // Reads exactly `size` bytes at `offset`; a file that ends earlier is reported as truncated.
  void read_at(void* data, size_t size, int64_t offset);
  int64_t size() const;
  void sync();   // fsync: the data is on stable storage when this returns
  void close();  // reports errors of delayed writes
  const std::string& path() const { return path_; }

 private:
  File(int fd, std::string path) : fd_(fd), path_(std::move(path)) {}
  int fd_ = -1;
  std::string path_;
};

// fsync of a directory: makes the creation, removal or renaming of its entries durable.
void sync_directory(const std::string& path);
// Writes `text` to a new file at `path`, fsyncs and closes it.
void write_file_synced(const std::string& path, const std::string& text);
std::string read_text_file(const std::string& path);

}  // namespace strata
