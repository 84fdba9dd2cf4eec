// The HTTP layer of `primekv serve`: routes, authentication, request validation, responses in
// the OpenAI shapes (JSON, or server-sent events when streaming).
#include <signal.h>

#include <atomic>
#include <climits>
#include <cstdio>
#include <ctime>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "server/http.h"
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
  if (o.max_connections < 1) return Status::Error("--max-connections must be >= 1");
  if (o.http_timeout_s < 1) return Status::Error("--http-timeout-s must be >= 1");
  if (o.request_deadline_s < 1) return Status::Error("--request-deadline-s must be >= 1");
  if (o.max_header_bytes < 1024) return Status::Error("--max-header-kib must be >= 1");
  if (o.default_max_tokens < 1) return Status::Error("--max-tokens must be >= 1");
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

// Deeply nested JSON is refused before parsing (recursion in the JSON library's tree).
bool NestingTooDeep(const std::string& body, int limit) {
  int depth = 0;
  bool in_string = false, escape = false;
  for (char c : body) {
    if (in_string) {
      if (escape)
        escape = false;
      else if (c == '\\')
        escape = true;
      else if (c == '"')
        in_string = false;
    } else if (c == '"') {
      in_string = true;
    } else if (c == '[' || c == '{') {
      if (++depth > limit) return true;
    } else if (c == ']' || c == '}') {
      --depth;
    }
  }
  return false;
}

bool ConstantTimeEqual(const std::string& a, const std::string& b) {
  if (a.size() != b.size()) return false;
  unsigned char diff = 0;
  for (size_t i = 0; i < a.size(); ++i) diff |= static_cast<unsigned char>(a[i] ^ b[i]);
  return diff == 0;
}

struct ParsedRequest {
  TurnRequest turn;
  bool stream = false;
  bool include_usage = false;
  std::string model;
};

using Parse = std::variant<ParsedRequest, HttpError>;

HttpError Bad(const std::string& param, const std::string& why) {
  return HttpError{400, param + ": " + why, param};
}

// temperature, top_p, seed.
std::optional<HttpError> ParseSampling(const json& j, ParsedRequest& p) {
  float temperature = 1.0f;
  if (j.contains("temperature") && !j["temperature"].is_null()) {
    const json& t = j["temperature"];
    if (!t.is_number() || t.get<double>() < 0 || t.get<double>() > 2)
      return Bad("temperature", "must be a number in [0, 2]");
    temperature = t.get<float>();
  }
  float top_p = 1.0f;
  if (j.contains("top_p") && !j["top_p"].is_null()) {
    const json& t = j["top_p"];
    if (!t.is_number() || !(t.get<double>() > 0) || t.get<double>() > 1)
      return Bad("top_p", "must be a number in (0, 1]");
    top_p = t.get<float>();
  }
  uint64_t seed = 0;
  if (j.contains("seed") && !j["seed"].is_null()) {
    if (!j["seed"].is_number_integer()) return Bad("seed", "must be an integer");
    seed = j["seed"].is_number_unsigned() ? j["seed"].get<uint64_t>()
                                          : static_cast<uint64_t>(j["seed"].get<int64_t>());
  }
  p.turn.sampler = SamplerOptions{temperature, 0, top_p, seed};
  return std::nullopt;
}

// max_tokens / max_completion_tokens, n, stop.
std::optional<HttpError> ParseLimits(const json& j, const ServerOptions& o, ParsedRequest& p) {
  int64_t max_tokens = o.default_max_tokens;
  bool explicit_max = false;
  for (const char* key : {"max_tokens", "max_completion_tokens"}) {
    if (!j.contains(key) || j[key].is_null()) continue;
    const json& m = j[key];
    if (!m.is_number_integer()) return Bad(key, "must be an integer");
    if (m.is_number_unsigned() ? m.get<uint64_t>() > INT_MAX : m.get<int64_t>() > INT_MAX)
      return HttpError{400, std::string(key) + ": exceeds the context", key,
                       "context_length_exceeded"};
    // 0 is an extension: prefill (and compress) the prompt into its session, generate nothing.
    if (m.get<int64_t>() < 0) return Bad(key, "must be >= 0");
    max_tokens = m.get<int64_t>();
    explicit_max = true;
  }
  p.turn.max_tokens = static_cast<int>(max_tokens);
  if (!explicit_max) p.turn.max_tokens = -1;  // filled in by the caller from the context left
  if (j.contains("n") && !j["n"].is_null() && j["n"] != 1) return Bad("n", "only n = 1 is served");
  if (j.contains("stop") && !j["stop"].is_null()) {
    const json& s = j["stop"];
    std::vector<json> items =
        s.is_array() ? std::vector<json>(s.begin(), s.end()) : std::vector<json>{s};
    if (items.size() > 4) return Bad("stop", "at most 4 stop strings");
    for (const json& it : items) {
      if (!it.is_string() || it.get<std::string>().empty() || it.get<std::string>().size() > 256)
        return Bad("stop", "must be a string or an array of non-empty strings (<= 256 bytes)");
      p.turn.stop.push_back(it.get<std::string>());
    }
  }
  return std::nullopt;
}

