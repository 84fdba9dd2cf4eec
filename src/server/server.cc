// The HTTP layer of `primekv serve`: routes, authentication, request validation, responses in
// the OpenAI shapes (JSON, or server-sent events when streaming).
#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <filesystem>
#include <nlohmann/json.hpp>

#include "primekv/press/press.h"
#include "server/cache_view.h"
#include "server/common.h"
#include "server/engine.h"
#include "server/http.h"
#include "server/request.h"
#include "server/session_backend.h"
#include "server/session_store.h"
#include "server/tenant.h"
#include "server/ui_assets.h"

namespace primekv {
namespace {

// A key that no Authorization header can carry is refused: header values lose the spaces around
// them and cannot hold control characters, so such a key would lock every client out.
Status CheckKey(const std::string& key, const std::string& flag) {
  if (key.empty()) return Status::Error(flag + " must not be empty");
  for (const char c : key) {
    const auto u = static_cast<unsigned char>(c);
    if (u < 0x20 || u == 0x7f)
      return Status::Error(flag + " must not contain control characters (no request can send it)");
  }
  if (key.front() == ' ' || key.back() == ' ')
    return Status::Error(flag + " must not begin or end with a space (no request can send it)");
  return Status::Ok();
}

// A file the server replaces by rename must be a regular file or absent: renaming over a device,
// FIFO, directory or link would replace that node (as root, /dev/null would become a file).
Status CheckOutputPath(const std::string& path, const std::string& flag) {
  struct stat st {};
  if (lstat(path.c_str(), &st) != 0) {
    if (errno == ENOENT) return Status::Ok();
    return Status::Error(flag + " '" + path + "': " + std::strerror(errno));
  }
  if (!S_ISREG(st.st_mode))
    return Status::Error(flag + " '" + path +
                         "' exists and is not a regular file (a device, FIFO, directory or link)");
  return Status::Ok();
}

}  // namespace

Status ValidateServerOptions(const ServerOptions& o) {
  if (o.model_path.empty()) return Status::Error("-m/--model is required");
  if (o.port < 0 || o.port > 65535) return Status::Error("--port must be in [0, 65535]");
  if (o.host.empty()) return Status::Error("--host must not be empty");
  if (!(o.ratio >= 0 && o.ratio < 1)) return Status::Error("--ratio must be in [0, 1)");
  if (o.slots < 1 || o.slots > 256) return Status::Error("--slots must be in [1, 256]");
  if (o.ctx_size < 0) return Status::Error("--ctx-size must be >= 0 (0 = the model's)");
  if (o.interval < 1) return Status::Error("--interval must be >= 1");
  if (o.kv_budget_bytes < (size_t{1} << 20)) return Status::Error("--kv-budget-mib must be >= 1");
  if (o.memory_wait_s < 0) return Status::Error("--memory-wait-s must be >= 0");
  if (o.max_body_bytes < 1024) return Status::Error("--max-body-kib must be >= 1");
  if (o.max_connections < 1) return Status::Error("--max-connections must be >= 1");
  if (o.http_timeout_s < 1) return Status::Error("--http-timeout-s must be >= 1");
  if (o.request_deadline_s < 1) return Status::Error("--request-deadline-s must be >= 1");
  if (o.max_header_bytes < 1024) return Status::Error("--max-header-kib must be >= 1");
  if (o.default_max_tokens < 1) return Status::Error("--max-tokens must be >= 1");
  for (const std::string& key : o.api_keys)
    if (Status s = CheckKey(key, "--api-key (or a line of --api-key-file)"); !s.ok()) return s;
  if (!o.metrics_key.empty()) {
    if (Status s = CheckKey(o.metrics_key, "--metrics-key"); !s.ok()) return s;
    for (const std::string& key : o.api_keys)
      if (key == o.metrics_key)
        return Status::Error(
            "--metrics-key must differ from every --api-key (it sees all tenants)");
  }
  if (o.max_connections_per_ip < 0 || o.max_connections_per_ip > o.max_connections)
    return Status::Error("--max-connections-per-ip must be in [0, --max-connections]");
  if (o.header_deadline_s < 1) return Status::Error("--header-deadline-s must be >= 1");
  if (o.tenant_kv_bytes != 0 && o.tenant_kv_bytes < (size_t{1} << 20))
    return Status::Error("--tenant-kv-mib must be >= 1 (or 0: an equal share)");
  if (!o.port_file.empty()) {
    if (Status s = CheckOutputPath(o.port_file, "--port-file"); !s.ok()) return s;
  }
  if (!o.session_store.empty()) {
    if (!o.session_dir.empty())
      return Status::Error("--session-dir and --session-store are alternatives; give one");
    if (auto a = server::ParseRedisUrl(o.session_store); !a.ok())
      return Status::Error("--session-store " + a.message());
  }
  if (o.store_ttl_s < 0) return Status::Error("--store-ttl-s must be >= 0 (0 = no expiry)");
  if (o.store_max_bytes < 1024) return Status::Error("--store-max-kib must be >= 1");
  if (o.mode != ScheduleMode::kMultiTurn && o.mode != ScheduleMode::kContext &&
      o.mode != ScheduleMode::kDecode)
    return Status::Error("--mode must be multiturn, context or decode");
  return Status::Ok();
}

namespace server {
namespace {

using nlohmann::json;

std::string Dump(const json& j) { return j.dump(-1, ' ', false, json::error_handler_t::replace); }

json ErrorJson(const HttpError& e) {
  return {{"error",
           {{"message", e.message},
            {"type", e.type},
            {"param", e.param.empty() ? json(nullptr) : json(e.param)},
            {"code", e.status}}}};
}

json Usage(const TurnOutcome& o) {
  return {{"prompt_tokens", o.prompt_tokens},
          {"completion_tokens", o.tokens.size()},
          {"total_tokens", o.prompt_tokens + static_cast<int>(o.tokens.size())},
          {"prompt_tokens_details", {{"cached_tokens", o.cached_tokens}}}};
}

class HttpServer {
 public:
  HttpServer(Engine& engine, std::string model_id) : engine_(engine), model_id_(model_id) {}

