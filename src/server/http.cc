// The HTTP transport of `primekv serve` on GNU libmicrohttpd (docs/server.md, Limits).
//
// One thread per connection: a slow client holds only its own thread, never the threads that
// serve others. MHD bounds the connections (--max-connections, and --max-connections-per-ip
// from one address), the idle time (--http-timeout-s) and the request head (its per-connection
// memory pool); this file adds the rest: the request head's size and line count, the body's
// size counted as it is read (chunked and gzip/deflate bodies included, the decompressed bytes
// counted), deadlines for the head (--header-deadline-s) and the whole request (a watchdog
// shuts down the socket of a request that is not complete in time), and room for whole requests
// when slow heads crowd the connection cap (ShedHeadless).
#include "server/http.h"

#include <microhttpd.h>
#include <netdb.h>
#include <sys/socket.h>
#include <zlib.h>

#include <algorithm>
#include <cctype>
#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <cstring>
#include <deque>
#include <exception>
#include <map>
#include <mutex>
#include <thread>
#include <vector>

namespace primekv::server {
namespace {

using Clock = std::chrono::steady_clock;

// The most lines a request head may have (each also costs MHD pool memory).
constexpr size_t kMaxHeaderLines = 100;
// The per-connection pool holds the request head and MHD's read and write buffers.
constexpr size_t kPoolSlack = 16 << 10;
constexpr unsigned kListenBacklog = 128;
// A streamed response's bytes waiting for the client before its generation waits.
constexpr size_t kMaxQueuedStream = 256 << 10;

struct DaemonStop {
  void operator()(MHD_Daemon* d) const { MHD_stop_daemon(d); }
};
struct ResponseDestroy {
  void operator()(MHD_Response* r) const { MHD_destroy_response(r); }
};
using ResponsePtr = std::unique_ptr<MHD_Response, ResponseDestroy>;

// One connection, for its request deadline.
struct Connection {
  int fd = -1;
  bool waiting = true;      // its current request is not complete yet
  bool head = false;        // its current request's head has arrived
  bool dropped = false;     // its socket is shut down; MHD has not closed it yet
  Clock::time_point since;  // when it began to wait for its current request's head
  Clock::time_point deadline;
  Clock::time_point head_deadline;  // (a slow head holds a connection for nothing)
};

// Incremental gzip/deflate decoding (zlib's automatic header detection).
class Inflater {
 public:
  Inflater() { ok_ = inflateInit2(&zs_, 15 + 32) == Z_OK; }
  ~Inflater() {
    if (ok_) inflateEnd(&zs_);
  }
  Inflater(const Inflater&) = delete;
  Inflater& operator=(const Inflater&) = delete;
  bool finished() const { return finished_; }

  // Appends what `in` decodes to; stops as soon as `out` holds more than `limit` bytes, so at
  // most one buffer past the limit is ever inflated. False on corrupt data.
  bool Feed(const char* in, size_t n, std::string& out, size_t limit) {
    if (!ok_) return false;
    zs_.next_in = reinterpret_cast<Bytef*>(const_cast<char*>(in));
    zs_.avail_in = static_cast<uInt>(n);
    char buf[16 << 10];
    while (zs_.avail_in > 0 && !finished_ && out.size() <= limit) {
      zs_.next_out = reinterpret_cast<Bytef*>(buf);
      zs_.avail_out = sizeof(buf);
      const int rc = inflate(&zs_, Z_NO_FLUSH);
      if (rc != Z_OK && rc != Z_STREAM_END) return false;
      out.append(buf, sizeof(buf) - zs_.avail_out);
      finished_ = rc == Z_STREAM_END;
    }
    return true;
  }