// stream, stream_options, session.
std::optional<HttpError> ParseStreamAndSession(const json& j, ParsedRequest& p) {
  if (j.contains("stream") && !j["stream"].is_null()) {
    if (!j["stream"].is_boolean()) return Bad("stream", "must be a boolean");
    p.stream = j["stream"].get<bool>();
  }
  if (j.contains("stream_options") && !j["stream_options"].is_null()) {
    const json& so = j["stream_options"];
    if (!so.is_object()) return Bad("stream_options", "must be an object");
    if (so.contains("include_usage")) {
      if (!so["include_usage"].is_boolean())
        return Bad("stream_options.include_usage", "must be a boolean");
      p.include_usage = so["include_usage"].get<bool>();
    }
  }
  if (j.contains("session") && !j["session"].is_null()) {
    if (!j["session"].is_string() || !ValidSessionId(j["session"].get<std::string>()))
      return Bad("session", "must be a session id ([A-Za-z0-9_-], 1 to 64 characters)");
    p.turn.session_id = j["session"].get<std::string>();
  }
  return std::nullopt;
}

// The "primekv": {"press", "ratio"} extension over the server's defaults.
std::optional<HttpError> ParsePress(const json& j, Engine& engine, ParsedRequest& p) {
  p.turn.press = engine.options().press;
  p.turn.ratio = engine.options().ratio;
  if (!j.contains("primekv") || j["primekv"].is_null()) return std::nullopt;
  const json& x = j["primekv"];
  if (!x.is_object()) return Bad("primekv", "must be an object {press, ratio}");
  for (const auto& [key, value] : x.items()) {
    if (key == "press") {
      if (!value.is_string()) return Bad("primekv.press", "must be a string");
      p.turn.press = value.get<std::string>();
    } else if (key == "ratio") {
      if (!value.is_number()) return Bad("primekv.ratio", "must be a number");
      p.turn.ratio = value.get<double>();
    } else {
      return Bad("primekv." + key, "unknown field (known: press, ratio)");
    }
  }
  if (auto err = engine.CheckPress(p.turn.press, p.turn.ratio, "primekv")) {
    err->message = "primekv: " + err->message;
    return err;
  }
  return std::nullopt;
}

// Fields common to chat and completions.
std::optional<HttpError> ParseCommon(const json& j, Engine& engine, ParsedRequest& p) {
  if (j.contains("model")) {
    if (!j["model"].is_string()) return Bad("model", "must be a string");
    p.model = j["model"].get<std::string>();
  }
  if (auto err = ParseSampling(j, p)) return err;
  if (auto err = ParseLimits(j, engine.options(), p)) return err;
  if (auto err = ParseStreamAndSession(j, p)) return err;
  return ParsePress(j, engine, p);
}

void FillMaxTokens(ParsedRequest& p, const Engine& engine) {
  if (p.turn.max_tokens >= 0) return;
  const int left = engine.ctx_size() - static_cast<int>(p.turn.prompt.size());
  p.turn.max_tokens = std::max(1, std::min(engine.options().default_max_tokens, left));
}

Parse ParseChat(const json& j, Engine& engine) {
  ParsedRequest p;
  if (!j.contains("messages")) return Bad("messages", "is required");
  const json& m = j["messages"];
  if (!m.is_array() || m.empty() || m.size() > 4096)
    return Bad("messages", "must be a non-empty array (at most 4096 messages)");
  std::vector<ChatMessage> messages;
  for (size_t i = 0; i < m.size(); ++i) {
    const std::string at = "messages[" + std::to_string(i) + "]";
    const json& msg = m[i];
    if (!msg.is_object()) return Bad(at, "must be an object");
    if (!msg.contains("role") || !msg["role"].is_string())
      return Bad(at + ".role", "must be a string");
    std::string role = msg["role"].get<std::string>();
    if (role == "developer") role = "system";
    if (role != "system" && role != "user" && role != "assistant")
      return Bad(at + ".role", "must be system, user or assistant");
    if (!msg.contains("content")) return Bad(at + ".content", "is required");
    const json& c = msg["content"];
    std::string text;
    if (c.is_string()) {
      text = c.get<std::string>();
    } else if (c.is_array()) {
      for (const json& part : c) {
        if (!part.is_object() || part.value("type", "") != "text" || !part.contains("text") ||
            !part["text"].is_string())
          return Bad(at + ".content", "parts must be {\"type\": \"text\", \"text\": string}");
        text += part["text"].get<std::string>();
      }
    } else {
      return Bad(at + ".content", "must be a string or an array of text parts");
    }
    messages.push_back({role, text});
  }
  if (auto err = ParseCommon(j, engine, p)) return *err;
  const std::string rendered = ApplyChatTemplate(engine.chat_format(), messages, true);
  p.turn.prompt = engine.model().tokenizer().Encode(rendered, true, true);
  FillMaxTokens(p, engine);
  return p;
}