  // Every request the transport completes (or refuses) comes here.
  HttpResponse Serve(const HttpRequest& req) {
    HttpResponse res = Route(req);
    engine_.CountRequest(res.status);
    return res;
  }

 private:
  // What every response of one request shares.
  struct Reply {
    std::shared_ptr<ParsedRequest> p;
    std::shared_ptr<Turn> turn;
    std::string id;
    int64_t created = 0;
    std::string model;
    bool chat = false;
  };

  static HttpResponse Error(const HttpError& e) {
    HttpResponse res;
    res.status = e.status;
    res.body = Dump(ErrorJson(e));
    return res;
  }

  static HttpResponse Content(std::string body, std::string type = "application/json") {
    HttpResponse res;
    res.body = std::move(body);
    res.content_type = std::move(type);
    return res;
  }

  // The page's files need no key (a browser cannot send one to load them); what the page asks
  // for through the API does. Only this origin's scripts and styles may run or load there.
  std::optional<HttpResponse> UiFile(const HttpRequest& req) const {
    if (!engine_.options().ui || (req.method != "GET" && req.method != "HEAD")) return std::nullopt;
    for (const UiAsset& a : UiAssets()) {
      if (req.path != a.path) continue;
      HttpResponse res = Content(std::string(a.body), std::string(a.content_type));
      res.headers = {{"Content-Security-Policy",
                      "default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self'; "
                      "connect-src 'self'; object-src 'none'; base-uri 'none'; "
                      "form-action 'none'; frame-ancestors 'none'"},
                     {"Referrer-Policy", "no-referrer"},
                     {"Cache-Control", "no-cache"}};
      return res;
    }
    return std::nullopt;
  }

  // The presses the page offers: the registry, each marked whether this server runs it.
  HttpResponse Presses() const {
    const ServerOptions& o = engine_.options();
    json data = json::array();
    for (const PressInfo& p : ListPresses()) {
      const bool served = !CheckServedPress(p.name, o.ratio, "press").has_value();
      data.push_back({{"name", p.name},
                      {"summary", p.summary},
                      {"query_free", p.query_free},
                      {"served", served}});
    }
    const std::string mode(ScheduleModeName(o.mode));
    return Content(Dump({{"object", "list"},
                         {"data", data},
                         {"default", {{"press", o.press}, {"ratio", o.ratio}, {"mode", mode}}},
                         {"auto_profile", o.auto_profile},
                         {"modes", {mode}}}));
  }

