// Internals of `primekv serve`: the engine (engine.cc: loading, a request's way in and out),
// the session store (session_store.cc), the KV budget (memory_budget.cc), turns (turn.cc), the
// decode batcher (decode_batcher.cc), metrics (server_metrics.cc), session files
// (session_file.cc), a client's connection (connection.cc). The HTTP transport is http.cc
// (http.h); routes and request validation are server.cc.
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
#include "primekv/server/session_file.h"
#include "primekv/session/pipeline.h"
#include "primekv/session/session.h"

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
// A tenant's name for an API key: the first 128 bits of its SHA-256 in hex, so session files
// and logs never hold the key itself.
std::string TenantId(const std::string& api_key);
// The tenant of an Authorization header ("Bearer KEY", the scheme in any case) among `keys`
// (each compared in constant time), or nullopt when it names none.
std::optional<std::string> TenantOfAuthorization(const std::string& header,
                                                 const std::vector<std::string>& keys);

// The bytes of a session file (what the Redis store keeps as the value), and their check.
Result<std::string> SerializeSession(const SessionSnapshot& s, const KvCache& c);
Result<SessionSnapshot> ParseSessionImage(std::string_view image, const Model& model,
                                          const KvCacheOptions& kv);

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
};

// Returns false when the client is gone: generation stops.
using TextSink = std::function<bool(const std::string& delta)>;
// Asked before every decode step: false when the client is gone (generation stops).
using AliveCheck = std::function<bool()>;

class Engine;
class SessionBackend;   // server/session_backend.h
struct RequestContext;  // server/request.h
struct Session;         // a stored conversation, below (not primekv::Session)

// A request that holds a slot, its session (busy) and its memory reservation until destroyed.
class Turn {
 public:
  Turn(Engine* engine, Session* session, size_t reserved, TurnRequest request, int keep);
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

  Engine* engine_;
  Session* session_;
  size_t reserved_;
  TurnRequest req_;
  int keep_;               // session tokens kept (the rest of the prompt is prefilled)
  bool ran_ = false;       // Run completed
  bool modified_ = false;  // Run changed the session (if it then failed, the state is suspect)
};

// A stored conversation (primekv::Session is the schedule and decode loop a turn runs on it).
struct Session {
  std::string id;
  std::string tenant;
  std::string cache_salt;
  std::string press;
  double ratio = 0;
  int budget = 0;
  int last_prompt_len = 0;
  std::vector<Token> tokens;       // every token whose K/V went into the cache, in order
  std::unique_ptr<KvCache> cache;  // null while evicted to disk
  std::unique_ptr<PressCapture> capture;
  uint64_t turn = 0;  // completed turns (the store's compare-and-set counter)
  bool busy = false;
  bool claimed = false;    // a request naming it waits for a slot (another one gets 409 at once)
  bool persisted = false;  // the store (file or Redis) holds its last completed turn
  bool load = false;       // known by id only: its tokens and cache are read from the store
  uint64_t last_used = 0;
  size_t bytes = 0;     // accounted against the budget
  size_t reserved = 0;  // what its running turn reserved (accounted too)
};

class Engine {
 public:
  static Result<std::unique_ptr<Engine>> Create(const ServerOptions& options);
  ~Engine();

  const Model& model() const { return *model_; }
  const ServerOptions& options() const { return options_; }
  int ctx_size() const { return ctx_size_; }
  ChatFormat chat_format() const { return chat_format_; }

  // Checks a press spec and ratio (an error names the field `param`).
  std::optional<HttpError> CheckPress(const std::string& press, double ratio,
                                      const std::string& param) const;
  // What request parsing reads of this engine (server/request.h).
  RequestContext request_context() const;
  // Takes a slot (waits), finds or creates the session, reserves memory.
  std::variant<std::unique_ptr<Turn>, HttpError> Begin(TurnRequest request);
  std::string MetricsText();
  void CountRequest(int status);