 private:
  z_stream zs_{};
  bool ok_ = false;
  bool finished_ = false;
};

}  // namespace

bool AcceptsGzip(std::string_view accept_encoding) {
  size_t at = 0;
  while (at < accept_encoding.size()) {
    size_t end = accept_encoding.find(',', at);
    if (end == std::string_view::npos) end = accept_encoding.size();
    std::string item;  // the coding and its parameters, without spaces, in lower case
    for (const char c : accept_encoding.substr(at, end - at))
      if (c != ' ' && c != '\t')
        item += static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
    at = end + 1;
    if (item != "gzip" && !item.starts_with("gzip;")) continue;
    const size_t q = item.find(";q=");
    // q=0 (or 0.0, 0.000) refuses the coding; any other weight accepts it.
    return q == std::string::npos || std::strtod(item.c_str() + q + 3, nullptr) > 0;
  }
  return false;
}

std::string GzipBody(std::string_view body) {
  z_stream zs{};
  // 15 + 16: a gzip header and trailer around the deflate stream.
  if (deflateInit2(&zs, Z_DEFAULT_COMPRESSION, Z_DEFLATED, 15 + 16, 8, Z_DEFAULT_STRATEGY) != Z_OK)
    return {};
  std::string out(deflateBound(&zs, static_cast<uLong>(body.size())) + 32, '\0');
  zs.next_in = reinterpret_cast<Bytef*>(const_cast<char*>(body.data()));
  zs.avail_in = static_cast<uInt>(body.size());
  zs.next_out = reinterpret_cast<Bytef*>(out.data());
  zs.avail_out = static_cast<uInt>(out.size());
  const int rc = deflate(&zs, Z_FINISH);
  out.resize(out.size() - zs.avail_out);
  deflateEnd(&zs);
  return rc == Z_STREAM_END ? out : std::string();
}

namespace {

// One request while its body arrives.
struct RequestState {
  std::string body;
  size_t read = 0;  // body bytes as sent (compressed, if it is)
  std::optional<HttpError> refused;
  std::unique_ptr<Inflater> inflater;
};

HttpError TooLarge() {
  return {413, "request body too large (--max-body-kib)", "", "invalid_request_error"};
}

// A streamed response: the producer (a thread running HttpResponse::stream) queues pieces, MHD's
// content reader (the connection's thread, which may block) takes them. Destroyed by MHD when
// the response is done or the connection is gone; the producer's writes then return false.
class StreamPipe {
 public:
  StreamPipe(MHD_Connection* connection, unsigned timeout_s)
      : connection_(connection), timeout_s_(timeout_s) {}
  ~StreamPipe() {
    {
      std::lock_guard lock(mu_);
      gone_ = true;
    }
    cv_.notify_all();
    if (producer_.joinable()) producer_.join();
  }
  StreamPipe(const StreamPipe&) = delete;
  StreamPipe& operator=(const StreamPipe&) = delete;

  void Start(std::function<void(const StreamWriter&)> fn) {
    producer_ = std::thread([this, fn = std::move(fn)]() mutable {
      fn([this](std::string_view data) { return Write(data); });
      fn = nullptr;  // what it holds (a turn: its slot, its session) is let go before the end
      std::lock_guard lock(mu_);
      finished_ = true;
      cv_.notify_all();
    });
  }

  static ssize_t Read(void* cls, uint64_t, char* buf, size_t max) {
    auto* p = static_cast<StreamPipe*>(cls);
    const ssize_t n = p->Take(buf, max);
    // MHD times a connection out from its last write; a reader that waited long for the next
    // token is not an idle client. (Setting the timeout from 0 restarts its clock.)
    MHD_set_connection_option(p->connection_, MHD_CONNECTION_OPTION_TIMEOUT, 0u);
    MHD_set_connection_option(p->connection_, MHD_CONNECTION_OPTION_TIMEOUT, p->timeout_s_);
    return n;
  }
  static void Free(void* cls) { delete static_cast<StreamPipe*>(cls); }

 private:
  bool Write(std::string_view data) {
    std::unique_lock lock(mu_);
    cv_.wait(lock, [&] { return gone_ || queued_ < kMaxQueuedStream; });
    if (gone_) return false;
    queue_.emplace_back(data);
    queued_ += data.size();
    cv_.notify_all();
    return true;
  }

  ssize_t Take(char* buf, size_t max) {
    std::unique_lock lock(mu_);
    cv_.wait(lock, [&] { return !queue_.empty() || finished_; });
    if (queue_.empty()) return MHD_CONTENT_READER_END_OF_STREAM;
    std::string& front = queue_.front();
    const size_t n = std::min(max, front.size() - offset_);
    std::memcpy(buf, front.data() + offset_, n);
    offset_ += n;
    queued_ -= n;
    if (offset_ == front.size()) {
      queue_.pop_front();
      offset_ = 0;
    }
    cv_.notify_all();
    return static_cast<ssize_t>(n);
  }