  // GET /v1/sessions/{id}/cache: which entries the session's cache kept (cache_view.h).
  // Sent gzipped to a client that accepts it (every browser): a 32K-token session's 190 KB
  // of JSON becomes about 50 KB.
  HttpResponse SessionCache(const HttpRequest& req, const std::string& id,
                            const std::string& tenant) {
    if (!ValidSessionId(id)) return Error({404, "unknown session", "session", "not_found_error"});
    auto snap = engine_.store().Snapshot(tenant, id);
    if (auto* err = std::get_if<HttpError>(&snap)) return Error(*err);
    HttpResponse res = Content(
        CacheViewJson(std::get<SessionStore::CacheSnapshot>(snap), engine_.model().tokenizer()));
    res.headers.emplace_back("Vary", "Accept-Encoding");
    if (AcceptsGzip(req.header("Accept-Encoding"))) {
      if (std::string gz = GzipBody(res.body); !gz.empty()) {
        res.body = std::move(gz);
        res.headers.emplace_back("Content-Encoding", "gzip");
      }
    }
    return res;
  }

  // The tenant of the request's API key (empty without keys), hashed once per request; nullopt
  // when the key is missing or wrong. /health needs no key.
  std::optional<std::string> TenantOf(const HttpRequest& req) const {
    if (req.path == "/health") return std::string();
    return TenantOfAuthorization(req.header("Authorization"), engine_.options().api_keys);
  }

  json ModelJson() const {
    return {{"id", model_id_},
            {"object", "model"},
            {"created", 0},
            {"owned_by", "primekv"},
            {"context_length", engine_.ctx_size()}};
  }

  HttpResponse Route(const HttpRequest& req) {
    if (req.refused) return Error(*req.refused);
    if (req.path == "/metrics") return Metrics(req);
    if (auto file = UiFile(req)) return *file;
    const std::optional<std::string> tenant = TenantOf(req);
    if (!tenant)
      return Error({401, "missing or wrong API key (Authorization: Bearer KEY)", "",
                    "authentication_error"});
    const bool get = req.method == "GET" || req.method == "HEAD";
    const bool post = req.method == "POST";
    if (req.path == "/health" && get) return Content(R"({"status":"ok"})");
    if (req.path == "/v1/models" && get)
      return Content(Dump({{"object", "list"}, {"data", {ModelJson()}}}));
    constexpr std::string_view kModel = "/v1/models/";
    if (req.path.starts_with(kModel) && req.path.size() > kModel.size() && get) {
      const std::string id = req.path.substr(kModel.size());
      if (id != model_id_)
        return Error(
            {404, "no such model here (served: '" + model_id_ + "')", "model", "model_not_found"});
      return Content(Dump(ModelJson()));
    }
    if (req.path == "/v1/presses" && get) return Presses();
    if (const auto id = CacheViewSession(req.path); id && get)
      return SessionCache(req, *id, *tenant);
    if (req.path == "/v1/chat/completions" && post) return Handle(req, true, *tenant);
    if (req.path == "/v1/completions" && post) return Handle(req, false, *tenant);
    for (const char* path : {"/health", "/metrics", "/v1/models", "/v1/presses",
                             "/v1/chat/completions", "/v1/completions"})
      if (req.path == path) return Error({405, "method not allowed", "", "invalid_request_error"});
    return Error({404, "no such endpoint", "", "invalid_request_error"});
  }

  // /metrics counts every tenant's requests, tokens and sessions: with API keys only the
  // --metrics-key may read it (a tenant key gets 403); without keys it is open unless a
  // --metrics-key is set.
  HttpResponse Metrics(const HttpRequest& req) const {
    const ServerOptions& o = engine_.options();
    if (!o.metrics_key.empty() || !o.api_keys.empty()) {
      const std::string auth = req.header("Authorization");
      const bool admin =
          !o.metrics_key.empty() && TenantOfAuthorization(auth, {o.metrics_key}).has_value();
      if (!admin) {
        if (!o.api_keys.empty() && TenantOfAuthorization(auth, o.api_keys))
          return Error({403, "/metrics shows every tenant's activity: it needs the --metrics-key",
                        "", "permission_error"});
        return Error({401, "missing or wrong metrics key (Authorization: Bearer KEY)", "",
                      "authentication_error"});
      }
    }
    if (req.method != "GET" && req.method != "HEAD")
      return Error({405, "method not allowed", "", "invalid_request_error"});
    return Content(engine_.MetricsText(), "text/plain; version=0.0.4");
  }

