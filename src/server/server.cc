// The HTTP layer of `primekv serve`: routes, authentication, request validation, responses in
// the OpenAI shapes (JSON, or server-sent events when streaming).
#include <httplib.h>
#include <signal.h>

#include <atomic>
#include <cstdio>
#include <ctime>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "server/request.h"
#include "server/server_internal.h"

namespace primekv {

Status ValidateServerOptions(const ServerOptions& o) {
  if (o.model_path.empty()) return Status::Error("-m/--model is required");
  if (o.port < 0 || o.port > 65535) return Status::Error("--port must be in [0, 65535]");
  if (o.host.empty()) return Status::Error("--host must not be empty");
  if (!(o.ratio >= 0 && o.ratio < 1)) return Status::Error("--ratio must be in [0, 1)");
  if (o.slots < 1 || o.slots > 256) return Status::Error("--slots must be in [1, 256]");
  if (o.ctx_size < 0) return Status::Error("--ctx-size must be >= 0 (0 = the model's)");
  if (o.interval < 1) return Status::Error("--interval must be >= 1");
  if (o.kv_budget_bytes < (size_t{1} << 20)) return Status::Error("--kv-budget-mib must be >= 1");
  if (o.max_body_bytes < 1024) return Status::Error("--max-body-kib must be >= 1");
  if (o.default_max_tokens < 1) return Status::Error("--max-tokens must be >= 1");
  for (const std::string& key : o.api_keys)
    if (key.empty()) return Status::Error("--api-key must not be empty");
  if (o.mode != CompressionMode::kMultiTurn && o.mode != CompressionMode::kContext &&
      o.mode != CompressionMode::kDecode)
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

void SendError(httplib::Response& res, const HttpError& e) {
  res.status = e.status;
  res.set_content(Dump(ErrorJson(e)), "application/json");
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

  void Install(httplib::Server& svr) {
    const ServerOptions& o = engine_.options();
    svr.set_payload_max_length(o.max_body_bytes);
    const size_t threads = static_cast<size_t>(std::max(32, o.slots + 16));
    svr.new_task_queue = [threads] { return new httplib::ThreadPool(threads); };
    svr.set_pre_routing_handler([this](const httplib::Request& req, httplib::Response& res) {
      if (req.path == "/health") return httplib::Server::HandlerResponse::Unhandled;
      if (!TenantOfAuthorization(req.get_header_value("Authorization"),
                                 engine_.options().api_keys)) {
        SendError(res, {401, "missing or wrong API key (Authorization: Bearer KEY)", "",
                        "authentication_error"});
        return httplib::Server::HandlerResponse::Handled;
      }
      return httplib::Server::HandlerResponse::Unhandled;
    });
    svr.set_error_handler([](const httplib::Request&, httplib::Response& res) {
      if (!res.body.empty()) return;
      const char* why = res.status == 404   ? "no such endpoint"
                        : res.status == 413 ? "request body too large"
                                            : "bad request";
      SendError(res, {res.status, why, "", "invalid_request_error"});
    });
    svr.set_logger([this](const httplib::Request&, const httplib::Response& res) {
      engine_.CountRequest(res.status);
    });
    svr.Get("/health", [](const httplib::Request&, httplib::Response& res) {
      res.set_content(R"({"status":"ok"})", "application/json");
    });
    svr.Get("/metrics", [this](const httplib::Request&, httplib::Response& res) {
      res.set_content(engine_.MetricsText(), "text/plain; version=0.0.4");
    });
    svr.Get("/v1/models", [this](const httplib::Request&, httplib::Response& res) {
      const json j = {{"object", "list"}, {"data", {ModelJson()}}};
      res.set_content(Dump(j), "application/json");
    });
    svr.Get(R"(/v1/models/([^/]+))", [this](const httplib::Request& req, httplib::Response& res) {
      if (req.matches[1] != model_id_)
        return SendError(res, {404, "no model '" + std::string(req.matches[1]) + "' here", "model",
                               "model_not_found"});
      res.set_content(Dump(ModelJson()), "application/json");
    });
    svr.Post("/v1/chat/completions", [this](const httplib::Request& req, httplib::Response& res) {
      Handle(req, res, true);
    });
    svr.Post("/v1/completions", [this](const httplib::Request& req, httplib::Response& res) {
      Handle(req, res, false);
    });
  }

 private:
  json ModelJson() const {
    return {{"id", model_id_},
            {"object", "model"},
            {"created", 0},
            {"owned_by", "primekv"},
            {"context_length", engine_.ctx_size()}};
  }

  // What every response of one request shares.
  struct Reply {
    std::shared_ptr<ParsedRequest> p;
    std::shared_ptr<Turn> turn;
    std::string id;
    int64_t created = 0;
    std::string model;
    bool chat = false;
  };

  void Handle(const httplib::Request& req, httplib::Response& res, bool chat) {
    Parse parsed = ParseRequest(req.body, engine_.request_context(), chat);
    if (auto* err = std::get_if<HttpError>(&parsed)) return SendError(res, *err);
    Reply r;
    r.p = std::make_shared<ParsedRequest>(std::move(std::get<ParsedRequest>(parsed)));
    // The pre-routing check let only a known key (or no keys at all) this far.
    r.p->turn.tenant =
        TenantOfAuthorization(req.get_header_value("Authorization"), engine_.options().api_keys)
            .value_or(std::string());
    auto begun = engine_.Begin(r.p->turn);
    if (auto* err = std::get_if<HttpError>(&begun)) return SendError(res, *err);
    r.turn = std::move(std::get<std::unique_ptr<Turn>>(begun));
    r.id = std::string(chat ? "chatcmpl-" : "cmpl-") + r.turn->session_id() + "-" +
           std::to_string(++counter_);
    r.created = static_cast<int64_t>(std::time(nullptr));
    r.model = r.p->model.empty() ? model_id_ : r.p->model;
    r.chat = chat;
    res.set_header("X-PrimeKV-Session", r.turn->session_id());
    if (r.p->stream) return RespondStream(std::move(r), res);
    RespondJson(r, {req.remote_addr, req.remote_port, req.local_addr, req.local_port}, res);
  }

  void RespondJson(const Reply& r, const ConnectionAddress& from, httplib::Response& res) {
    // The client is looked for between decode steps, so one that leaves stops the generation.
    const int fd = r.p->turn.max_tokens > 0 ? FindConnectionSocket(from) : -1;
    AliveCheck alive;
    if (fd >= 0) alive = [fd] { return PeerConnected(fd); };
    auto out = r.turn->Run(nullptr, alive);
    if (!out.ok()) return SendError(res, {500, out.message(), "", "server_error"});
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
                    {"primekv", {{"answer_tokens", out->appended}}}};
    res.set_content(Dump(j), "application/json");
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

  static void RespondStream(Reply r, httplib::Response& res) {
    res.set_chunked_content_provider("text/event-stream", [r](size_t, httplib::DataSink& sink) {
      auto send = [&](const json& j) {
        const std::string m = "data: " + Dump(j) + "\n\n";
        return sink.write(m.data(), m.size());
      };
      bool alive = !r.chat || send(Chunk(r, {{"role", "assistant"}, {"content", ""}}, nullptr));
      auto out = r.turn->Run([&](const std::string& delta) {
        alive = alive && send(Chunk(r, r.chat ? json{{"content", delta}} : json(delta), nullptr));
        return alive;
      });
      if (!out.ok()) {
        send(ErrorJson({500, out.message(), "", "server_error"}));
      } else if (alive) {
        send(Chunk(r, json::object(), out->finish_reason));
        if (r.p->include_usage) {
          json u = Chunk(r, json::object(), nullptr);
          u["choices"] = json::array();
          u["usage"] = Usage(*out);
          send(u);
        }
      }
      const std::string done = "data: [DONE]\n\n";
      sink.write(done.data(), done.size());
      sink.done();
      return true;
    });
  }

  Engine& engine_;
  std::string model_id_;
  std::atomic<uint64_t> counter_{0};
};

Status WritePortFile(const std::string& path, int port) {
  const std::string tmp = path + ".tmp";
  {
    std::ofstream out(tmp);
    out << port << "\n";
    if (!out) return Status::Error("cannot write '" + tmp + "'");
  }
  std::error_code ec;
  std::filesystem::rename(tmp, path, ec);
  if (ec) return Status::Error("cannot write '" + path + "'");
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
  // (--session-dir), so stopping loses only turns in flight. (A sigwait thread cannot own
  // them: OpenBLAS starts its threads before main, with the signals unblocked.)
  signal(SIGPIPE, SIG_IGN);  // a client that goes away must not end the process

  auto engine = server::Engine::Create(options);
  if (!engine.ok()) {
    std::fprintf(stderr, "primekv serve: %s\n", engine.message().c_str());
    return 1;
  }
  httplib::Server svr;
  server::HttpServer http(**engine, std::filesystem::path(options.model_path).stem().string());
  http.Install(svr);
  int port = options.port;
  if (port == 0) {
    port = svr.bind_to_any_port(options.host);
  } else if (!svr.bind_to_port(options.host, port)) {
    port = -1;
  }
  if (port <= 0) {
    std::fprintf(stderr, "primekv serve: cannot bind %s:%d\n", options.host.c_str(), options.port);
    return 1;
  }
  if (!options.port_file.empty()) {
    if (Status s = server::WritePortFile(options.port_file, port); !s.ok()) {
      std::fprintf(stderr, "primekv serve: %s\n", s.message().c_str());
      return 1;
    }
  }
  std::fprintf(stderr, "primekv serve: listening on http://%s:%d (press %s, ratio %.2f, %s)\n",
               options.host.c_str(), port, options.press.c_str(), options.ratio,
               std::string(CompressionModeName(options.mode)).c_str());
  return svr.listen_after_bind() ? 0 : 1;
}

}  // namespace primekv
