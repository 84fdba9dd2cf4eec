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

std::string Engine::NewSessionIdLocked() {
  // splitmix64 of a salted counter: unique in this run, unlikely to collide across runs.
  uint64_t z = id_salt_ + 0x9E3779B97F4A7C15ull * ++id_counter_;
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  z ^= z >> 31;
  char hex[17];
  std::snprintf(hex, sizeof(hex), "%016llx", static_cast<unsigned long long>(z));
  return std::string("s") + hex;
}

std::variant<Session*, HttpError> Engine::FindSessionLocked(const TurnRequest& req, size_t& keep) {
  Session* s = nullptr;
  keep = 0;
  if (!req.session_id.empty()) {
    auto it = sessions_.find(req.session_id);
    if (it == sessions_.end()) {
      return HttpError{404, "unknown session '" + req.session_id + "'", "session",
                       "not_found_error"};
    }
    s = it->second.get();
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
    keep = CommonPrefix(s->tokens, req.prompt);
  } else {
    // Token-prefix match: the request must contain the session's whole last prompt (its
    // answer may be re-tokenised differently; the cache is cut where the tokens diverge).
    for (auto& [id, cand] : sessions_) {
      if (cand->busy || cand->press != req.press || cand->ratio != req.ratio) continue;
      const size_t lcp = CommonPrefix(cand->tokens, req.prompt);
      if (lcp == 0 || lcp < static_cast<size_t>(cand->last_prompt_len)) continue;
      if (!s || lcp > keep) {
        s = cand.get();
        keep = lcp;
      }
    }
  }
  if (!s) {
    auto fresh = std::make_unique<Session>();
    fresh->id = NewSessionIdLocked();
    if (sessions_.count(fresh->id))
      return HttpError{500, "session id collision; retry", "", "server_error"};
    fresh->press = req.press;
    fresh->ratio = req.ratio;
    s = fresh.get();
    sessions_[fresh->id] = std::move(fresh);
  }
  s->busy = true;
  s->last_used = ++clock_;
  return s;
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
      return HttpError{404, "session '" + id + "' could not be restored: " + snap.message(),
                       "session", "not_found_error"};
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
  snap.press = s.press;
  snap.ratio = s.ratio;
  snap.mode = std::string(CompressionModeName(options_.mode));
  snap.budget = s.budget;
  snap.last_prompt_len = s.last_prompt_len;
  snap.tokens = s.tokens;
  return WriteSessionFile(options_.session_dir, snap, *s.cache);
}

}  // namespace primekv::server