Parse ParseCompletion(const json& j, Engine& engine) {
  ParsedRequest p;
  if (!j.contains("prompt")) return Bad("prompt", "is required");
  const json& pr = j["prompt"];
  std::string prompt;
  std::vector<Token> ids;
  const int vocab = engine.model().config().vocab_size;
  if (pr.is_string()) {
    prompt = pr.get<std::string>();
  } else if (pr.is_array() && pr.size() == 1 && pr[0].is_string()) {
    prompt = pr[0].get<std::string>();
  } else if (pr.is_array() && !pr.empty() && pr[0].is_number()) {
    // Token ids, taken as they are (no BOS added), as the OpenAI API allows.
    for (const json& t : pr) {
      if (!t.is_number_integer() || t.get<int64_t>() < 0 || t.get<int64_t>() >= vocab)
        return Bad("prompt", "token ids must be integers in [0, " + std::to_string(vocab) + ")");
      ids.push_back(static_cast<Token>(t.get<int64_t>()));
    }
  } else {
    return Bad("prompt", "must be a string, an array of one string, or an array of token ids");
  }
  if (j.contains("echo") && j["echo"] == true) return Bad("echo", "is not supported");
  if (auto err = ParseCommon(j, engine, p)) return *err;
  p.turn.prompt = ids.empty() ? engine.model().tokenizer().Encode(prompt, true, false) : ids;
  FillMaxTokens(p, engine);
  return p;
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

  // The API key, on every endpoint but /health; `authorization` is that header's value.
  std::optional<HttpError> CheckAuth(const std::string& path,
                                     const std::string& authorization) const {
    const std::string& key = engine_.options().api_key;
    if (key.empty() || path == "/health") return std::nullopt;
    if (!ConstantTimeEqual(authorization, "Bearer " + key))
      return HttpError{401, "missing or wrong API key (Authorization: Bearer KEY)", "",
                       "authentication_error"};
    return std::nullopt;
  }

  HttpResponse Route(const HttpRequest& req) {
    if (req.refused) return Error(*req.refused);
    if (auto err = CheckAuth(req.path, req.header("Authorization"))) return Error(*err);
    const bool get = req.method == "GET" || req.method == "HEAD";
    const bool post = req.method == "POST";
    if (req.path == "/health" && get) return Content(R"({"status":"ok"})");
    if (req.path == "/metrics" && get)
      return Content(engine_.MetricsText(), "text/plain; version=0.0.4");
    if (req.path == "/v1/models" && get) {
      const json j = {{"object", "list"},
                      {"data",
                       {{{"id", model_id_},
                         {"object", "model"},
                         {"created", 0},
                         {"owned_by", "primekv"},
                         {"context_length", engine_.ctx_size()}}}}};
      return Content(Dump(j));
    }
    if (req.path == "/v1/chat/completions" && post) return Handle(req, true);
    if (req.path == "/v1/completions" && post) return Handle(req, false);
    for (const char* path :
         {"/health", "/metrics", "/v1/models", "/v1/chat/completions", "/v1/completions"})
      if (req.path == path) return Error({405, "method not allowed", "", "invalid_request_error"});
    return Error({404, "no such endpoint", "", "invalid_request_error"});
  }

  HttpResponse Handle(const HttpRequest& req, bool chat) {
    if (NestingTooDeep(req.body, 64)) return Error(Bad("body", "JSON nested too deeply"));
    const json j = json::parse(req.body, nullptr, false);
    if (j.is_discarded()) return Error(Bad("body", "malformed JSON"));
    if (!j.is_object()) return Error(Bad("body", "must be a JSON object"));
    Parse parsed = chat ? ParseChat(j, engine_) : ParseCompletion(j, engine_);
    if (auto* err = std::get_if<HttpError>(&parsed)) return Error(*err);
    Reply r;
    r.p = std::make_shared<ParsedRequest>(std::move(std::get<ParsedRequest>(parsed)));
    auto begun = engine_.Begin(r.p->turn);
    if (auto* err = std::get_if<HttpError>(&begun)) return Error(*err);
    r.turn = std::move(std::get<std::unique_ptr<Turn>>(begun));
    r.id = std::string(chat ? "chatcmpl-" : "cmpl-") + r.turn->session_id() + "-" +
           std::to_string(++counter_);
    r.created = static_cast<int64_t>(std::time(nullptr));
    r.model = r.p->model.empty() ? model_id_ : r.p->model;
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
                    {"primekv", {{"answer_tokens", out->appended}}}};
    return Content(Dump(j));
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
        send(Chunk(r, json::object(), out->finish_reason));
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
               options.host.c_str(), port, options.press.c_str(), options.ratio,
               std::string(CompressionModeName(options.mode)).c_str());
  (*transport)->RunWatchdog();
}

}  // namespace primekv
