// `primekv serve`: an OpenAI-compatible HTTP server whose conversations keep their KV caches,
// compressed by a press, between turns (docs/server.md).
#pragma once

#include <cstddef>
#include <string>
#include <vector>

#include "primekv/gguf/gguf.h"
#include "primekv/session/session.h"

namespace primekv {

struct ServerOptions {
  std::string model_path;
  WeightMemory weight_memory = WeightMemory::kMapped;
  std::string host = "127.0.0.1";
  int port = 8080;  // 0 = any free port (printed, and written to port_file)
  std::string port_file;
  std::string press = "primekv";
  // The file a press's profile=auto names: set by Engine::Create (the profile beside the model,
  // or, when --press asks for profile=auto, the cached one); empty when there is none.
  std::string auto_profile;
  std::string chat_template;  // a built-in rendering by name; empty = the model's own template
  double ratio = 0.75;
  ScheduleMode mode = ScheduleMode::kMultiTurn;
  int interval = 512;  // kDecode: generated tokens between compressions
  int slots = 1;       // requests generating at once
  // Each key is a tenant: its sessions, their ids and prefix matching are seen by no other key.
  // Empty = no authentication (one tenant).
  std::vector<std::string> api_keys;
  // The key /metrics asks for when there are api_keys (figures of every tenant); empty: /metrics
  // is refused to tenants (403). Without api_keys /metrics is open unless this is set.
  std::string metrics_key;
  bool prefix_reuse = true;  // a request that names no session may continue one sharing its prefix
  bool ui = true;            // the web page at / (its files are compiled in); --no-ui: 404
  int ctx_size = 0;          // 0 = the model's context
  bool allow_ctx_overflow = false;  // ctx_size may exceed the trained context (warns)
  size_t kv_budget_bytes = size_t{256} << 20;
  // The most KV bytes one tenant's sessions may hold (0 = no fixed cap: a tenant over an equal
  // share of the budget among the tenants holding memory is evicted first).
  size_t tenant_kv_bytes = 0;
  // How long a request that does not fit the budget waits for running turns to release theirs
  // before it is answered 503 (a request alone that cannot fit is answered at once).
  int memory_wait_s = 60;
  std::string session_dir;  // empty = sessions live in memory only
  // redis://HOST[:PORT][/DB]: sessions in Redis, shared by replicas (instead of session_dir).
  std::string session_store;
  int store_ttl_s = 86400;                    // Redis expiry of a session (0 = none)
  size_t store_max_bytes = size_t{64} << 20;  // larger sessions are not stored
  size_t max_body_bytes = size_t{1} << 20;    // decompressed, chunked or not (413 past it)
  // HTTP limits (docs/server.md, Limits).
  int max_connections = 512;       // open connections, each served by its own thread
  int max_connections_per_ip = 0;  // from one client address (0 = a quarter of max_connections)
  int header_deadline_s = 10;      // the request head must arrive within this (and the deadline)
  int http_timeout_s = 30;         // idle connection: nothing read or written for this long
  int request_deadline_s = 30;     // the whole request (head and body) must arrive within this
  size_t max_header_bytes = size_t{32} << 10;  // request line and headers together (431)
  int threads = 0;
  int default_max_tokens = 256;
};

// Checks a --session-store address, redis://HOST[:PORT][/DB] (a message naming the flag, or OK).
Status ValidateSessionStoreUrl(const std::string& url);

// Validates the options (a message naming the option, or OK).
Status ValidateServerOptions(const ServerOptions& options);

// Loads the model, binds, and serves until the process is stopped (SIGINT/SIGTERM end it; every
// completed turn is already saved). Returns the process exit code on failure to start.
int RunServer(const ServerOptions& options);

}  // namespace primekv
