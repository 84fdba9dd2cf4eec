// Noticing that the client of a non-streaming request went away (docs/server.md, Concurrency).
// The transport (http.cc) hands the handler its connection's socket; a non-streaming handler
// writes nothing until its answer is complete, so between decode steps it peeks at the socket.
#include <sys/socket.h>

#include <cerrno>

#include "server/common.h"

namespace primekv::server {

bool PeerConnected(int fd) {
  char byte;
  const ssize_t n = recv(fd, &byte, 1, MSG_PEEK | MSG_DONTWAIT);
  if (n > 0) return true;    // bytes waiting (a pipelined request): still there
  if (n == 0) return false;  // the peer's FIN: it closed its end
  return errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR;
}

}  // namespace primekv::server