  MHD_Connection* connection_;
  unsigned timeout_s_;
  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<std::string> queue_;
  size_t offset_ = 0;  // into queue_.front()
  size_t queued_ = 0;
  bool finished_ = false;  // the producer returned
  bool gone_ = false;      // MHD is done with the response
  std::thread producer_;
};

struct HeadSize {
  size_t bytes = 0;
  size_t lines = 0;
};

MHD_Result CountHeader(void* cls, MHD_ValueKind, const char* key, const char* value) {
  auto* h = static_cast<HeadSize*>(cls);
  h->bytes += std::strlen(key) + (value ? std::strlen(value) : 0) + 4;  // ": " and CRLF
  ++h->lines;
  return MHD_YES;
}

std::string Lower(const char* s) {
  std::string out(s ? s : "");
  for (char& c : out) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return out;
}

}  // namespace

struct HttpTransport::Impl {
  ServerOptions options;
  HttpHandler handler;
  int port = 0;
  std::mutex mu;  // connections, dropped
  std::map<Connection*, std::unique_ptr<Connection>> connections;
  size_t dropped = 0;  // connections whose socket is shut down, still counted by MHD
  std::unique_ptr<MHD_Daemon, DaemonStop> daemon;  // last: stopped before the rest goes

  Clock::time_point NextDeadline() const {
    return Clock::now() + std::chrono::seconds(options.request_deadline_s);
  }
  Clock::time_point NextHeadDeadline() const {
    return Clock::now() +
           std::chrono::seconds(std::min(options.header_deadline_s, options.request_deadline_s));
  }
  // Starts the deadlines of a connection's next request.
  void Restart(Connection& conn) const {
    conn.waiting = true;
    conn.head = false;
    conn.since = Clock::now();
    conn.deadline = NextDeadline();
    conn.head_deadline = NextHeadDeadline();
  }

  // Shuts the socket down (not close: MHD owns the descriptor; its thread sees the end of stream
  // and drops the connection). Called with mu held.
  void Drop(Connection& conn) {
    shutdown(conn.fd, SHUT_RDWR);
    conn.waiting = false;
    if (!conn.dropped) ++dropped;
    conn.dropped = true;
  }

  // Called with mu held when `fresh` opens. Above the cap less an eighth, the connections that
  // have waited longest for a request head are dropped: a client that sends its whole request at
  // once then always finds a slot, however many addresses the slow sockets come from (the
  // per-address cap cannot see that). A connection whose head has arrived is never dropped here:
  // its request is read or served. An idle kept-alive connection waits for a head too.
  void ShedHeadless(const Connection* fresh) {
    const size_t cap = static_cast<size_t>(options.max_connections);
    const size_t keep = cap - std::max<size_t>(1, cap / 8);
    const size_t open = connections.size() - dropped;
    if (open <= keep) return;
    std::vector<Connection*> idle;
    for (auto& [key, conn] : connections)
      if (conn.get() != fresh && conn->waiting && !conn->head && !conn->dropped && conn->fd >= 0)
        idle.push_back(conn.get());
    const size_t n = std::min(open - keep, idle.size());
    std::partial_sort(idle.begin(), idle.begin() + static_cast<std::ptrdiff_t>(n), idle.end(),
                      [](const Connection* a, const Connection* b) { return a->since < b->since; });
    for (size_t i = 0; i < n; ++i) Drop(*idle[i]);
  }

  static Impl& Of(void* cls) { return *static_cast<Impl*>(cls); }
  static Connection* ConnectionOf(MHD_Connection* c) {
    const MHD_ConnectionInfo* info = MHD_get_connection_info(c, MHD_CONNECTION_INFO_SOCKET_CONTEXT);
    return info ? static_cast<Connection*>(info->socket_context) : nullptr;
  }

