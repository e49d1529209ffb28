// Atomic file writes with POSIX calls (open/write/fsync/rename).
#include "strata/core/atomic_file.h"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <random>

#include "strata/core/error.h"

namespace strata {

namespace {

// Writes all of `data`, retrying short writes; false (with errno set) on failure.
bool write_all(int fd, const unsigned char* data, size_t size) {
  while (size > 0) {
    ssize_t written = ::write(fd, data, size);
    if (written < 0) {
      if (errno == EINTR) continue;
      return false;
    }
    data += written;
    size -= static_cast<size_t>(written);
  }
  return true;
}

void fsync_directory(const std::string& directory) {
  int fd = ::open(directory.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd < 0) return;  // the rename's durability is best effort; the data itself is synced
  ::fsync(fd);
  ::close(fd);
}

}  // namespace

std::string unique_sibling_path(const std::string& path) {
  // pid alone is not enough: ranks on different hosts may share the directory.
  std::random_device entropy;
  uint64_t nonce = (static_cast<uint64_t>(entropy()) << 32) ^ entropy();
  char suffix[48];
  std::snprintf(suffix, sizeof(suffix), ".tmp-%d-%016llx", static_cast<int>(::getpid()),
                static_cast<unsigned long long>(nonce));
  return path + suffix;
}

void write_file_atomically(const std::string& path, const void* data, size_t size) {
  std::string temporary = unique_sibling_path(path);
  int fd = ::open(temporary.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
  if (fd < 0) throw UserError(str("cannot create ", temporary, ": ", std::strerror(errno)));
  bool ok = write_all(fd, static_cast<const unsigned char*>(data), size) && ::fsync(fd) == 0;
  int saved_errno = errno;
  if (::close(fd) != 0 && ok) {
    ok = false;
    saved_errno = errno;
  }
  if (ok && std::rename(temporary.c_str(), path.c_str()) != 0) {
    ok = false;
    saved_errno = errno;
  }
  if (!ok) {
    ::unlink(temporary.c_str());
    throw UserError(str("cannot write ", path, ": ", std::strerror(saved_errno)));
  }
  std::string directory = std::filesystem::path(path).parent_path().string();
  fsync_directory(directory.empty() ? "." : directory);
}

}  // namespace strata
