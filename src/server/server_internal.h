// Internals of `primekv serve`: the engine (engine.cc: loading, a request's way in and out) and
// turns (turn.cc), over parts with their own headers: the session store (session_store.h) of
// stored sessions (stored_session.h), the KV budget (memory_budget.h), the slots (slots.h), the
// decode batcher (decode_batcher.h) and the metrics (server_metrics.h). Also a client's
// connection (connection.cc); session files are the session module's (session/session_file.h). The
// HTTP transport is http.cc (http.h); routes and request validation are server.cc.
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <variant>
#include <vector>

#include "primekv/model/model.h"
#include "primekv/press/compressor.h"
#include "primekv/server/server.h"
#include "primekv/session/conversation.h"
#include "primekv/session/session.h"
#include "primekv/session/session_file.h"
#include "server/memory_budget.h"
#include "server/server_metrics.h"
#include "server/slots.h"
#include "server/stored_session.h"

namespace primekv::server {

// An error answered as {"error": {...}} with an HTTP status; `param` names the request field.
struct HttpError {
  int status = 400;
  std::string message;
  std::string param;
  std::string type = "invalid_request_error";
};

double SecondsSince(std::chrono::steady_clock::time_point t0);
// How many leading tokens two sequences share.
size_t CommonPrefix(const std::vector<Token>& a, const std::vector<Token>& b);

// A fresh session id: "s" and 128 bits from the kernel's random source in hex.
Result<std::string> RandomSessionId();

// A stored session whose last prompt begins a new conversation's prompt (a shared store's
// prefix index: SessionBackend::FindPrefix).
struct PrefixHit {
  std::string id;
  size_t length = 0;  // the stored session's last prompt length: the tokens the hit covers
};
// A tenant's name for an API key: the first 128 bits of its SHA-256 in hex, so session files
// and logs never hold the key itself.
std::string TenantId(const std::string& api_key);
// The tenant of an Authorization header ("Bearer KEY", the scheme in any case) among `keys`
// (each compared in constant time), or nullopt when it names none.
std::optional<std::string> TenantOfAuthorization(const std::string& header,
                                                 const std::vector<std::string>& keys);

// 409: the session answers another request, or waits for a slot to.
HttpError BusySession(const std::string& id);

// False once the peer of socket `fd` has closed its end or the connection failed; never blocks.
bool PeerConnected(int fd);

// One generation request after validation.
struct TurnRequest {
  std::vector<Token> prompt;
  std::string tenant;      // from the API key (TenantOfAuthorization)
  std::string cache_salt;  // prefix matching only among sessions made with the same salt
  std::string session_id;  // explicit `session`, or empty for prefix matching
  std::string press;       // press spec text
  double ratio = 0;
  int max_tokens = 0;
  std::string max_tokens_param = "max_tokens";  // the field that set it, for errors
  SamplerOptions sampler{0.0f, 0, 1.0f, 0};
  std::vector<std::string> stop;
};

struct TurnOutcome {
  std::string session_id;
  std::string text;
  std::vector<Token> tokens;    // the answer's ids, without an end-of-generation token
  std::vector<Token> appended;  // every id added to the session after the prompt (end included)
  std::string finish_reason;    // stop | length | cancelled
  int prompt_tokens = 0;
  int cached_tokens = 0;  // prompt tokens whose K/V came from the session (not prefilled)
  int prefilled_tokens = 0;
  // With a session store: whether the store holds this turn (false: a failed or refused save).
  std::optional<bool> saved;
  // Wall times: prefill without the compressions it ran, every compression of the turn, decode.
  double prefill_ms = 0, compress_ms = 0, decode_ms = 0;
};

// Returns false when the client is gone: generation stops.
using TextSink = std::function<bool(const std::string& delta)>;
// Asked before every decode step: false when the client is gone (generation stops).
using AliveCheck = std::function<bool()>;

class Engine;
class DecodeBatcher;    // server/decode_batcher.h
class SessionStore;     // server/session_store.h
struct Accounted;       // server/session_store.h
struct RequestContext;  // server/request.h

// A request that holds a slot, its session (busy) and its memory reservation until destroyed.
class Turn {
 public:
  Turn(Engine* engine, Session* session, TurnRequest request, int keep);
  Turn(const Turn&) = delete;
  Turn& operator=(const Turn&) = delete;
  ~Turn();
  const std::string& session_id() const;
  // Runs prefill and decode; `sink` (optional) receives text as it is generated, `alive`
  // (optional) says whether a non-streaming client is still there.
  Result<TurnOutcome> Run(const TextSink& sink, const AliveCheck& alive = nullptr);