  // MHD_OPTION_NOTIFY_CONNECTION: a connection starts (its first request's deadline runs from
  // now) or ends (MHD closes its socket only after this returns, so the watchdog never shuts
  // down a reused descriptor).
  static void OnConnection(void* cls, MHD_Connection* c, void** socket_context,
                           MHD_ConnectionNotificationCode code) {
    Impl& impl = Of(cls);
    std::lock_guard lock(impl.mu);
    if (code == MHD_CONNECTION_NOTIFY_STARTED) {
      auto conn = std::make_unique<Connection>();
      const MHD_ConnectionInfo* info =
          MHD_get_connection_info(c, MHD_CONNECTION_INFO_CONNECTION_FD);
      conn->fd = info ? info->connect_fd : -1;
      impl.Restart(*conn);
      *socket_context = conn.get();
      const Connection* fresh = conn.get();
      impl.connections.emplace(conn.get(), std::move(conn));
      impl.ShedHeadless(fresh);
    } else if (*socket_context != nullptr) {
      auto* conn = static_cast<Connection*>(*socket_context);
      if (conn->dropped) --impl.dropped;
      impl.connections.erase(conn);
      *socket_context = nullptr;
    }
  }

  // MHD_OPTION_NOTIFY_COMPLETED: a request is done; the next one on a kept-alive connection
  // has its own deadline from now.
  static void OnCompleted(void* cls, MHD_Connection* c, void** con_cls,
                          MHD_RequestTerminationCode) {
    delete static_cast<RequestState*>(*con_cls);
    *con_cls = nullptr;
    Impl& impl = Of(cls);
    std::lock_guard lock(impl.mu);
    if (Connection* conn = ConnectionOf(c)) impl.Restart(*conn);
  }

  void MarkHead(MHD_Connection* c) {
    std::lock_guard lock(mu);
    if (Connection* conn = ConnectionOf(c)) conn->head = true;
  }

  void MarkComplete(MHD_Connection* c) {
    std::lock_guard lock(mu);
    if (Connection* conn = ConnectionOf(c)) conn->waiting = false;
  }

  // The head's checks, on the first call for a request (before any of the body is read).
  std::optional<HttpError> CheckHead(MHD_Connection* c, const char* url) const {
    HeadSize head{std::strlen(url) + 16, 0};
    MHD_get_connection_values(c, MHD_HEADER_KIND, CountHeader, &head);
    if (head.bytes > options.max_header_bytes || head.lines > kMaxHeaderLines)
      return HttpError{431, "request head too large (--max-header-kib, at most 100 lines)", "",
                       "invalid_request_error"};
    const char* length = MHD_lookup_connection_value(c, MHD_HEADER_KIND, "Content-Length");
    if (length != nullptr && std::strtoull(length, nullptr, 10) > options.max_body_bytes)
      return TooLarge();
    return std::nullopt;
  }

  std::unique_ptr<RequestState> NewRequest(MHD_Connection* c, const char* url) const {
    auto st = std::make_unique<RequestState>();
    st->refused = CheckHead(c, url);
    const std::string encoding =
        Lower(MHD_lookup_connection_value(c, MHD_HEADER_KIND, "Content-Encoding"));
    if (encoding == "gzip" || encoding == "x-gzip" || encoding == "deflate") {
      st->inflater = std::make_unique<Inflater>();
    } else if (!encoding.empty() && encoding != "identity" && !st->refused) {
      st->refused = HttpError{
          415, "Content-Encoding '" + encoding + "' is not supported (identity, gzip, deflate)", "",
          "invalid_request_error"};
    }
    return st;
  }

  // Takes one piece of the body. Past the limit the rest is still read (and dropped, within the
  // request deadline) so that the client, which is still sending, sees the 413 and not a reset.
  void TakeBody(RequestState& st, const char* data, size_t n) const {
    st.read += n;
    if (st.refused) return;
    const size_t limit = options.max_body_bytes;
    if (st.read > limit) {
      st.refused = TooLarge();
    } else if (st.inflater) {
      if (!st.inflater->Feed(data, n, st.body, limit))
        st.refused = HttpError{400, "body: malformed gzip/deflate data", "body"};
      else if (st.body.size() > limit)
        st.refused = TooLarge();
    } else {
      st.body.append(data, n);
    }
    if (st.refused) {
      st.body = std::string();
      st.inflater.reset();
    }
  }

