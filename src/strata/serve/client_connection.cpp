// Finding a request's socket among the process's descriptors, and polling it for the
// client's hang-up.
#include "strata/serve/client_connection.h"

#include <dirent.h>
#include <netdb.h>
#include <poll.h>
#include <sys/socket.h>
#include <sys/stat.h>

#include <cstdlib>

namespace strata {
namespace {

// The numeric address and port of a socket name, as cpp-httplib formats them (getnameinfo,
// NI_NUMERICHOST); false if the name has none.
bool numeric_name(const sockaddr_storage& name, socklen_t length, std::string& address, int& port) {
  if (name.ss_family == AF_INET) {
    port = ntohs(reinterpret_cast<const sockaddr_in&>(name).sin_port);
  } else if (name.ss_family == AF_INET6) {
    port = ntohs(reinterpret_cast<const sockaddr_in6&>(name).sin6_port);
  } else {
    return false;
  }
  char host[NI_MAXHOST];
  if (getnameinfo(reinterpret_cast<const sockaddr*>(&name), length, host, sizeof(host), nullptr, 0,
                  NI_NUMERICHOST) != 0) {
    return false;
  }
  address = host;
  return true;
}

bool has_name(int socket, bool peer, const std::string& address, int port) {
  sockaddr_storage name{};
  socklen_t length = sizeof(name);
  auto* raw = reinterpret_cast<sockaddr*>(&name);
  if ((peer ? getpeername(socket, raw, &length) : getsockname(socket, raw, &length)) != 0) {
    return false;
  }
  std::string found_address;
  int found_port = -1;
  return numeric_name(name, length, found_address, found_port) && found_port == port &&
         found_address == address;
}

}  // namespace

ClientConnection::ClientConnection(const std::string& local_addr, int local_port,
                                   const std::string& remote_addr, int remote_port) {
  DIR* descriptors = opendir("/proc/self/fd");
  if (descriptors == nullptr) return;
  const int listing = dirfd(descriptors);
  while (const dirent* entry = readdir(descriptors)) {
    char* end = nullptr;
    const long fd = std::strtol(entry->d_name, &end, 10);
    if (end == entry->d_name || *end != '\0' || fd == listing) continue;
    struct stat status;
    if (fstat(static_cast<int>(fd), &status) != 0 || !S_ISSOCK(status.st_mode)) continue;
    const int candidate = static_cast<int>(fd);
    if (has_name(candidate, false, local_addr, local_port) &&
        has_name(candidate, true, remote_addr, remote_port)) {
      socket_ = candidate;
      break;
    }
  }
  closedir(descriptors);
}

bool ClientConnection::closed() const {
  if (socket_ < 0) return false;
  // POLLRDHUP: the peer closed (or shut down) its end; POLLHUP, POLLERR: the connection is
  // gone. A request the client sends next on a kept-alive connection (POLLIN) is not a hang-up.
  pollfd entry{socket_, POLLRDHUP, 0};
  if (poll(&entry, 1, 0) != 1) return false;
  return (entry.revents & (POLLRDHUP | POLLHUP | POLLERR | POLLNVAL)) != 0;
}

}  // namespace strata
