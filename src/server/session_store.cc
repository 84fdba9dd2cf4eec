// The session store of `primekv serve`: finding the session a request continues, eviction,
// and the sessions kept in the backend (--session-dir or --session-store; session_backend.h).
#include <algorithm>
#include <cstdio>
#include <filesystem>

#include "server/server_internal.h"
#include "server/session_backend.h"

namespace primekv::server {

void Engine::IndexSessionDir() {
  std::error_code ec;
  for (const auto& entry : std::filesystem::directory_iterator(options_.session_dir, ec)) {
    const std::string path = entry.path().string();
    // Only regular files are read: a FIFO would block the open, a link could point anywhere.
    if (!entry.is_regular_file(ec) || entry.is_symlink(ec)) {
      if (entry.path().extension() == ".pkvs") {
        std::fprintf(stderr, "primekv serve: skipping %s: not a regular file\n", path.c_str());
        ++counters_.session_files_rejected;
      }
      continue;
    }
    if (entry.path().extension() == ".tmp") {
      // A write the process did not finish (crash): never renamed, never valid.
      std::filesystem::remove(entry.path(), ec);
      continue;
    }
    if (entry.path().extension() != ".pkvs") continue;
    auto snap = ReadSessionFile(path, *model_, kv_, /*header_only=*/true);
    if (!snap.ok()) {
      std::fprintf(stderr, "primekv serve: skipping %s\n", snap.message().c_str());
      ++counters_.session_files_rejected;
      continue;
    }
    auto s = std::make_unique<Session>();
    s->id = snap->id;
    s->tenant = snap->tenant;
    s->cache_salt = snap->cache_salt;
    s->press = snap->press;
    s->ratio = snap->ratio;
    s->budget = snap->budget;
    s->last_prompt_len = snap->last_prompt_len;
    s->turn = snap->turn;
    s->tokens = std::move(snap->tokens);
    s->persisted = true;
    sessions_[s->id] = std::move(s);
  }
  std::fprintf(stderr, "primekv serve: %zu session(s) indexed from %s\n", sessions_.size(),
               options_.session_dir.c_str());
}

std::map<std::string, size_t> Engine::TenantBytesLocked() const {
  std::map<std::string, size_t> held;
  for (const auto& [id, s] : sessions_) held[s->tenant] += s->bytes + s->reserved;
  return held;
}

size_t Engine::TenantShareLocked(const std::map<std::string, size_t>& held,
                                 const std::string& tenant) const {
  if (options_.tenant_kv_bytes > 0) return options_.tenant_kv_bytes;
  size_t tenants = held.count(tenant) && held.at(tenant) > 0 ? 0 : 1;  // the requester's own
  for (const auto& [t, bytes] : held) tenants += bytes > 0 ? 1 : 0;
  return options_.kv_budget_bytes / std::max<size_t>(tenants, 1);
}

bool Engine::TenantFitsLocked(const std::string& tenant, size_t more) const {
  if (options_.tenant_kv_bytes == 0) return true;
  const auto held = TenantBytesLocked();
  const auto it = held.find(tenant);
  return (it == held.end() ? 0 : it->second) + more <= options_.tenant_kv_bytes;
}

bool Engine::EvictOneLocked(const Session* except, const std::string& tenant, bool own_only) {
  // Tenants do not trust each other, so one must not push another's conversations out: idle
  // sessions of tenants holding more than their share go first (least recently used among them),
  // then the requester's own; a tenant within its share is never evicted for another.
  const auto held = TenantBytesLocked();
  const size_t share = TenantShareLocked(held, tenant);
  Session* over = nullptr;
  Session* own = nullptr;
  for (auto& [id, s] : sessions_) {
    if (s.get() == except || s->busy || !s->cache) continue;
    if (s->tenant == tenant && (!own || s->last_used < own->last_used)) own = s.get();
    if (!own_only && held.at(s->tenant) > share && (!over || s->last_used < over->last_used))
      over = s.get();
  }
  Session* victim = over ? over : own;
  if (!victim) return false;
  ++counters_.evictions;
  if (!victim->persisted) {
    ForgetLocked(*victim);  // nowhere to keep it: the conversation is forgotten
  } else {
    // Its file is current (written after every completed turn): dropping the cache loses
    // nothing.
    DropCacheLocked(*victim);
  }
  return true;
}

void Engine::DropCacheLocked(Session& s) {
  bytes_used_ -= s.bytes;
  s.bytes = 0;
  s.cache.reset();
  s.capture.reset();
}

void Engine::ForgetLocked(Session& s) {
  bytes_used_ -= s.bytes;
  const std::string id = s.id;  // erasing destroys `s`, and with it s.id
  sessions_.erase(id);
}

Session* Engine::BestPrefixLocked(const TurnRequest& req, size_t& keep) {
  // The request must contain the session's whole last prompt (its answer may be re-tokenised
  // differently); only sessions of the same tenant, salt, press and ratio are candidates.
  Session* best = nullptr;
  keep = 0;
  for (auto& [id, cand] : sessions_) {
    // (A session to be read from the store has no tokens to match, or stale ones.)
    if (cand->busy || cand->load || cand->tenant != req.tenant ||
        cand->cache_salt != req.cache_salt || cand->press != req.press || cand->ratio != req.ratio)
      continue;
    const size_t lcp = CommonPrefix(cand->tokens, req.prompt);
    if (lcp == 0 || lcp < static_cast<size_t>(cand->last_prompt_len)) continue;
    if (!best || lcp > keep) {
      best = cand.get();
      keep = lcp;
    }
  }
  return best;
}

std::variant<Engine::Found, HttpError> Engine::FindSessionLocked(const TurnRequest& req) {
  Found f;
  if (!req.session_id.empty()) {
    auto it = sessions_.find(req.session_id);
    if (it == sessions_.end() && backend_ && backend_->shared()) {
      // Perhaps served by another replica: known by id only until it is read from the store
      // under this request's tenant (RestoreIfEvicted), so another tenant's is never read.
      auto remote = std::make_unique<Session>();
      remote->id = req.session_id;
      remote->tenant = req.tenant;
      remote->press = req.press;
      remote->ratio = req.ratio;
      remote->persisted = true;
      remote->load = true;
      it = sessions_.emplace(remote->id, std::move(remote)).first;
    }
    // Another tenant's session is answered exactly as one that does not exist.
    if (it == sessions_.end() || it->second->tenant != req.tenant) {
      return HttpError{404, "unknown session '" + req.session_id + "'", "session",
                       "not_found_error"};
    }
    Session* s = it->second.get();
    if (s->busy || s->claimed) return BusySession(req.session_id);
    if (s->press != req.press || s->ratio != req.ratio) {
      return HttpError{400,
                       "session '" + req.session_id + "' was created with press " + s->press +
                           " ratio " + std::to_string(s->ratio),
                       "primekv"};
    }
    f.session = s;
    f.keep = CommonPrefix(s->tokens, req.prompt);
  } else {
    if (options_.prefix_reuse) f.source = BestPrefixLocked(req, f.keep);
    auto id = RandomSessionId();
    if (!id.ok()) return HttpError{500, id.message(), "", "server_error"};
    if (sessions_.count(*id))
      return HttpError{500, "session id collision; retry", "", "server_error"};
    auto fresh = std::make_unique<Session>();
    fresh->id = *id;
    fresh->tenant = req.tenant;
    fresh->cache_salt = req.cache_salt;
    fresh->press = req.press;
    fresh->ratio = req.ratio;
    f.session = fresh.get();
    sessions_[fresh->id] = std::move(fresh);
  }
  for (Session* s : {f.session, f.source}) {
    if (!s) continue;
    s->busy = true;
    s->last_used = ++clock_;
  }
  return f;
}

void Engine::CopyPrefix(Session& s, Session& source, const std::vector<Token>& prompt,
                        size_t& keep) {
  bool restored = false;
  if (RestoreIfEvicted(source, restored)) {
    keep = 0;  // its file was unreadable (and it is gone): start afresh
    return;
  }
  // A shared store may hold a later turn than the tokens the match was made on.
  keep = std::min(keep, CommonPrefix(source.tokens, prompt));
  s.cache = std::make_unique<KvCache>(source.cache->Clone());
  s.cache->TruncateFrom(static_cast<int32_t>(keep));
  s.tokens.assign(source.tokens.begin(), source.tokens.begin() + static_cast<ptrdiff_t>(keep));
  s.budget = source.budget;
  std::lock_guard lock(store_mu_);
  // What the press saw of the source's queries goes with the copy, as if it had continued.
  s.capture = source.capture
                  ? std::make_unique<PressCapture>(*source.capture)
                  : std::make_unique<PressCapture>(*model_, CompressorFor(s.press).Needs());
  const size_t now = source.cache->BytesAllocated();
  bytes_used_ = bytes_used_ - source.bytes + now;
  source.bytes = now;
  source.busy = false;
  source.last_used = ++clock_;
  store_cv_.notify_all();
}

std::optional<HttpError> Engine::RestoreIfEvicted(Session& s, bool& restored) {
  restored = false;
  if (s.load || (!s.cache && !s.tokens.empty())) {
    // Store I/O outside the store lock; the session is busy, so no one else touches it.
    auto loaded = backend_->Load(s.tenant, s.id);
    std::lock_guard lock(store_mu_);
    const std::string id = s.id;
    // On an error below, a session known by id only is forgotten (the next request asks the
    // store again, with its own tenant and press); one with tokens waits for a later request.
    const auto give_up = [&] {
      if (s.tokens.empty()) {
        sessions_.erase(id);
      } else {
        s.busy = false;
        store_cv_.notify_all();
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
        ++counters_.session_files_rejected;
      }
      sessions_.erase(id);
      if (loaded->found == SessionBackend::Found::kMissing)
        return HttpError{404, "unknown session '" + id + "'", "session", "not_found_error"};
      // The reason is the operator's (logged above), not the client's.
      return HttpError{404, "session '" + id + "' could not be restored from the store", "session",
                       "not_found_error"};
    }
    SessionSnapshot& snap = loaded->snapshot;
    if (s.load && (snap.press != s.press || snap.ratio != s.ratio)) {
      // Known by id only, so the request's press was not checked against it yet.
      give_up();
      return HttpError{400,
                       "session '" + id + "' was created with press " + snap.press + " ratio " +
                           std::to_string(snap.ratio),
                       "primekv"};
    }
    s.cache = std::make_unique<KvCache>(std::move(*snap.cache));
    s.cache_salt = snap.cache_salt;
    s.tokens = std::move(snap.tokens);
    s.budget = snap.budget;
    s.last_prompt_len = snap.last_prompt_len;
    s.turn = snap.turn;
    s.capture.reset();  // a restored session starts with an empty query window
    s.load = false;
    restored = true;
    ++counters_.restores;
  }
  if (!s.capture || !s.cache) {
    std::lock_guard lock(store_mu_);
    if (!s.cache) s.cache = std::make_unique<KvCache>(model_->NewCache(kv_));
    if (!s.capture)
      s.capture = std::make_unique<PressCapture>(*model_, CompressorFor(s.press).Needs());
  }
  return std::nullopt;
}

void Engine::DropIfBehind(Session& s) {
  if (!backend_ || !backend_->shared() || !s.cache || s.load) return;
  auto stored = backend_->StoredTurn(s.tenant, s.id);
  if (!stored.ok()) {
    // Unreachable store: this replica's copy is the best there is.
    std::fprintf(stderr, "primekv serve: %s\n", stored.message().c_str());
    return;
  }
  if (!*stored || **stored <= s.turn) return;
  std::lock_guard lock(store_mu_);
  DropCacheLocked(s);
  s.load = true;
}

Status Engine::Persist(Session& s) {
  if (!backend_) return Status::Ok();
  SessionSnapshot snap;
  snap.id = s.id;
  snap.tenant = s.tenant;
  snap.cache_salt = s.cache_salt;
  snap.press = s.press;
  snap.ratio = s.ratio;
  snap.mode = std::string(CompressionModeName(options_.mode));
  snap.budget = s.budget;
  snap.last_prompt_len = s.last_prompt_len;
  snap.turn = s.turn;
  snap.tokens = s.tokens;
  auto saved = backend_->Save(snap, *s.cache);
  std::lock_guard lock(store_mu_);
  if (!saved.ok()) {
    s.persisted = false;
    return saved.status();
  }
  s.persisted = *saved != SessionBackend::Saved::kTooLarge;
  // Another replica stored this turn number or a later one first: that one is the session
  // now (Finish drops this copy).
  if (*saved == SessionBackend::Saved::kStale) s.load = true;
  if (*saved == SessionBackend::Saved::kTooLarge)
    return Status::Error("session " + s.id + " exceeds --store-max-kib: not stored");
  return Status::Ok();
}

}  // namespace primekv::server