  // Behind the proxy a client may name its session only in the header the proxy routes on
  // (deploy/haproxy.cfg); naming two different sessions is an error.
  static std::optional<HttpError> SessionFromHeader(const std::string& header,
                                                    std::string& session_id) {
    if (header.empty()) return std::nullopt;
    if (!ValidSessionId(header))
      return HttpError{400, "X-PrimeKV-Session is not a session id", "X-PrimeKV-Session"};
    if (session_id.empty()) {
      session_id = header;
    } else if (session_id != header) {
      return HttpError{400, "the session field and the X-PrimeKV-Session header differ", "session"};
    }
    return std::nullopt;
  }

  HttpResponse Handle(const HttpRequest& req, bool chat, const std::string& tenant) {
    Parse parsed = ParseRequest(req.body, engine_.request_context(), chat);
    if (auto* err = std::get_if<HttpError>(&parsed)) return Error(*err);
    Reply r;
    r.p = std::make_shared<ParsedRequest>(std::move(std::get<ParsedRequest>(parsed)));
    // OpenAI's convention: a model that is not served is 404, not answered by another one.
    if (!r.p->model.empty() && r.p->model != model_id_)
      return Error({404, "the requested model does not exist (served: '" + model_id_ + "')",
                    "model", "model_not_found"});
    // Random, not a counter: a response id must not count the other tenants' requests.
    auto response_id = RandomSessionId();
    if (!response_id.ok()) return Error({500, response_id.message(), "", "server_error"});
    if (auto err = SessionFromHeader(req.header("X-PrimeKV-Session"), r.p->turn.session_id))
      return Error(*err);
    r.p->turn.tenant = tenant;
    auto begun = engine_.Begin(r.p->turn);
    if (auto* err = std::get_if<HttpError>(&begun)) return Error(*err);
    r.turn = std::move(std::get<std::unique_ptr<Turn>>(begun));
    r.id = std::string(chat ? "chatcmpl-" : "cmpl-") + response_id->substr(1);
    r.created = static_cast<int64_t>(std::time(nullptr));
    r.model = model_id_;
    r.chat = chat;
    const std::string session_id = r.turn->session_id();
    HttpResponse res = r.p->stream ? RespondStream(std::move(r)) : RespondJson(r, req.fd);
    res.headers.emplace_back("X-PrimeKV-Session", session_id);
    return res;
  }

  HttpResponse RespondJson(const Reply& r, int fd) {
    // The client is looked for between decode steps, so one that leaves stops the generation.
    AliveCheck alive;
    if (fd >= 0 && r.p->turn.max_tokens > 0) alive = [fd] { return PeerConnected(fd); };
    auto out = r.turn->Run(nullptr, alive);
    if (!out.ok()) return Error({500, out.message(), "", "server_error"});
    json choice = {{"index", 0}, {"finish_reason", out->finish_reason}, {"logprobs", nullptr}};
    if (r.chat) {
      choice["message"] = {{"role", "assistant"}, {"content", out->text}};
    } else {
      choice["text"] = out->text;
    }
    const json j = {{"id", r.id},
                    {"object", r.chat ? "chat.completion" : "text_completion"},
                    {"created", r.created},
                    {"model", r.model},
                    {"choices", {choice}},
                    {"usage", Usage(*out)},
                    {"session", out->session_id},
                    {"primekv", Extension(*out)}};
    HttpResponse res = Content(Dump(j));
    if (out->saved) res.headers.emplace_back("X-PrimeKV-Saved", *out->saved ? "true" : "false");
    return res;
  }

  // The response's "primekv" field: the turn's token ids, and whether the store holds the turn
  // (only with a session store).
  static json Extension(const TurnOutcome& out) {
    json x = {{"answer_tokens", out.appended}, {"timings", Timings(out)}};
    if (out.saved) x["saved"] = *out.saved;
    return x;
  }

  static json Timings(const TurnOutcome& out) {
    return {{"prefill_ms", out.prefill_ms},
            {"compress_ms", out.compress_ms},
            {"decode_ms", out.decode_ms}};
  }

  static json Chunk(const Reply& r, json delta, json finish) {
    json choice = {{"index", 0}, {"finish_reason", finish}, {"logprobs", nullptr}};
    if (r.chat) {
      choice["delta"] = std::move(delta);
    } else {
      choice["text"] = delta.is_object() ? json("") : delta;
    }
    return json{
        {"id", r.id},           {"object", r.chat ? "chat.completion.chunk" : "text_completion"},
        {"created", r.created}, {"model", r.model},
        {"choices", {choice}},  {"session", r.turn->session_id()}};
  }