 private:
  struct State;  // one Run's working state (engine.cc)
  Status Prefill(State& st);
  Status Decode(State& st, const TextSink& sink, const AliveCheck& alive);
  // Emits what is ready of st.out.text (held back while it could start a stop string).
  void Emit(State& st, const TextSink& sink, bool all);
  bool AppendText(State& st, Token next);
  Status EndTurn(State& st);
  void Record(const State& st, double compress_ms);

  Engine* engine_;
  Session* session_;
  TurnRequest req_;
  int keep_;               // session tokens kept (the rest of the prompt is prefilled)
  bool ran_ = false;       // Run completed
  bool modified_ = false;  // Run changed the session (if it then failed, the state is suspect)
};

// A request's way in (a slot, its session, its memory) and out, over the parts below, each of
// which owns its lock. Lock order: memory budget, then session store; slots, the decode batcher
// and the metrics never call another part.
class Engine {
 public:
  static Result<std::unique_ptr<Engine>> Create(const ServerOptions& options);
  ~Engine();

  const Model& model() const { return *model_; }
  const ServerOptions& options() const { return options_; }
  int ctx_size() const { return ctx_size_; }
  ChatFormat chat_format() const { return chat_format_; }
  ThreadPool& pool() { return *pool_; }
  SessionStore& store() { return *store_; }
  DecodeBatcher& batcher() { return *batcher_; }
  Metrics& metrics() { return metrics_; }

  // Checks a press spec and ratio (an error names the field `param`).
  std::optional<HttpError> CheckPress(const std::string& press, double ratio,
                                      const std::string& param) const;
  // What request parsing reads of this engine (server/request.h).
  RequestContext request_context() const;
  // Takes a slot (waits), finds or creates the session, reserves memory.
  std::variant<std::unique_ptr<Turn>, HttpError> Begin(TurnRequest request);
  // A turn on `s` ended (~Turn): its memory, its session and its slot are given back.
  void Finish(Session* s, bool ok, bool modified);
  std::string MetricsText();
  void CountRequest(int status) { metrics_.CountRequest(status); }

 private:
  explicit Engine(const ServerOptions& options);
  struct Retry {};  // the request gave way: it begins again once a turn has finished
  std::optional<HttpError> CheckFits(const TurnRequest& req) const;
  // One try of Begin, with a slot taken and Enter called on the budget.
  std::variant<std::unique_ptr<Turn>, HttpError, Retry> BeginOnce(
      TurnRequest& req, std::chrono::steady_clock::time_point deadline);
  // Makes room for `reserve` bytes for the turn on `s` and takes them (MemoryBudget::Reserve).
  std::variant<std::monostate, HttpError, Retry> ReserveMemory(
      Session& s, size_t reserve, bool restored, MemoryBudget::GiveWay give_way,
      std::chrono::steady_clock::time_point deadline);
  void Account(const Accounted& a);  // hands a store call's accounting to the budget

  ServerOptions options_;
  std::unique_ptr<Model> model_;
  std::unique_ptr<ThreadPool> pool_;
  int ctx_size_ = 0;
  ChatFormat chat_format_ = ChatFormat::kNone;
  KvCacheOptions kv_;
  Metrics metrics_;  // (before the parts that count in it)
  Slots slots_;
  MemoryBudget budget_;
  // (The store's conversations use the batcher's model mutex: the batcher outlives them.)
  std::unique_ptr<DecodeBatcher> batcher_;
  std::unique_ptr<SessionStore> store_;
};

}  // namespace primekv::server
