// The errors `primekv serve` answers, as {"error": {...}} with an HTTP status.
#pragma once

#include <string>

namespace primekv::server {

// An error answered as {"error": {...}} with an HTTP status; `param` names the request field.
struct HttpError {
  int status = 400;
  std::string message;
  std::string param;
  std::string type = "invalid_request_error";
};

// 409: the session answers another request, or waits for a slot to.
HttpError BusySession(const std::string& id);

}  // namespace primekv::server
