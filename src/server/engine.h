// The engine of `primekv serve` (engine.cc): loading, and a request's way in (a slot, its
// session, its memory) and out, over the parts with their own headers: the session store
// (session_store.h), the KV budget (memory_budget.h), the slots (slots.h), the decode batcher
// (decode_batcher.h) and the metrics (server_metrics.h). The HTTP transport is http.cc
// (http.h); routes and request validation are server.cc.
#pragma once

#include <chrono>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <variant>

#include "primekv/model/model.h"
#include "primekv/server/server.h"
#include "primekv/session/session.h"
#include "server/http_error.h"
#include "server/memory_budget.h"
#include "server/server_metrics.h"
#include "server/slots.h"
#include "server/turn.h"

namespace primekv::server {

class DecodeBatcher;    // server/decode_batcher.h
class SessionStore;     // server/session_store.h
struct Accounted;       // server/session_store.h
struct RequestContext;  // server/request.h

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
  // Makes room for what appending `new_tokens` to `s`'s cache may add and takes it
  // (MemoryBudget::Reserve).
  std::variant<std::monostate, HttpError, Retry> ReserveMemory(
      Session& s, int new_tokens, bool restored, MemoryBudget::GiveWay give_way,
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
  // The model's lock, with the model: one forward pass or compression at a time (they share the
  // thread pool). The batcher's passes and the store's conversations (prefills, compressions)
  // take it; both go before it.
  std::mutex model_mutex_;
  std::unique_ptr<DecodeBatcher> batcher_;
  std::unique_ptr<SessionStore> store_;
};

}  // namespace primekv::server
