// The engine of `primekv serve`: loading, press checks, and a request's way in (a slot, its
// session, its memory) and out.
#include "server/engine.h"

#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <random>
#include <thread>

#include "primekv/press/profile_locator.h"
#include "primekv/session/pipeline.h"
#include "server/common.h"
#include "server/decode_batcher.h"
#include "server/request.h"
#include "server/session_backend.h"
#include "server/session_store.h"

namespace primekv::server {

namespace {

// A turn's claim on the KV budget: what MemoryBudget::Reserve asks of the session store.
class TurnClaim final : public MemoryBudget::Claimant {
 public:
  TurnClaim(SessionStore& store, Session& s, int new_tokens, MemoryBudget::GiveWay give_way,
            bool restored)
      : store_(store),
        s_(s),
        tenant_(s.record().tenant),  // (`s` may be forgotten by Release)
        new_tokens_(new_tokens),
        window_rows_(s.conv->TurnWindowRows()),
        give_way_(give_way),
        restored_(restored) {}
  // The session is this request's (busy): only the pages the caches sharing its pool hold
  // change meanwhile, under the pool's own lock.
  size_t Need() override {
    const KvCache& cache = s_.conv->cache();
    return cache.BytesAllocatedAfterReserve(new_tokens_, window_rows_) - cache.BytesAllocated();
  }
  // What the session holds with this turn once no other session does (a prefix-shared cache
  // counts its whole pool now).
  size_t Alone() const { return s_.conv->cache().BytesAllocatedAlone(new_tokens_, window_rows_); }
  bool TenantFits(size_t bytes) override { return store_.TenantFits(tenant_, bytes); }
  std::optional<size_t> EvictOne(bool own_only) override {
    return store_.EvictOne(&s_, tenant_, own_only);
  }
  size_t Release(bool gave_way) override {
    return gave_way ? store_.GiveWay(s_, give_way_ == MemoryBudget::GiveWay::kForget)
                    : store_.Refuse(s_, restored_);
  }
  void Taken(size_t bytes) override { store_.SetReserved(s_, bytes); }

