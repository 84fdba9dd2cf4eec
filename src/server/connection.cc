// Noticing that the client of a non-streaming request went away (docs/server.md, Concurrency).
//
// cpp-httplib 0.11.4 (Debian 12) hands a handler neither its socket nor a way to ask whether the
// peer is still there: Request has no is_connection_closed (later versions add one), and
// DataSink::is_writable only polls for writability, which stays true after the peer's FIN. A
// non-streaming handler writes nothing until its answer is complete, so a write error cannot tell
// either. The handler does know its connection's address pair (remote and local address and port),
// which names exactly one open TCP socket of the process; that socket stays open until the
// handler returns (httplib closes it on the handler's thread), so it can be looked up once and
// peeked at between decode steps.
#include <dirent.h>
#include <netdb.h>
#include <sys/socket.h>

#include <cerrno>
#include <cstdlib>
#include <string>

#include "server/server_internal.h"

namespace primekv::server {
namespace {

// The numeric host and port of a socket address, as httplib writes them into Request.
bool AddressOf(const sockaddr_storage& addr, socklen_t len, std::string& host, int& port) {
  if (addr.ss_family == AF_INET) {
    port = ntohs(reinterpret_cast<const sockaddr_in&>(addr).sin_port);
  } else if (addr.ss_family == AF_INET6) {
    port = ntohs(reinterpret_cast<const sockaddr_in6&>(addr).sin6_port);
  } else {
    return false;
  }
  char buf[NI_MAXHOST];
  if (getnameinfo(reinterpret_cast<const sockaddr*>(&addr), len, buf, sizeof(buf), nullptr, 0,
                  NI_NUMERICHOST) != 0)
    return false;
  host = buf;
  return true;
}

bool Matches(int fd, const ConnectionAddress& want) {
  sockaddr_storage addr{};
  socklen_t len = sizeof(addr);
  std::string host;
  int port = -1;
  if (getpeername(fd, reinterpret_cast<sockaddr*>(&addr), &len) != 0 ||
      !AddressOf(addr, len, host, port) || port != want.remote_port || host != want.remote_addr)
    return false;
  len = sizeof(addr);
  return getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len) == 0 &&
         AddressOf(addr, len, host, port) && port == want.local_port && host == want.local_addr;
}

}  // namespace

int FindConnectionSocket(const ConnectionAddress& want) {
  if (want.remote_port <= 0 || want.local_port <= 0) return -1;
  DIR* dir = opendir("/proc/self/fd");
  if (dir == nullptr) return -1;
  int found = -1;
  while (const dirent* entry = readdir(dir)) {
    char* end = nullptr;
    const long fd = std::strtol(entry->d_name, &end, 10);
    if (end == entry->d_name || *end != '\0' || fd == dirfd(dir)) continue;
    int type = 0;
    socklen_t len = sizeof(type);
    if (getsockopt(static_cast<int>(fd), SOL_SOCKET, SO_TYPE, &type, &len) != 0 ||
        type != SOCK_STREAM)
      continue;
    if (Matches(static_cast<int>(fd), want)) {
      found = static_cast<int>(fd);
      break;
    }
  }
  closedir(dir);
  return found;
}

bool PeerConnected(int fd) {
  char byte;
  const ssize_t n = recv(fd, &byte, 1, MSG_PEEK | MSG_DONTWAIT);
  if (n > 0) return true;    // bytes waiting (a pipelined request): still there
  if (n == 0) return false;  // the peer's FIN: it closed its end
  return errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR;
}

}  // namespace primekv::server
