// A request body of `primekv serve` (untrusted JSON) to a validated turn request: every field
// checked, with the parameter named, before any work is done. Fuzzed by
// fuzz/server_request_fuzz.cc.
#pragma once

#include <optional>
#include <string>
#include <string_view>
#include <variant>

#include "primekv/server/server.h"
#include "primekv/session/session_file.h"
#include "primekv/tokenizer/tokenizer.h"
#include "server/http_error.h"
#include "server/turn_request.h"

namespace primekv::server {

// What parsing reads of the server: its options, the model's tokenizer, chat format and sizes.
struct RequestContext {
  const ServerOptions& options;
  const Tokenizer& tokenizer;
  ChatFormat chat_format = ChatFormat::kNone;
  int ctx_size = 0;
  int vocab_size = 0;
};

struct ParsedRequest {
  TurnRequest turn;
  bool stream = false;
  bool include_usage = false;
  std::string model;
};

using Parse = std::variant<ParsedRequest, HttpError>;

// The body of POST /v1/chat/completions (chat) or /v1/completions; never throws.
Parse ParseRequest(const std::string& body, const RequestContext& ctx, bool chat);

// The {id} of a GET /v1/sessions/{id}/cache path (not yet checked as a session id), or nullopt
// for any other path.
std::optional<std::string> CacheViewSession(std::string_view path);

// Whether `press` at `ratio` can be served (an error names the field `param`).
// `press` with profile=auto resolved to options.auto_profile (ServerOptions).
Result<std::string> ServedPress(const ServerOptions& options, const std::string& press);
std::optional<HttpError> CheckServedPress(const std::string& press, double ratio,
                                          const std::string& param);

}  // namespace primekv::server
