// The session store of `primekv serve`: finding the session a request continues, eviction,
// and the sessions kept in --session-dir.
#include <cstdio>
#include <filesystem>

#include "server/server_internal.h"

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
    s->tokens = std::move(snap->tokens);
    s->persisted = true;
    sessions_[s->id] = std::move(s);
  }
  std::fprintf(stderr, "primekv serve: %zu session(s) indexed from %s\n", sessions_.size(),
               options_.session_dir.c_str());
}

bool Engine::EvictOneLocked(const Session* except) {
  Session* victim = nullptr;
  for (auto& [id, s] : sessions_) {
    if (s.get() == except || s->busy || !s->cache) continue;
    if (!victim || s->last_used < victim->last_used) victim = s.get();
  }
  if (!victim) return false;
  bytes_used_ -= victim->bytes;
  ++counters_.evictions;
  if (!victim->persisted) {
    const std::string id = victim->id;
    sessions_.erase(id);  // nowhere to keep it: the conversation is forgotten
  } else {
    // Its file is current (written after every completed turn): dropping the cache loses
    // nothing.
    victim->cache.reset();
    victim->capture.reset();
    victim->bytes = 0;
  }
  return true;
}

Session* Engine::BestPrefixLocked(const TurnRequest& req, size_t& keep) {
  // The request must contain the session's whole last prompt (its answer may be re-tokenised
  // differently); only sessions of the same tenant, salt, press and ratio are candidates.
  Session* best = nullptr;
  keep = 0;
  for (auto& [id, cand] : sessions_) {
    if (cand->busy || cand->tenant != req.tenant || cand->cache_salt != req.cache_salt ||
        cand->press != req.press || cand->ratio != req.ratio)
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
    // Another tenant's session is answered exactly as one that does not exist.
    if (it == sessions_.end() || it->second->tenant != req.tenant) {
      return HttpError{404, "unknown session '" + req.session_id + "'", "session",
                       "not_found_error"};
    }
    Session* s = it->second.get();
    if (s->busy) {
      return HttpError{409, "session '" + req.session_id + "' is answering another request",
                       "session"};
    }
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

void Engine::CopyPrefix(Session& s, Session& source, size_t& keep) {
  bool restored = false;
  if (RestoreIfEvicted(source, restored)) {
    keep = 0;  // its file was unreadable (and it is gone): start afresh
    return;
  }
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
  if (!s.cache && !s.tokens.empty()) {
    // File I/O outside the store lock; the session is busy, so no one else touches it.
    auto snap = ReadSessionFile(options_.session_dir + "/" + s.id + ".pkvs", *model_, kv_, false);
    std::lock_guard lock(store_mu_);
    if (!snap.ok()) {
      std::fprintf(stderr, "primekv serve: %s\n", snap.message().c_str());
      ++counters_.session_files_rejected;
      const std::string id = s.id;
      sessions_.erase(id);
      // The reason, with the file's path, is the operator's (logged above), not the client's.
      return HttpError{404, "session '" + id + "' could not be restored from its file", "session",
                       "not_found_error"};
    }
    s.cache = std::make_unique<KvCache>(std::move(*snap->cache));
    s.tokens = std::move(snap->tokens);
    s.budget = snap->budget;
    s.last_prompt_len = snap->last_prompt_len;
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

Status Engine::Persist(Session& s) {
  if (options_.session_dir.empty()) return Status::Ok();
  SessionSnapshot snap;
  snap.id = s.id;
  snap.tenant = s.tenant;
  snap.cache_salt = s.cache_salt;
  snap.press = s.press;
  snap.ratio = s.ratio;
  snap.mode = std::string(CompressionModeName(options_.mode));
  snap.budget = s.budget;
  snap.last_prompt_len = s.last_prompt_len;
  snap.tokens = s.tokens;
  return WriteSessionFile(options_.session_dir, snap, *s.cache);
}

}  // namespace primekv::server