 private:
  friend class Turn;
  struct DecodeJob;
  explicit Engine(const ServerOptions& options);
  // Steps of Begin.
  std::optional<HttpError> CheckFits(const TurnRequest& req) const;
  void TakeSlot();
  void GiveSlot();
  // The session a turn runs on: the one the request names (continued in place), or a new one,
  // which starts from a copy of `source`'s first `keep` tokens when the request shares them
  // with a session of its tenant and salt (prefix reuse never changes that session). Both are
  // marked busy.
  struct Found {
    Session* session = nullptr;
    Session* source = nullptr;
    size_t keep = 0;
  };
  std::variant<Found, HttpError> FindSessionLocked(const TurnRequest& req);
  Session* BestPrefixLocked(const TurnRequest& req, size_t& keep);
  // The copy of source's first `keep` tokens into `s`; keep becomes 0 when the source cannot be
  // read back from its file (the request then starts afresh).
  void CopyPrefix(Session& s, Session& source, const std::vector<Token>& prompt, size_t& keep);
  // Reads an evicted session, or one known by id only, back from the store (on failure the
  // session is dropped).
  std::optional<HttpError> RestoreIfEvicted(Session& s, bool& restored);
  // A shared store holds a newer turn of `s` than this replica (another replica served it):
  // the local copy is dropped and the session is read from the store.
  void DropIfBehind(Session& s);
  // How a request waiting for memory can give way when every beginning request waits on the
  // others and no turn runs: a new session is forgotten (the request begins again from the
  // store), a stored one drops its cache (its file is current); otherwise it cannot.
  enum class GiveWay { kNo, kForget, kDropCache };
  struct Retry {};  // the request gave way: it begins again once a turn has finished
  // Makes room for `reserve` more bytes (evicting, waiting for running turns and for the other
  // beginning requests) and takes them, by `deadline`.
  std::variant<std::monostate, Retry, HttpError> ReserveMemory(
      Session& s, size_t reserve, bool restored, GiveWay give_way,
      std::chrono::steady_clock::time_point deadline);
  const Compressor& CompressorFor(const std::string& press);  // under store_mu_
  void IndexSessionDir();
  // Evicts one idle session for a request of `tenant`: of a tenant over its share first, else
  // the tenant's own (only its own when `own_only`). False when there is none.
  bool EvictOneLocked(const Session* except, const std::string& tenant, bool own_only);
  // Bytes each tenant holds (sessions and running turns' reservations).
  std::map<std::string, size_t> TenantBytesLocked() const;
  // A tenant's share: --tenant-kv-mib, or the budget over the tenants holding memory (and the
  // requester's).
  size_t TenantShareLocked(const std::map<std::string, size_t>& held,
                           const std::string& tenant) const;
  // Whether `tenant` may hold `more` bytes under --tenant-kv-mib (always without it).
  bool TenantFitsLocked(const std::string& tenant, size_t more) const;
  HttpError RefuseMemoryLocked(Session& s, size_t reserve, bool restored);
  // Frees a session's cache and its bytes in the budget; its tokens stay, so the next request
  // reads it back from the store.
  void DropCacheLocked(Session& s);
  // Removes a session and its bytes from the budget (`s` is destroyed).
  void ForgetLocked(Session& s);
  Status Persist(Session& s);
  void Finish(Session* s, size_t reserved, bool ok, bool modified);

  // Batched decode: every running turn hands its next token to DecodeStep, and one forward pass
  // (Model::ForwardDecodeBatch) runs the tokens of all turns that are waiting, once each turn in
  // its decode loop has handed its token in, or a step's time after the first one was.
  Status DecodeStep(const DecodeSlot& slot, std::span<float> logits);
  void RunBatchLocked(std::unique_lock<std::mutex>& lock);
  void EnterDecode();
  void LeaveDecode();

  ServerOptions options_;
  std::unique_ptr<Model> model_;
  std::unique_ptr<SessionBackend> backend_;  // null: sessions live in memory only
  std::unique_ptr<ThreadPool> pool_;
  int ctx_size_ = 0;
  ChatFormat chat_format_ = ChatFormat::kNone;
  KvCacheOptions kv_;

  std::mutex model_mu_;         // one forward pass or compression at a time (shared thread pool)
  ForwardWorkspace decode_ws_;  // under model_mu_
  std::vector<float> batch_logits_;      // under model_mu_
  std::vector<DecodeSlot> batch_slots_;  // under model_mu_

  std::mutex batch_mu_;  // the decode queue below
  std::condition_variable batch_cv_;
  std::vector<DecodeJob*> pending_;
  std::vector<DecodeJob*> batch_jobs_;  // the running batch's jobs (its leader's only)
  int decoders_ = 0;                    // turns in their decode loop
  bool batch_running_ = false;
  double last_batch_seconds_ = 0;
  std::chrono::steady_clock::time_point last_batch_end_;
  uint64_t decode_batches_ = 0, decode_batch_rows_ = 0;
  std::mutex slot_mu_;
  std::condition_variable slot_cv_;
  int slots_free_ = 0;

  std::mutex store_mu_;  // sessions, accounting, compressors, counters below
  std::map<std::string, std::unique_ptr<Session>> sessions_;
  std::map<std::string, std::unique_ptr<Compressor>> compressors_;
  std::condition_variable store_cv_;  // a turn finished: memory may be free
  size_t bytes_used_ = 0;             // sessions' bytes plus reservations of running turns
  int running_turns_ = 0;
  int beginning_ = 0;  // requests holding their session between finding it and running
  uint64_t turns_finished_ = 0;
  uint64_t memory_tickets_ = 0;
  std::map<uint64_t, GiveWay> memory_waiters_;  // beginning requests waiting in ReserveMemory
  uint64_t clock_ = 0;

  struct Counters {
    std::map<int, uint64_t> requests;  // by HTTP status
    uint64_t prompt_tokens = 0, completion_tokens = 0, prefill_tokens = 0, cached_tokens = 0;
    double prefill_seconds = 0, decode_seconds = 0;
    uint64_t compressions = 0, evictions = 0, restores = 0, session_files_rejected = 0;
    uint64_t cancelled = 0, rejected_memory = 0, gave_way = 0, turns_not_saved = 0;
  } counters_;
};

}  // namespace primekv::server