  // Server-sent events; the turn runs on the stream's own thread (the transport's).
  static HttpResponse RespondStream(Reply r) {
    HttpResponse res;
    res.content_type = "text/event-stream";
    res.stream = [r](const StreamWriter& write) {
      auto send = [&](const json& j) { return write("data: " + Dump(j) + "\n\n"); };
      bool alive = !r.chat || send(Chunk(r, {{"role", "assistant"}, {"content", ""}}, nullptr));
      auto out = r.turn->Run([&](const std::string& delta) {
        alive = alive && send(Chunk(r, r.chat ? json{{"content", delta}} : json(delta), nullptr));
        return alive;
      });
      if (!out.ok()) {
        send(ErrorJson({500, out.message(), "", "server_error"}));
      } else if (alive) {
        json last = Chunk(r, json::object(), out->finish_reason);
        last["primekv"] = {{"timings", Timings(*out)}};
        if (out->saved) last["primekv"]["saved"] = *out->saved;  // headers went out first
        send(last);
        if (r.p->include_usage) {
          json u = Chunk(r, json::object(), nullptr);
          u["choices"] = json::array();
          u["usage"] = Usage(*out);
          send(u);
        }
      }
      write("data: [DONE]\n\n");
    };
    return res;
  }

  Engine& engine_;
  std::string model_id_;
};

Status WritePortFile(const std::string& path, int port) {
  // Checked again here (the path may have changed since the start), and the temporary file is
  // a fresh one: created exclusively, never through a link.
  if (Status s = CheckOutputPath(path, "--port-file"); !s.ok()) return s;
  std::string tmp = path + ".XXXXXX";
  const int fd = mkstemp(tmp.data());
  if (fd < 0) return Status::Error("cannot write '" + path + "': " + std::strerror(errno));
  fchmod(fd, 0644);  // mkstemp's 0600 would hide the port from other users
  const std::string text = std::to_string(port) + "\n";
  const bool written = write(fd, text.data(), text.size()) == static_cast<ssize_t>(text.size());
  const bool closed = close(fd) == 0;
  if (!written || !closed || rename(tmp.c_str(), path.c_str()) != 0) {
    const std::string why = std::strerror(errno);
    unlink(tmp.c_str());
    return Status::Error("cannot write '" + path + "': " + why);
  }
  return Status::Ok();
}

}  // namespace
}  // namespace server

int RunServer(const ServerOptions& options) {
  if (Status s = ValidateServerOptions(options); !s.ok()) {
    std::fprintf(stderr, "primekv serve: %s\n", s.message().c_str());
    return 1;
  }
  // SIGINT/SIGTERM keep their default action: every completed turn is already on disk
  // (--session-dir) or was answered X-PrimeKV-Saved: false, so stopping loses only turns in
  // flight. (A sigwait thread cannot own
  // them: OpenBLAS starts its threads before main, with the signals unblocked.)
  signal(SIGPIPE, SIG_IGN);  // a client that goes away must not end the process

  auto engine = server::Engine::Create(options);
  if (!engine.ok()) {
    std::fprintf(stderr, "primekv serve: %s\n", engine.message().c_str());
    return 1;
  }
  server::HttpServer http(**engine, std::filesystem::path(options.model_path).stem().string());
  auto transport = server::HttpTransport::Start(
      options, [&http](const server::HttpRequest& req) { return http.Serve(req); });
  if (!transport.ok()) {
    std::fprintf(stderr, "primekv serve: %s\n", transport.message().c_str());
    return 1;
  }
  const int port = (*transport)->port();
  if (!options.port_file.empty()) {
    if (Status s = server::WritePortFile(options.port_file, port); !s.ok()) {
      std::fprintf(stderr, "primekv serve: %s\n", s.message().c_str());
      return 1;
    }
  }
  std::fprintf(stderr, "primekv serve: listening on http://%s:%d (press %s, ratio %.2f, %s)\n",
               options.host.c_str(), port, (*engine)->options().press.c_str(), options.ratio,
               std::string(ScheduleModeName(options.mode)).c_str());
  (*transport)->RunWatchdog();
}

}  // namespace primekv
