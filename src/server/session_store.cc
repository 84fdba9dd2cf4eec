// The session store of `primekv serve`: finding the session a request continues, eviction,
// and the sessions kept in the backend (--session-dir or --session-store; session_backend.h).
#include "server/session_store.h"

#include <algorithm>
#include <cstdio>
#include <filesystem>

#include "server/server_metrics.h"
#include "server/session_backend.h"

namespace primekv::server {

SessionStore::SessionStore(const Model& model, const KvCacheOptions& kv,
                           const ServerOptions& options, std::unique_ptr<SessionBackend> backend,
                           Metrics& metrics, ThreadPool& pool, std::mutex& model_mutex)
    : model_(model),
      kv_(kv),
      options_(options),
      backend_(std::move(backend)),
      metrics_(metrics),
      pool_(pool),
      model_mutex_(model_mutex) {}

SessionStore::~SessionStore() = default;

void SessionStore::IndexDir(const std::string& dir) {
  std::error_code ec;
  std::lock_guard lock(mu_);
  for (const auto& entry : std::filesystem::directory_iterator(dir, ec)) {
    const std::string path = entry.path().string();
    // Only regular files are read: a FIFO would block the open, a link could point anywhere.
    if (!entry.is_regular_file(ec) || entry.is_symlink(ec)) {
      if (entry.path().extension() == ".pkvs") {
        std::fprintf(stderr, "primekv serve: skipping %s: not a regular file\n", path.c_str());
        metrics_.Count(Metrics::Event::kSessionFileRejected);
      }
      continue;
    }
    if (entry.path().extension() == ".tmp") {
      // A write the process did not finish (crash): never renamed, never valid.
      std::filesystem::remove(entry.path(), ec);
      continue;
    }
    if (entry.path().extension() != ".pkvs") continue;
    auto header = ReadSessionFile(path, model_, kv_, /*header_only=*/true);
    if (header.ok() && CheckServedPress(header->press, header->schedule.ratio, "press"))
      header =
          Status::Error("session file '" + path + "': press " + header->press + " ratio " +
                        std::to_string(header->schedule.ratio) + " is not one this server runs");
    if (!header.ok()) {
      std::fprintf(stderr, "primekv serve: skipping %s\n", header.message().c_str());
      metrics_.Count(Metrics::Event::kSessionFileRejected);
      continue;
    }
    auto s = std::make_unique<Session>();
    s->conv = NewConversationLocked(std::move(header).value());
    s->conv->DropCache();  // read on first use
    s->persisted = true;
    const std::string id = s->record().id;
    sessions_[id] = std::move(s);
  }
  std::fprintf(stderr, "primekv serve: %zu session(s) indexed from %s\n", sessions_.size(),
               dir.c_str());
}

Session& SessionStore::Add(ConversationRecord record, bool in_memory) {
  std::lock_guard lock(mu_);
  auto s = std::make_unique<Session>();
  const bool had_cache = record.cache.has_value();
  s->conv = NewConversationLocked(std::move(record));
  if (!in_memory && !had_cache) s->conv->DropCache();
  Session& added = *s;
  sessions_[added.record().id] = std::move(s);
  return added;
}

size_t SessionStore::size() const {
  std::lock_guard lock(mu_);
  return sessions_.size();
}

const Compressor& SessionStore::CompressorFor(const std::string& press) {
  std::lock_guard lock(mu_);
  return CompressorForLocked(press);
}

std::unique_ptr<Conversation> SessionStore::NewConversationLocked(ConversationRecord r) {
  // Every conversation of this server runs its --mode; its press and ratio are its own.
  r.schedule = {.ratio = r.schedule.ratio, .mode = options_.mode, .interval = options_.interval};
  const Compressor& c = CompressorForLocked(r.press);
  return std::make_unique<Conversation>(model_, c, pool_, std::move(r), kv_,
                                        ConversationParts{.model_mutex = &model_mutex_});
}

const Compressor& SessionStore::CompressorForLocked(const std::string& press) {
  auto& c = compressors_[press];
  if (!c) {
    // CheckPress ran on every press that reaches here.
    c = std::make_unique<Compressor>(model_, std::move(MakePress(*ParsePressSpec(press))).value());
  }
  return *c;
}

SessionStore::Claim SessionStore::ClaimNamed(const std::string& tenant, const std::string& id) {
  std::lock_guard lock(mu_);
  auto it = sessions_.find(id);
  if (it == sessions_.end() || it->second->record().tenant != tenant) return Claim::kUnknown;
  if (it->second->busy || it->second->claimed) return Claim::kBusy;
  it->second->claimed = true;
  return Claim::kClaimed;
}

void SessionStore::Unclaim(const std::string& id) {
  std::lock_guard lock(mu_);
  // (The session may have been forgotten meanwhile: looked up again.)
  if (auto it = sessions_.find(id); it != sessions_.end()) it->second->claimed = false;
}

std::variant<SessionStore::CacheSnapshot, HttpError> SessionStore::Snapshot(
    const std::string& tenant, const std::string& id) {
  std::lock_guard lock(mu_);
  auto it = sessions_.find(id);
  // Another tenant's session is answered exactly as one that does not exist.
  if (it == sessions_.end() || it->second->record().tenant != tenant)
    return HttpError{404, "unknown session", "session", "not_found_error"};
  Session& s = *it->second;
  if (s.busy) return BusySession(id);
  if (s.load || !s.conv->has_cache())
    return HttpError{409, "session '" + id + "' is not in memory; its next turn reads it back",
                     "session"};
  const KvCache& c = s.conv->cache();
  CacheSnapshot snap{.id = id,
                     .press = s.record().press,
                     .schedule = s.record().schedule,
                     .tokens = s.record().tokens,
                     .n_layers = c.n_layers(),
                     .n_heads = c.n_kv_heads(),
                     .bytes_per_entry = c.BytesPerEntry(),
                     .last_before = s.conv->stats().last_before,
                     .last_after = s.conv->stats().last_after,
                     .turns = s.turns};
  // Positions only: the view needs which entries are kept, never their keys or values.
  for (int l = 0; l < c.n_layers(); ++l) {
    for (int h = 0; h < c.n_kv_heads(); ++h) {
      c.ReadPositions(l, h, &snap.positions.emplace_back());
    }
  }
  return snap;
}

std::map<std::string, size_t> SessionStore::TenantBytes() const {
  std::lock_guard lock(mu_);
  return TenantBytesLocked();
}

std::map<std::string, size_t> SessionStore::TenantBytesLocked() const {
  std::map<std::string, size_t> held;
  for (const auto& [id, s] : sessions_) held[s->record().tenant] += s->reserved;
  for (const auto& [pool, charge] : kv_pools_) held[charge.tenant] += charge.bytes;
  return held;
}

size_t SessionStore::TenantShareLocked(const std::map<std::string, size_t>& held,
                                       const std::string& tenant) const {
  if (options_.tenant_kv_bytes > 0) return options_.tenant_kv_bytes;
  size_t tenants = held.count(tenant) && held.at(tenant) > 0 ? 0 : 1;  // the requester's own
  for (const auto& [t, bytes] : held) tenants += bytes > 0 ? 1 : 0;
  return options_.kv_budget_bytes / std::max<size_t>(tenants, 1);
}

bool SessionStore::TenantFits(const std::string& tenant, size_t more) const {
  std::lock_guard lock(mu_);
  return TenantFitsLocked(tenant, more);
}

bool SessionStore::TenantFitsLocked(const std::string& tenant, size_t more) const {
  if (options_.tenant_kv_bytes == 0) return true;
  const auto held = TenantBytesLocked();
  const auto it = held.find(tenant);
  return (it == held.end() ? 0 : it->second) + more <= options_.tenant_kv_bytes;
}

std::optional<size_t> SessionStore::EvictOne(const Session* except, const std::string& tenant,
                                             bool own_only) {
  std::lock_guard lock(mu_);
  // Tenants do not trust each other, so one must not push another's conversations out: idle
  // sessions of tenants holding more than their share go first (least recently used among them),
  // then the requester's own; a tenant within its share is never evicted for another.
  const auto held = TenantBytesLocked();
  const size_t share = TenantShareLocked(held, tenant);
  Session* over = nullptr;
  Session* own = nullptr;
  for (auto& [id, s] : sessions_) {
    if (s.get() == except || s->busy || !s->conv->has_cache()) continue;
    if (s->record().tenant == tenant && (!own || s->last_used < own->last_used)) own = s.get();
    if (!own_only && held.at(s->record().tenant) > share &&
        (!over || s->last_used < over->last_used))
      over = s.get();
  }
  Session* victim = over ? over : own;
  if (!victim) return std::nullopt;
  metrics_.Count(Metrics::Event::kEviction);
  // Without a file the conversation is forgotten; with one, its file is current (written after
  // every completed turn): dropping the cache loses nothing.
  return victim->persisted ? DropCacheLocked(*victim) : ForgetLocked(*victim);
}

size_t SessionStore::DropCacheLocked(Session& s) {
  s.conv->DropCache();
  return DetachLocked(s);
}

size_t SessionStore::ForgetLocked(Session& s) {
  const size_t freed = DetachLocked(s);
  const std::string id = s.record().id;  // erasing destroys `s`, and with it s.record().id
  sessions_.erase(id);
  return freed;
}

size_t SessionStore::DetachLocked(Session& s) {
  const auto it = kv_pools_.find(s.kv_pool);
  s.kv_pool.reset();
  if (it == kv_pools_.end() || --it->second.sessions > 0) return 0;
  const size_t freed = it->second.bytes;
  kv_pools_.erase(it);
  return freed;
}

Accounted SessionStore::ChargeLocked(Session& s) {
  Accounted a;
  std::weak_ptr<const void> now;
  if (s.conv->has_cache()) now = s.conv->cache().PoolHandle();
  const bool same = !now.owner_before(s.kv_pool) && !s.kv_pool.owner_before(now);
  // A new cache (restored, copied or compacted into a pool of its own), or none.
  if (!same) a.before += DetachLocked(s);
  if (!s.conv->has_cache()) return a;
  PoolCharge& c = kv_pools_[now];
  if (!same) {
    ++c.sessions;
    c.tenant = s.record().tenant;
    s.kv_pool = now;
  }
  a.before += c.bytes;
  c.bytes = s.conv->cache().BytesAllocated();
  a.after += c.bytes;
  return a;
}

Session* SessionStore::BestPrefixLocked(const TurnRequest& req, size_t& keep) {
  // The request must contain the session's whole last prompt (its answer may be re-tokenised
  // differently); only sessions of the same tenant, salt, press and ratio are candidates.
  Session* best = nullptr;
  keep = 0;
  for (auto& [id, cand] : sessions_) {
    // (A session to be read from the store has no tokens to match, or stale ones.)
    if (cand->busy || cand->load || cand->record().tenant != req.tenant ||
        cand->record().cache_salt != req.cache_salt || cand->record().press != req.press ||
        cand->record().schedule.ratio != req.ratio)
      continue;
    const size_t lcp = CommonPrefix(cand->record().tokens, req.prompt);
    if (lcp == 0 || lcp < static_cast<size_t>(cand->record().last_prompt_len)) continue;
    if (!best || lcp > keep) {
      best = cand.get();
      keep = lcp;
    }
  }
  return best;
}

std::optional<PrefixHit> SessionStore::RemotePrefix(const TurnRequest& req) {
  if (!options_.prefix_reuse || !backend_ || !backend_->shared() || !req.session_id.empty())
    return std::nullopt;
  {
    std::lock_guard lock(mu_);
    size_t keep = 0;
    if (BestPrefixLocked(req, keep) != nullptr) return std::nullopt;
  }
  const ConversationRecord like{.tenant = req.tenant,
                                .cache_salt = req.cache_salt,
                                .press = req.press,
                                .schedule = {.ratio = req.ratio}};
  auto hit = backend_->FindPrefix(like, req.prompt);
  if (!hit.ok()) {
    // An unreachable store costs this request its prefix, nothing more.
    std::fprintf(stderr, "primekv serve: %s\n", hit.message().c_str());
    return std::nullopt;
  }
  return *hit;
}

Session* SessionStore::RemoteSourceLocked(const TurnRequest& req, const PrefixHit& hit,
                                          size_t& keep) {
  auto it = sessions_.find(hit.id);
  if (it != sessions_.end()) {
    // Known here: a local match would have found it unless it is busy or of another tenant.
    return nullptr;
  }
  // Another replica's session, read by CopyPrefix under this request's tenant
  // (RestoreIfEvicted), which also checks its press and ratio.
  keep = hit.length;
  return &AddStoredLocked({.id = hit.id,
                           .tenant = req.tenant,
                           .cache_salt = req.cache_salt,
                           .press = req.press,
                           .schedule = {.ratio = req.ratio}});
}

Session& SessionStore::AddStoredLocked(ConversationRecord record) {
  auto s = std::make_unique<Session>();
  s->conv = NewConversationLocked(std::move(record));
  s->conv->DropCache();
  s->persisted = true;
  s->load = true;
  Session& added = *s;
  sessions_[added.record().id] = std::move(s);
  return added;
}

std::variant<SessionStore::Found, HttpError> SessionStore::Find(const TurnRequest& req) {
  // Asked of the shared store before the lock is taken: a network round trip.
  const std::optional<PrefixHit> remote_prefix = RemotePrefix(req);
  std::lock_guard lock(mu_);
  Found f;
  if (!req.session_id.empty()) {
    auto it = sessions_.find(req.session_id);
    if (it == sessions_.end() && backend_ && backend_->shared()) {
      // Perhaps served by another replica: known by id only until it is read from the store
      // under this request's tenant (RestoreIfEvicted), so another tenant's is never read.
      AddStoredLocked({.id = req.session_id,
                       .tenant = req.tenant,
                       .press = req.press,
                       .schedule = {.ratio = req.ratio}});
      it = sessions_.find(req.session_id);
    }
    // Another tenant's session is answered exactly as one that does not exist.
    if (it == sessions_.end() || it->second->record().tenant != req.tenant) {
      return HttpError{404, "unknown session", "session", "not_found_error"};
    }
    Session* s = it->second.get();
    if (s->busy || s->claimed) return BusySession(req.session_id);
    if (s->record().press != req.press || s->record().schedule.ratio != req.ratio) {
      return HttpError{400,
                       "session '" + req.session_id + "' was created with press " +
                           s->record().press + " ratio " +
                           std::to_string(s->record().schedule.ratio),
                       "primekv"};
    }
    f.session = s;
    f.keep = CommonPrefix(s->record().tokens, req.prompt);
  } else {
    if (options_.prefix_reuse) f.source = BestPrefixLocked(req, f.keep);
    if (!f.source && remote_prefix) f.source = RemoteSourceLocked(req, *remote_prefix, f.keep);
    auto id = RandomSessionId();
    if (!id.ok()) return HttpError{500, id.message(), "", "server_error"};
    if (sessions_.count(*id))
      return HttpError{500, "session id collision; retry", "", "server_error"};
    auto fresh = std::make_unique<Session>();
    fresh->conv = NewConversationLocked({.id = *id,
                                         .tenant = req.tenant,
                                         .cache_salt = req.cache_salt,
                                         .press = req.press,
                                         .schedule = {.ratio = req.ratio}});
    f.session = fresh.get();
    sessions_[*id] = std::move(fresh);
  }
  for (Session* s : {f.session, f.source}) {
    if (!s) continue;
    s->busy = true;
    s->last_used = ++clock_;
  }
  return f;
}

Accounted SessionStore::CopyPrefix(Session& s, Session& source, const std::vector<Token>& prompt,
                                   size_t& keep) {
  bool restored = false;
  if (RestoreIfEvicted(source, restored)) {
    keep = 0;  // its file was unreadable (and it is gone, or released): start afresh
    return {};
  }
  // A shared store may hold a later turn than the tokens the match was made on; a session read
  // from the store for a prefix hash must have been made under this request's salt.
  keep = std::min(keep, CommonPrefix(source.record().tokens, prompt));
  if (source.record().cache_salt != s.record().cache_salt) keep = 0;
  // The copy shares the source's pages; whichever writes to a shared page copies it first.
  keep = s.conv->ForkFrom(source.conv->cache().Share(), source.record().tokens,
                          source.conv->capture(), source.record().budget, keep);
  std::lock_guard lock(mu_);
  const Accounted a = ChargeLocked(source);
  source.busy = false;
  source.last_used = ++clock_;
  return a;
}

std::optional<HttpError> SessionStore::RestoreIfEvicted(Session& s, bool& restored) {
  restored = false;
  if (s.load || (!s.conv->has_cache() && !s.record().tokens.empty())) {
    // Store I/O outside the store lock; the session is busy, so no one else touches it.
    auto loaded = backend_->Load(s.record().tenant, s.record().id);
    std::lock_guard lock(mu_);
    const std::string id = s.record().id;
    // On an error below, a session known by id only is forgotten (the next request asks the
    // store again, with its own tenant and press); one with tokens waits for a later request.
    const auto give_up = [&] {
      if (s.record().tokens.empty()) {
        sessions_.erase(id);
      } else {
        s.busy = false;  // (the engine wakes the requests waiting for memory)
      }
    };
    if (!loaded.ok()) {
      std::fprintf(stderr, "primekv serve: %s\n", loaded.message().c_str());
      give_up();
      return HttpError{503, "the session store is unavailable", "", "server_overloaded"};
    }
    if (loaded->found != SessionBackend::Found::kFound) {
      if (loaded->found == SessionBackend::Found::kDamaged) {
        std::fprintf(stderr, "primekv serve: refusing session %s from the %s store: %s\n",
                     id.c_str(), backend_->name(), loaded->why.c_str());
        metrics_.Count(Metrics::Event::kSessionFileRejected);
      }
      sessions_.erase(id);
      if (loaded->found == SessionBackend::Found::kMissing)
        return HttpError{404, "unknown session", "session", "not_found_error"};
      // The reason is the operator's (logged above), not the client's.
      return HttpError{404, "session could not be restored from the store", "session",
                       "not_found_error"};
    }
    ConversationRecord& snap = loaded->snapshot;
    if (s.load &&
        (snap.press != s.record().press || snap.schedule.ratio != s.record().schedule.ratio)) {
      // Known by id only, so the request's press was not checked against it yet.
      give_up();
      return HttpError{400,
                       "session '" + id + "' was created with press " + snap.press + " ratio " +
                           std::to_string(snap.schedule.ratio),
                       "primekv"};
    }
    // What the store holds, so the next save appends a delta (over rows of the cache's type).
    std::optional<StoredImage> held;
    if (snap.cache && loaded->extent.stored == snap.cache->dtype())
      held = DescribeStored(snap, backend_->where(id), loaded->extent);
    s.conv->Restore(std::move(snap), std::move(held));
    s.load = false;
    restored = true;
    metrics_.Count(Metrics::Event::kRestore);
  }
  if (!s.conv->has_cache()) {
    std::lock_guard lock(mu_);  // (census() reads whether a session holds a cache)
    s.conv->EnsureCache();
  }
  return std::nullopt;
}

Accounted SessionStore::DropIfBehind(Session& s) {
  if (!backend_ || !backend_->shared() || !s.conv->has_cache() || s.load) return {};
  auto stored = backend_->StoredTurn(s.record().tenant, s.record().id);
  if (!stored.ok()) {
    // Unreachable store: this replica's copy is the best there is.
    std::fprintf(stderr, "primekv serve: %s\n", stored.message().c_str());
    return {};
  }
  if (!*stored || **stored <= s.record().turn) return {};
  std::lock_guard lock(mu_);
  const size_t freed = DropCacheLocked(s);
  s.load = true;
  return {freed, 0};
}

Status SessionStore::Persist(Session& s) {
  if (!backend_) return Status::Ok();
  auto saved = backend_->Save(*s.conv);
  std::lock_guard lock(mu_);
  if (!saved.ok()) {
    s.persisted = false;
    return saved.status();
  }
  s.persisted = *saved != SessionBackend::Saved::kTooLarge;
  // Another replica stored this turn number or a later one first: that one is the session
  // now (Finish drops this copy).
  if (*saved == SessionBackend::Saved::kStale) s.load = true;
  if (*saved == SessionBackend::Saved::kTooLarge)
    return Status::Error("session " + s.record().id + " exceeds --store-max-kib: not stored");
  return Status::Ok();
}

Accounted SessionStore::Account(Session& s) {
  std::lock_guard lock(mu_);
  return ChargeLocked(s);
}

void SessionStore::SetReserved(Session& s, size_t bytes) {
  std::lock_guard lock(mu_);
  s.reserved = bytes;
}

size_t SessionStore::Refuse(Session& s, bool restored) {
  std::lock_guard lock(mu_);
  s.busy = false;
  if (s.record().tokens.empty()) return ForgetLocked(s);
  if (restored && s.persisted) return DropCacheLocked(s);  // back to disk: only read for this
  return 0;
}

size_t SessionStore::GiveWay(Session& s, bool forget) {
  std::lock_guard lock(mu_);
  if (forget) return ForgetLocked(s);
  s.busy = false;
  return DropCacheLocked(s);
}

Accounted SessionStore::Finish(Session& s, bool ok, bool modified) {
  std::lock_guard lock(mu_);
  Accounted a = ChargeLocked(s);
  a.before += s.reserved;
  s.reserved = 0;
  s.busy = false;
  s.last_used = ++clock_;
  if (s.load && s.conv->has_cache()) {
    // The shared store refused this turn (another replica wrote a newer one): the next
    // turn reads that one.
    a.after -= DropCacheLocked(s);
  }
  if (!ok && modified && s.persisted) {
    // A failed turn leaves the cache suspect: fall back to the last completed turn's file.
    a.after -= DropCacheLocked(s);
  } else if (!ok && (modified || s.record().tokens.empty())) {
    a.after -= ForgetLocked(s);
  }
  return a;
}

SessionStore::Census SessionStore::census() const {
  std::lock_guard lock(mu_);
  Census c;
  for (const auto& [pool, charge] : kv_pools_) c.bytes_held += charge.bytes;
  c.kv_pools = kv_pools_.size();
  for (const auto& [id, s] : sessions_) {
    if (s->conv->has_cache()) {
      ++c.in_memory;
    } else {
      ++c.on_disk;
    }
  }
  return c;
}

}  // namespace primekv::server
