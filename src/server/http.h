// The HTTP transport of `primekv serve` (http.cc): GNU libmicrohttpd, one thread per connection,
// with the limits of docs/server.md (Limits) enforced before a request reaches the handler.
// Routes, authentication and the OpenAI shapes are server.cc's.
#pragma once

#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "primekv/server/server.h"
#include "primekv/util/status.h"
#include "server/http_error.h"

namespace primekv::server {

// A complete request: its head and its body (decompressed, within --max-body-kib).
struct HttpRequest {
  std::string method;
  std::string path;
  std::string body;
  // Set when the transport refused the request (413 body too large, 415 encoding, 431 head,
  // 400 bad gzip): the handler answers it as an error without looking at the body.
  std::optional<HttpError> refused;
  int fd = -1;  // the connection's socket, for PeerConnected
  std::function<std::string(const char* name)> header;  // "" when absent
};

// Writes one piece of a streamed response; false once the client is gone.
using StreamWriter = std::function<bool(std::string_view data)>;

struct HttpResponse {
  int status = 200;
  std::string content_type = "application/json";
  std::vector<std::pair<std::string, std::string>> headers;
  std::string body;
  // When set, the response is streamed (chunked): `stream` runs on a thread of its own and
  // writes through the writer until it returns.
  std::function<void(const StreamWriter&)> stream;
};

using HttpHandler = std::function<HttpResponse(const HttpRequest&)>;

// Whether an Accept-Encoding value accepts gzip (a "gzip" coding whose q is not 0).
bool AcceptsGzip(std::string_view accept_encoding);
// `body` in gzip's format (zlib's default level), for a client that accepts it.
std::string GzipBody(std::string_view body);

class HttpTransport {
 public:
  // Binds options.host:options.port and starts serving with `handler`.
  static Result<std::unique_ptr<HttpTransport>> Start(const ServerOptions& options,
                                                      HttpHandler handler);
  ~HttpTransport();
  HttpTransport(const HttpTransport&) = delete;
  HttpTransport& operator=(const HttpTransport&) = delete;

  int port() const;
  // Drops connections whose request is not complete by its deadline; never returns.
  [[noreturn]] void RunWatchdog();

 private:
  struct Impl;
  explicit HttpTransport(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace primekv::server