  MHD_Result Respond(MHD_Connection* c, const HttpResponse& r) const {
    ResponsePtr resp;
    if (r.stream) {
      auto pipe = std::make_unique<StreamPipe>(c, static_cast<unsigned>(options.http_timeout_s));
      resp.reset(MHD_create_response_from_callback(MHD_SIZE_UNKNOWN, 16 << 10, StreamPipe::Read,
                                                   pipe.get(), StreamPipe::Free));
      if (!resp) return MHD_NO;
      pipe.release()->Start(r.stream);  // MHD owns it now (StreamPipe::Free)
    } else {
      resp.reset(MHD_create_response_from_buffer(r.body.size(), const_cast<char*>(r.body.data()),
                                                 MHD_RESPMEM_MUST_COPY));
    }
    if (!resp) return MHD_NO;
    MHD_add_response_header(resp.get(), "Content-Type", r.content_type.c_str());
    // On every response, JSON and errors included: a browser must never guess another type
    // (a body that quotes a request would otherwise be a way to run script on this origin).
    MHD_add_response_header(resp.get(), "X-Content-Type-Options", "nosniff");
    for (const auto& [name, value] : r.headers)
      MHD_add_response_header(resp.get(), name.c_str(), value.c_str());
    return MHD_queue_response(c, static_cast<unsigned>(r.status), resp.get());
  }

  HttpResponse Handle(MHD_Connection* c, const char* url, const char* method,
                      RequestState& st) const {
    HttpRequest req;
    req.method = method;
    req.path = url;
    req.body = std::move(st.body);
    req.refused = std::move(st.refused);
    if (req.refused == std::nullopt && st.inflater && !st.inflater->finished())
      req.refused = HttpError{400, "body: truncated gzip/deflate data", "body"};
    const MHD_ConnectionInfo* info = MHD_get_connection_info(c, MHD_CONNECTION_INFO_CONNECTION_FD);
    req.fd = info ? info->connect_fd : -1;
    req.header = [c](const char* name) {
      const char* v = MHD_lookup_connection_value(c, MHD_HEADER_KIND, name);
      return std::string(v ? v : "");
    };
    try {
      return handler(req);
    } catch (const std::exception& e) {
      HttpResponse r;
      r.status = 500;
      r.body = std::string(R"({"error":{"message":"internal error","type":"server_error",)") +
               R"("param":null,"code":500}})";
      std::fprintf(stderr, "primekv serve: %s %s: %s\n", method, url, e.what());
      return r;
    }
  }

