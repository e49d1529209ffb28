// POSIX implementation of the checkpoint file helpers (open/write/pread/fsync), retrying on
// EINTR and short transfers.
#include "strata/ckpt/file_io.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "strata/core/error.h"

namespace strata {
namespace {

// The hint says what to check: for writes, where the checkpoint goes; for reads, whether the
// file is there at all.
constexpr const char* kWriteHint =
    "check that the checkpoint root is writable, on a file system every rank can reach, with "
    "enough free space";
constexpr const char* kReadHint = "check that the path exists and this rank can read it";

[[noreturn]] void fail(const char* action, const std::string& path, const char* hint) {
  int error = errno;
  throw UserError(str("cannot ", action, " ", path, ": ", std::strerror(error), " (", hint, ")"));
}

int open_checked(const std::string& path, int flags, const char* action, const char* hint) {
  int fd;
  do {
    fd = ::open(path.c_str(), flags | O_CLOEXEC, 0644);
  } while (fd < 0 && errno == EINTR);
  if (fd < 0) fail(action, path, hint);
  return fd;
}

}  // namespace

File File::create(const std::string& path) {
  return File(open_checked(path, O_WRONLY | O_CREAT | O_TRUNC, "create", kWriteHint), path);
}

File File::open_for_reading(const std::string& path) {
  return File(open_checked(path, O_RDONLY, "open", kReadHint), path);
}

File::File(File&& other) noexcept : fd_(other.fd_), path_(std::move(other.path_)) {
  other.fd_ = -1;
}

File& File::operator=(File&& other) noexcept {
  if (this != &other) {
    if (fd_ >= 0) ::close(fd_);
    fd_ = other.fd_;
    path_ = std::move(other.path_);
    other.fd_ = -1;
  }
  return *this;
}

File::~File() {
  if (fd_ >= 0) ::close(fd_);
}

void File::write_all(const void* data, size_t size) {
  const auto* bytes = static_cast<const char*>(data);
  while (size > 0) {
    ssize_t written = ::write(fd_, bytes, size);
    if (written < 0) {
      if (errno == EINTR) continue;
      fail("write", path_, kWriteHint);
    }
    bytes += written;
    size -= static_cast<size_t>(written);
  }
}

size_t File::read_some(void* data, size_t size) {
  while (true) {
    ssize_t got = ::read(fd_, data, size);
    if (got >= 0) return static_cast<size_t>(got);
    if (errno != EINTR) fail("read", path_, kReadHint);
  }
}

void File::read_at(void* data, size_t size, int64_t offset) {
  auto* bytes = static_cast<char*>(data);
  const int64_t end = offset + static_cast<int64_t>(size);
  while (size > 0) {
    ssize_t got = ::pread(fd_, bytes, size, offset);
    if (got < 0) {
      if (errno == EINTR) continue;
      fail("read", path_, kReadHint);
    }
    if (got == 0) {
      throw UserError(str("checkpoint file ", path_, " is truncated: it ends at byte ", offset,
                          " but bytes up to ", end, " are needed; the checkpoint cannot be used"));
    }
    bytes += got;
    offset += got;
    size -= static_cast<size_t>(got);
  }
}

int64_t File::size() const {
  struct stat info;
  if (::fstat(fd_, &info) != 0) fail("stat", path_, kReadHint);
  return static_cast<int64_t>(info.st_size);
}

void File::sync() {
  if (::fsync(fd_) != 0) fail("fsync", path_, kWriteHint);
}

void File::close() {
  int fd = fd_;
  fd_ = -1;
  if (fd >= 0 && ::close(fd) != 0 && errno != EINTR) fail("close", path_, kWriteHint);
}

void sync_directory(const std::string& path) {
  File directory = File::open_for_reading(path);
  directory.sync();
  directory.close();
}

void write_file_synced(const std::string& path, const std::string& text) {
  File file = File::create(path);
  file.write_all(text.data(), text.size());
  file.sync();
  file.close();
}

std::string read_text_file(const std::string& path) {
  File file = File::open_for_reading(path);
  std::string text;
  char buffer[65536];
  while (size_t got = file.read_some(buffer, sizeof buffer)) text.append(buffer, got);
  return text;
}

}  // namespace strata
