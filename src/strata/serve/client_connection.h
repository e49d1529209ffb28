// Whether the client of a request is still connected. cpp-httplib 0.11 (Debian's) gives a
// handler neither its socket nor a way to ask whether the peer has closed it, so the socket is
// found by the request's addresses: the one socket of this process whose local and peer
// address and port are the request's (a TCP connection is named by them). The handler's thread
// owns that socket until the handler returns, so the descriptor cannot be reused meanwhile.
#pragma once
#include <string>

namespace strata {

class ClientConnection {
 public:
  // The connected socket with these addresses (numeric, as cpp-httplib writes them into a
  // Request); none found leaves the connection unknown, and closed() then always false.
  ClientConnection(const std::string& local_addr, int local_port, const std::string& remote_addr,
                   int remote_port);

  bool found() const { return socket_ >= 0; }
  int socket() const { return socket_; }
  // True once the client has closed its end (or the connection failed): a poll without
  // waiting, one system call.
  bool closed() const;

 private:
  int socket_ = -1;
};

}  // namespace strata