  // MHD's access handler: called once with the head, once per piece of body, then once more
  // when the request is complete (upload_data_size 0).
  static MHD_Result OnRequest(void* cls, MHD_Connection* c, const char* url, const char* method,
                              const char*, const char* upload_data, size_t* upload_data_size,
                              void** con_cls) {
    Impl& impl = Of(cls);
    if (*con_cls == nullptr) {
      impl.MarkHead(c);
      std::unique_ptr<RequestState> st = impl.NewRequest(c, url);
      const char* expect = MHD_lookup_connection_value(c, MHD_HEADER_KIND, "Expect");
      *con_cls = st.release();
      // A client that waits for "100 Continue" has sent no body yet: refuse it at once.
      if (expect != nullptr && static_cast<RequestState*>(*con_cls)->refused) {
        impl.MarkComplete(c);
        return impl.Respond(c, impl.Handle(c, url, method, *static_cast<RequestState*>(*con_cls)));
      }
      return MHD_YES;
    }
    auto& st = *static_cast<RequestState*>(*con_cls);
    if (*upload_data_size > 0) {
      impl.TakeBody(st, upload_data, *upload_data_size);
      *upload_data_size = 0;
      return MHD_YES;
    }
    impl.MarkComplete(c);
    return impl.Respond(c, impl.Handle(c, url, method, st));
  }
};

namespace {

// Resolves --host (IPv4 or IPv6) with --port.
bool ResolveHost(const std::string& host, int port, sockaddr_storage& addr) {
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* found = nullptr;
  if (getaddrinfo(host.c_str(), nullptr, &hints, &found) != 0 || found == nullptr) return false;
  std::memcpy(&addr, found->ai_addr, found->ai_addrlen);
  freeaddrinfo(found);
  if (addr.ss_family == AF_INET) {
    reinterpret_cast<sockaddr_in&>(addr).sin_port = htons(static_cast<uint16_t>(port));
  } else if (addr.ss_family == AF_INET6) {
    reinterpret_cast<sockaddr_in6&>(addr).sin6_port = htons(static_cast<uint16_t>(port));
  } else {
    return false;
  }
  return true;
}

int BoundPort(MHD_Daemon* d) {
  const MHD_DaemonInfo* info = MHD_get_daemon_info(d, MHD_DAEMON_INFO_LISTEN_FD);
  sockaddr_storage addr{};
  socklen_t len = sizeof(addr);
  if (info == nullptr ||
      getsockname(info->listen_fd, reinterpret_cast<sockaddr*>(&addr), &len) != 0)
    return -1;
  if (addr.ss_family == AF_INET) return ntohs(reinterpret_cast<sockaddr_in&>(addr).sin_port);
  if (addr.ss_family == AF_INET6) return ntohs(reinterpret_cast<sockaddr_in6&>(addr).sin6_port);
  return -1;
}

}  // namespace

Result<std::unique_ptr<HttpTransport>> HttpTransport::Start(const ServerOptions& options,
                                                            HttpHandler handler) {
  auto impl = std::make_unique<Impl>();
  impl->options = options;
  impl->handler = std::move(handler);
  sockaddr_storage addr{};
  if (!ResolveHost(options.host, options.port, addr))
    return Status::Error("cannot resolve --host '" + options.host + "'");
  unsigned flags = MHD_USE_INTERNAL_POLLING_THREAD | MHD_USE_THREAD_PER_CONNECTION | MHD_USE_POLL |
                   MHD_USE_ERROR_LOG;
  if (addr.ss_family == AF_INET6) flags |= MHD_USE_IPv6;
  Impl* raw = impl.get();
  // One address may hold a quarter of the connections by default: a few hundred stalled sockets
  // from one client cannot fill the cap for everyone else.
  const int per_ip = options.max_connections_per_ip > 0 ? options.max_connections_per_ip
                                                        : std::max(1, options.max_connections / 4);
  impl->daemon.reset(MHD_start_daemon(
      flags, static_cast<uint16_t>(options.port), nullptr, nullptr, &Impl::OnRequest, raw,
      MHD_OPTION_SOCK_ADDR, reinterpret_cast<sockaddr*>(&addr), MHD_OPTION_CONNECTION_LIMIT,
      static_cast<unsigned>(options.max_connections), MHD_OPTION_PER_IP_CONNECTION_LIMIT,
      static_cast<unsigned>(per_ip), MHD_OPTION_CONNECTION_TIMEOUT,
      static_cast<unsigned>(options.http_timeout_s), MHD_OPTION_CONNECTION_MEMORY_LIMIT,
      static_cast<size_t>(options.max_header_bytes + kPoolSlack), MHD_OPTION_LISTEN_BACKLOG_SIZE,
      kListenBacklog, MHD_OPTION_NOTIFY_CONNECTION, &Impl::OnConnection, raw,
      MHD_OPTION_NOTIFY_COMPLETED, &Impl::OnCompleted, raw, MHD_OPTION_END));
  if (!impl->daemon)
    return Status::Error("cannot bind " + options.host + ":" + std::to_string(options.port));
  impl->port = BoundPort(impl->daemon.get());
  if (impl->port <= 0) return Status::Error("cannot read the bound port");
  return std::unique_ptr<HttpTransport>(new HttpTransport(std::move(impl)));
}

HttpTransport::HttpTransport(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
HttpTransport::~HttpTransport() = default;

int HttpTransport::port() const { return impl_->port; }

void HttpTransport::RunWatchdog() {
  for (;;) {
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
    const Clock::time_point now = Clock::now();
    std::lock_guard lock(impl_->mu);
    for (auto& [key, conn] : impl_->connections) {
      if (!conn->waiting || conn->dropped || conn->fd < 0) continue;
      if (now < conn->deadline && (conn->head || now < conn->head_deadline)) continue;
      impl_->Drop(*conn);
    }
  }
}

}  // namespace primekv::server