 private:
  SessionStore& store_;
  Session& s_;
  const std::string tenant_;
  const int new_tokens_;
  const std::vector<int> window_rows_;
  const MemoryBudget::GiveWay give_way_;
  const bool restored_;
};

}  // namespace

double SecondsSince(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

size_t CommonPrefix(const std::vector<Token>& a, const std::vector<Token>& b) {
  size_t i = 0;
  while (i < a.size() && i < b.size() && a[i] == b[i]) ++i;
  return i;
}

namespace {

// Whether a session file can be created in `dir` (permissions, a read-only or full file
// system): the server would otherwise answer every turn and save none.
Status ProbeWritable(const std::string& dir) {
  std::string probe = dir + "/.primekv-probe-XXXXXX";
  const int fd = mkstemp(probe.data());
  const auto fail = [&](int err) {
    return Status::Error("--session-dir '" + dir + "' is not writable: " + std::strerror(err));
  };
  if (fd < 0) return fail(errno);
  const char byte = 0;
  const bool ok = write(fd, &byte, 1) == 1 && fsync(fd) == 0;
  const int err = errno;
  close(fd);
  unlink(probe.c_str());
  return ok ? Status::Ok() : fail(err);
}

// The backend of --session-store or --session-dir (null without either); a store that cannot
// be reached at start is refused: no turn could be saved.
Result<std::unique_ptr<SessionBackend>> MakeBackend(const ServerOptions& options,
                                                    const Model& model, const KvCacheOptions& kv) {
  if (!options.session_store.empty()) {
    auto address = ParseRedisUrl(options.session_store);
    if (!address.ok()) return Status::Error("--session-store " + address.message());
    auto backend =
        MakeRedisBackend(*address, options.store_ttl_s, options.store_max_bytes, model, kv);
    // Replicas started beside it (deploy/cluster.sh) get kStoreWaitS for it to come up.
    constexpr int kStoreWaitS = 10;
    const auto give_up = std::chrono::steady_clock::now() + std::chrono::seconds(kStoreWaitS);
    for (;;) {
      auto probe = backend->StoredTurn("", "probe");
      if (probe.ok()) return backend;
      if (std::chrono::steady_clock::now() >= give_up)
        return Status::Error("cannot reach --session-store " + options.session_store + " (" +
                             probe.message() + ") within " + std::to_string(kStoreWaitS) + " s");
      std::this_thread::sleep_for(std::chrono::milliseconds(250));
    }
  }
  if (options.session_dir.empty()) return std::unique_ptr<SessionBackend>();
  std::error_code ec;
  std::filesystem::create_directories(options.session_dir, ec);
  if (ec) return Status::Error("cannot create --session-dir '" + options.session_dir + "'");
  if (Status s = ProbeWritable(options.session_dir); !s.ok()) return s;
  return MakeDirBackend(options.session_dir, model, kv);
}

}  // namespace

Engine::Engine(const ServerOptions& options)
    : options_(options), slots_(options.slots), budget_(options.kv_budget_bytes) {}
Engine::~Engine() = default;

Result<std::unique_ptr<Engine>> Engine::Create(const ServerOptions& options) {
  if (Status s = ValidateServerOptions(options); !s.ok()) return s;
  std::unique_ptr<Engine> e(new Engine(options));
  // The context size chooses Phi-3's LongRoPE factors, as it does for every other entry point.
  auto model = Model::Load(options.model_path, options.weight_memory, options.ctx_size);
  if (!model.ok()) return model.status();
  e->model_ = std::make_unique<Model>(std::move(model).value());
  std::string ctx_note;
  auto ctx = ResolveContextSize(e->model_->config(), options.ctx_size, options.allow_ctx_overflow,
                                &ctx_note);
  if (!ctx.ok()) return ctx.status();
  if (!ctx_note.empty()) std::fprintf(stderr, "primekv serve: warning: %s\n", ctx_note.c_str());
  e->ctx_size_ = *ctx;
  e->pool_ = std::make_unique<ThreadPool>(options.threads);
  // The model's template must be one whose rendering is built in (or named by
  // --chat-template): a template that only resembles one would be answered without what it adds.
  auto chat = ResolveChatFormat(e->model_->tokenizer(), options.chat_template);
  if (!chat.ok()) return Status::Error(options.model_path + ": " + chat.message());
  e->chat_format_ = *chat;
  // profile=auto is found once here, not per request (the cache lookup hashes the model file).
  std::error_code ec;
  if (const auto beside = ProfileBesideModel(options.model_path);
      std::filesystem::is_regular_file(beside, ec)) {
    e->options_.auto_profile = beside.string();
  } else if (UsesAutoProfile(options.press)) {
    PRIMEKV_ASSIGN_OR_RETURN(const std::filesystem::path found,
                             FindModelProfile(options.model_path));
    e->options_.auto_profile = found.string();
  }
  PRIMEKV_ASSIGN_OR_RETURN(e->options_.press, ServedPress(e->options_, options.press));
  if (auto err = e->CheckPress(e->options_.press, options.ratio, "--press")) {
    return Status::Error(err->message);
  }
  auto backend = MakeBackend(options, *e->model_, e->kv_);
  if (!backend.ok()) return backend.status();
  const bool index_dir = options.session_store.empty() && !options.session_dir.empty();
  e->batcher_ = std::make_unique<DecodeBatcher>(
      [model = e->model_.get(), pool = e->pool_.get()](
          std::span<const DecodeSlot> slots, MatView<float> logits, ForwardWorkspace& ws) {
        return model->ForwardDecodeBatch(slots, logits, *pool, ws);
      },
      e->model_->config().vocab_size, e->model_mutex_);
  e->store_ =
      std::make_unique<SessionStore>(*e->model_, e->kv_, e->options_, std::move(backend).value(),
                                     e->metrics_, *e->pool_, e->model_mutex_);
  if (const Status& fits = e->store_->CompressorFor(e->options_.press).CheckModel(); !fits.ok())
    return Status::Error("--press: " + fits.message());
  if (index_dir) e->store_->IndexDir(options.session_dir);
  return e;
}

std::optional<HttpError> Engine::CheckPress(const std::string& press, double ratio,
                                            const std::string& param) const {
  return CheckServedPress(press, ratio, param);
}

RequestContext Engine::request_context() const {
  return {.options = options_,
          .tokenizer = model_->tokenizer(),
          .chat_format = chat_format_,
          .ctx_size = ctx_size_,
          .vocab_size = model_->config().vocab_size};
}

HttpError BusySession(const std::string& id) {
  return HttpError{409, "session '" + id + "' is answering another request", "session"};
}

std::optional<HttpError> Engine::CheckFits(const TurnRequest& req) const {
  const int n_prompt = static_cast<int>(req.prompt.size());
  if (n_prompt == 0) return HttpError{400, "the prompt encodes to no tokens", "messages"};
  if (n_prompt >= ctx_size_) {
    return HttpError{400,
                     "the prompt has " + std::to_string(n_prompt) + " tokens; the context holds " +
                         std::to_string(ctx_size_),
                     "messages", "context_length_exceeded"};
  }
  if (req.max_tokens > ctx_size_ - n_prompt) {
    return HttpError{400,
                     req.max_tokens_param + " " + std::to_string(req.max_tokens) + " exceeds the " +
                         std::to_string(ctx_size_ - n_prompt) + " tokens left in the context",
                     req.max_tokens_param, "context_length_exceeded"};
  }
  return std::nullopt;
}

void Engine::Account(const Accounted& a) { budget_.Replace(a.before, a.after); }

std::variant<std::unique_ptr<Turn>, HttpError> Engine::Begin(TurnRequest req) {
  if (auto err = CheckFits(req)) return *err;
  // A budget profile measured on another model (or of another shape) is refused before any
  // prefill (the store builds each press's compressor once).
  if (const Status& fits = store_->CompressorFor(req.press).CheckModel(); !fits.ok())
    return HttpError{400, "primekv: " + fits.message(), "primekv"};
  // A named session that answers (or waits to answer) another request is refused before this
  // one waits for a slot: queued behind it, it would run next and cut that turn out.
  bool claimed = false;
  if (!req.session_id.empty()) {
    const auto claim = store_->ClaimNamed(req.tenant, req.session_id);
    if (claim == SessionStore::Claim::kBusy) return BusySession(req.session_id);
    claimed = claim == SessionStore::Claim::kClaimed;
  }
  slots_.Take();  // waits while --slots requests are running
  const auto deadline =
      std::chrono::steady_clock::now() + std::chrono::seconds(options_.memory_wait_s);
  for (;;) {
    // Counted as beginning before its session is found, so that a request waiting for memory
    // waits for this one rather than being refused as if alone.
    budget_.Enter();
    if (claimed) {
      store_->Unclaim(req.session_id);
      claimed = false;
    }
    auto begun = BeginOnce(req, deadline);
    if (std::holds_alternative<Retry>(begun)) continue;
    if (auto* err = std::get_if<HttpError>(&begun)) {
      slots_.Give();
      return *err;
    }
    return std::move(std::get<std::unique_ptr<Turn>>(begun));
  }
}

std::variant<std::unique_ptr<Turn>, HttpError, Engine::Retry> Engine::BeginOnce(
    TurnRequest& req, std::chrono::steady_clock::time_point deadline) {
  auto f = store_->Find(req);
  if (auto* err = std::get_if<HttpError>(&f)) {
    budget_.Leave();
    return *err;
  }
  SessionStore::Found found = std::get<SessionStore::Found>(f);
  Session* s = found.session;
  // A named session is continued as far as its (possibly reloaded) tokens match the prompt.
  if (!req.session_id.empty()) {
    Account(store_->DropIfBehind(*s));
    found.keep = req.prompt.size();
  }
  // The prompt's last token is always run again, so its logits start the answer.
  size_t keep = std::min(found.keep, req.prompt.size() - 1);
  if (found.source) Account(store_->CopyPrefix(*s, *found.source, req.prompt, keep));
  bool restored = false;
  if (auto err = store_->RestoreIfEvicted(*s, restored)) {
    budget_.Leave();  // (wakes the requests waiting for memory: the session may be idle now)
    return *err;
  }
  keep = std::min(keep, CommonPrefix(s->record().tokens, req.prompt));
  // A sliding-window layer may have freed what the cut needs: the turn then prefills it all.
  keep = s->conv->Keepable(keep);
  // Memory: what this turn may add (prefill + answer + page slack), then make room. The decode
  // loop's own Reserve stays within it (exact for global layers; a sliding-window layer is
  // counted at what its window can span however long the turn: TurnWindowRows).
  const size_t new_tokens = req.prompt.size() - keep + static_cast<size_t>(req.max_tokens) + 1;
  // How it can give way (MemoryBudget::Reserve): a new session can be made again, a stored
  // one's file holds all its cache does.
  using GiveWay = MemoryBudget::GiveWay;
  const GiveWay give_way = req.session_id.empty() ? GiveWay::kForget
                           : s->persisted         ? GiveWay::kDropCache
                                                  : GiveWay::kNo;
  auto reserved =
      ReserveMemory(*s, static_cast<int>(new_tokens), restored, give_way, deadline);
  if (std::holds_alternative<Retry>(reserved)) return Retry{};
  if (auto* err = std::get_if<HttpError>(&reserved)) return *err;
  TurnParts parts{
      .tokenizer = model_->tokenizer(),
      .batcher = *batcher_,
      .store = *store_,
      .metrics = metrics_,
      .finish = [this](Session* done, bool ok, bool modified) { Finish(done, ok, modified); }};
  return std::make_unique<Turn>(std::move(parts), s, std::move(req), static_cast<int>(keep));
}

std::variant<std::monostate, HttpError, Engine::Retry> Engine::ReserveMemory(
    Session& s, int new_tokens, bool restored, MemoryBudget::GiveWay give_way,
    std::chrono::steady_clock::time_point deadline) {
  Account(store_->Account(s));
  TurnClaim claim(*store_, s, new_tokens, give_way, restored);
  const size_t alone = claim.Alone();
  const MemoryBudget::Request r{.alone = alone,
                                .give_way = give_way,
                                .deadline = deadline,
                                .claimant = &claim};
  const MemoryBudget::Outcome outcome = budget_.Reserve(r);
  using Outcome = MemoryBudget::Outcome;
  if (outcome == Outcome::kTaken) return std::monostate{};
  if (outcome == Outcome::kRetry || outcome == Outcome::kTimedOut)
    metrics_.Count(Metrics::Event::kGaveWay);
  if (outcome == Outcome::kRetry) return Retry{};
  metrics_.Count(Metrics::Event::kRejectedMemory);
  if (outcome == Outcome::kTimedOut) {
    return HttpError{503,
                     "the KV budget (" + std::to_string(options_.kv_budget_bytes) +
                         " bytes) did not free room for this request within --memory-wait-s",
                     "", "server_overloaded"};
  }
  // Alone (or by the deadline) it still does not fit: the answer names the limit it hit.
  const std::string limit =
      outcome == Outcome::kRefusedTenant
          ? "the tenant's KV share (--tenant-kv-mib, " + std::to_string(options_.tenant_kv_bytes) +
                " bytes)"
          : "the KV budget (" + std::to_string(options_.kv_budget_bytes) + " bytes)";
  return HttpError{503, limit + " cannot hold this request (" + std::to_string(alone) + " bytes)",
                   "", "server_overloaded"};
}

void Engine::Finish(Session* s, bool ok, bool modified) {
  const Accounted a = store_->Finish(*s, ok, modified);
  budget_.TurnEnded(a.before, a.after);
  slots_.Give();
}

std::string Engine::MetricsText() {
  const SessionStore::Census census = store_->census();
  const DecodeBatcher::Stats batches = batcher_->stats();
  std::optional<StoreStats> store_stats;
  if (store_->backend()) store_stats = store_->backend()->stats();
  return metrics_.Text({.kv_bytes_held = census.bytes_held,
                        .kv_bytes_accounted = budget_.used(),
                        .kv_budget_bytes = options_.kv_budget_bytes,
                        .sessions_in_memory = census.in_memory,
                        .sessions_on_disk = census.on_disk,
                        .kv_pools = census.kv_pools,
                        .requests_waiting_memory = budget_.waiting(),
                        .decode_batches = batches.batches,
                        .decode_batch_rows = batches.rows,
                        .store = store_stats ? &*store_stats : nullptr});
}

}  // namespace primekv::server
