// The Redis session backend (--session-store redis://HOST:PORT/DB), through hiredis: one hash per
// session, key primekv:session:<tenant id>:<session id>, fields `turn` (the turn counter), `data`
// (a session file's base record, checksum included), `nd` and `d1`..`dN` (the deltas appended
// since, session/session_file.h). Writes are Lua scripts that change the hash only when their
// turn is newer than the stored one, so a replica that is behind never overwrites a turn another
// replica already served; a delta is appended only onto the turn it was computed from.
#include <hiredis/hiredis.h>

#include <charconv>
#include <cstdio>
#include <cstring>
#include <string_view>

#include "server/session_backend.h"

namespace primekv::server {

namespace {

// KEYS[1] the session; ARGV: turn, image, ttl seconds (0 = none). 1 = written, 0 = stale.
constexpr const char* kSaveScript = R"(
local cur = tonumber(redis.call('HGET', KEYS[1], 'turn') or '-1')
if cur >= tonumber(ARGV[1]) then return 0 end
redis.call('DEL', KEYS[1])
redis.call('HSET', KEYS[1], 'turn', ARGV[1], 'data', ARGV[2], 'nd', 0)
if tonumber(ARGV[3]) > 0 then redis.call('EXPIRE', KEYS[1], ARGV[3]) end
return 1
)";

// KEYS[1] the session; ARGV: turn, delta, ttl, the turn the delta follows. 1 = appended, 0 =
// stale, 2 = the store holds another turn than the delta follows (write the whole image).
constexpr const char* kAppendScript = R"(
local cur = tonumber(redis.call('HGET', KEYS[1], 'turn') or '-1')
if cur >= tonumber(ARGV[1]) then return 0 end
if cur ~= tonumber(ARGV[4]) then return 2 end
local n = tonumber(redis.call('HGET', KEYS[1], 'nd') or '0') + 1
redis.call('HSET', KEYS[1], 'turn', ARGV[1], 'd' .. n, ARGV[2], 'nd', n)
if tonumber(ARGV[3]) > 0 then redis.call('EXPIRE', KEYS[1], ARGV[3]) end
return 1
)";

// KEYS[1] a prefix index; ARGV: field, session id, ttl. An index past 4,096 entries starts
// anew (it is a cache of where prefixes are, not a record).
constexpr const char* kIndexScript = R"(
if redis.call('HLEN', KEYS[1]) >= 4096 then redis.call('DEL', KEYS[1]) end
redis.call('HSET', KEYS[1], ARGV[1], ARGV[2])
if tonumber(ARGV[3]) > 0 then redis.call('EXPIRE', KEYS[1], ARGV[3]) end
return 1
)";

// KEYS[1] the session: {turn, base, delta 1, ..., delta N} in one atomic read.
constexpr const char* kLoadScript = R"(
local v = redis.call('HMGET', KEYS[1], 'turn', 'data', 'nd')
local out = {v[1] or false, v[2] or false}
for i = 1, tonumber(v[3] or '0') or 0 do
  out[#out + 1] = redis.call('HGET', KEYS[1], 'd' .. i) or false
end
return out
)";

struct ReplyDeleter {
  void operator()(redisReply* r) const { freeReplyObject(r); }
};
using Reply = std::unique_ptr<redisReply, ReplyDeleter>;
struct ContextDeleter {
  void operator()(redisContext* c) const { redisFree(c); }
};

std::optional<uint64_t> ParseHex(std::string_view text) {
  uint64_t v = 0;
  const auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), v, 16);
  if (ec != std::errc() || end != text.data() + text.size()) return std::nullopt;
  return v;
}

std::optional<uint64_t> ParseU64(const char* p, size_t n) {
  uint64_t v = 0;
  const auto [end, ec] = std::from_chars(p, p + n, v);
  if (ec != std::errc() || end != p + n) return std::nullopt;
  return v;
}

class RedisBackend final : public SessionBackend {
 public:
  RedisBackend(const RedisAddress& a, int ttl_s, size_t max_bytes, const Model& model,
               const KvCacheOptions& kv)
      : address_(a), ttl_s_(ttl_s), max_bytes_(max_bytes), model_(model), kv_(kv) {}
  const char* name() const override { return "redis"; }
  std::string where(const std::string&) const override { return "redis"; }
  bool shared() const override { return true; }

  Result<Saved> Save(Conversation& conv) override {
    const auto t0 = std::chrono::steady_clock::now();
    auto w = conv.NextWrite("redis");
    if (!w.ok()) return w.status();
    Result<Answer> a = Write(conv, *w);
    if (a.ok() && *a == Answer::kOtherTurn) {
      // The store holds another turn than the delta follows: the whole image replaces it.
      conv.SetStored(std::nullopt);
      w = conv.NextWrite("redis");
      if (!w.ok()) return w.status();
      a = Write(conv, *w);
    }
    Result<Saved> r = Saved::kStale;
    if (!a.ok()) {
      r = a.status();
    } else if (*a == Answer::kSaved) {
      r = Saved::kSaved;
      conv.Stored(*w, "redis");
      Index(conv.record());
    } else if (*a == Answer::kTooLarge) {
      r = Saved::kTooLarge;
    }
    CountSave(r, t0, w->bytes.size());
    return r;
  }

  Result<Loaded> Load(const std::string& tenant, const std::string& id) override {
    const auto t0 = std::chrono::steady_clock::now();
    const std::string key = RedisSessionKey(tenant, id);
    const char* argv[] = {"EVAL", kLoadScript, "1", key.c_str()};
    const size_t lens[] = {4, std::strlen(kLoadScript), 1, key.size()};
    auto reply = Command(4, argv, lens);
    size_t bytes = 0;
    Result<Loaded> r = reply.ok() ? Decode(**reply, tenant, id, bytes) : reply.status();
    CountLoad(r, t0, bytes);
    return r;
  }

  Result<std::optional<PrefixHit>> FindPrefix(const ConversationRecord& like,
                                              const std::vector<Token>& prompt) override {
    const std::string key = RedisPrefixKey(like);
    const char* argv[] = {"HGETALL", key.c_str()};
    const size_t lens[] = {7, key.size()};
    auto reply = Command(2, argv, lens);
    if (!reply.ok()) return reply.status();
    const redisReply& rep = **reply;
    if (rep.type != REDIS_REPLY_ARRAY) return Status::Error("redis: unexpected answer to HGETALL");
    const std::vector<uint64_t> hashes = PrefixHashes(prompt, prompt.size());
    std::optional<PrefixHit> best;
    for (size_t i = 0; i + 1 < rep.elements; i += 2) {
      const redisReply* f = rep.element[i];
      const redisReply* v = rep.element[i + 1];
      if (f->type != REDIS_REPLY_STRING || v->type != REDIS_REPLY_STRING) continue;
      const std::string_view field(f->str, f->len);
      const size_t colon = field.find(':');
      if (colon == std::string_view::npos) continue;
      const auto hash = ParseHex(field.substr(0, colon));
      const auto length = ParseU64(field.data() + colon + 1, field.size() - colon - 1);
      if (!hash || !length || *length == 0 || *length > prompt.size()) continue;
      if (hashes[*length] != *hash || (best && best->length >= *length)) continue;
      const std::string id(v->str, v->len);
      if (ValidSessionId(id)) best = PrefixHit{id, static_cast<size_t>(*length)};
    }
    if (best) CountPrefixHit();
    return best;
  }

  Result<std::optional<uint64_t>> StoredTurn(const std::string& tenant,
                                             const std::string& id) override {
    const std::string key = RedisSessionKey(tenant, id);
    const char* argv[] = {"HGET", key.c_str(), "turn"};
    const size_t lens[] = {4, key.size(), 4};
    auto reply = Command(3, argv, lens);
    if (!reply.ok()) return reply.status();
    const redisReply& rep = **reply;
    if (rep.type == REDIS_REPLY_NIL) return std::optional<uint64_t>();
    if (rep.type != REDIS_REPLY_STRING) return Status::Error("redis: unexpected answer to HGET");
    // A counter that does not parse is taken as the newest: the value is loaded and refused.
    return std::optional<uint64_t>(ParseU64(rep.str, rep.len).value_or(UINT64_MAX));
  }

 private:
  enum class Answer { kSaved, kStale, kOtherTurn, kTooLarge };

  // Names the saved session in its tenant's prefix index under its last prompt. A failure
  // costs only a later cross-replica match (counted as an error).
  void Index(const ConversationRecord& s) {
    if (s.last_prompt_len <= 0 || static_cast<size_t>(s.last_prompt_len) > s.tokens.size()) return;
    const size_t n = static_cast<size_t>(s.last_prompt_len);
    char hex[17];
    std::snprintf(hex, sizeof(hex), "%016llx",
                  static_cast<unsigned long long>(PrefixHashes(s.tokens, n)[n]));
    const std::string key = RedisPrefixKey(s), field = std::string(hex) + ":" + std::to_string(n);
    const std::string ttl = std::to_string(ttl_s_);
    const char* argv[] = {"EVAL",        kIndexScript, "1",        key.c_str(),
                          field.c_str(), s.id.c_str(), ttl.c_str()};
    const size_t lens[] = {
        4, std::strlen(kIndexScript), 1, key.size(), field.size(), s.id.size(), ttl.size()};
    if (!Command(7, argv, lens).ok()) CountError();
  }

  // One save script: the whole image (kSaveScript) or a delta (kAppendScript); nothing is sent
  // when the value would grow past max_bytes.
  Result<Answer> Write(const Conversation& conv, const Conversation::StoreWrite& w) {
    const ConversationRecord& s = conv.record();
    const uint64_t total = w.bytes.size() + (w.delta ? conv.stored()->extent.bytes : 0);
    if (total > max_bytes_) return Answer::kTooLarge;
    const std::string key = RedisSessionKey(s.tenant, s.id);
    const std::string turn = std::to_string(s.turn), ttl = std::to_string(ttl_s_);
    const std::string after = std::to_string(w.after_turn);
    const char* script = w.delta ? kAppendScript : kSaveScript;
    const char* argv[] = {"EVAL",       script,         "1",         key.c_str(),
                          turn.c_str(), w.bytes.data(), ttl.c_str(), after.c_str()};
    const size_t lens[] = {4,           std::strlen(script), 1,          key.size(),
                           turn.size(), w.bytes.size(),      ttl.size(), after.size()};
    auto reply = Command(w.delta ? 8 : 7, argv, lens);
    if (!reply.ok()) return reply.status();
    if ((*reply)->type != REDIS_REPLY_INTEGER)
      return Status::Error("redis: unexpected answer to the save script");
    switch ((*reply)->integer) {
      case 1:
        return Answer::kSaved;
      case 0:
        return Answer::kStale;
      default:
        return Answer::kOtherTurn;
    }
  }

  // The session in a load script's answer, verified as a session file is.
  Result<Loaded> Decode(const redisReply& rep, const std::string& tenant, const std::string& id,
                        size_t& bytes) {
    if (rep.type != REDIS_REPLY_ARRAY || rep.elements < 2)
      return Status::Error("redis: unexpected answer to the load script");
    const redisReply* turn = rep.element[0];
    const redisReply* data = rep.element[1];
    Loaded out;
    if (data->type == REDIS_REPLY_NIL) return out;  // kMissing
    out.found = Found::kDamaged;
    if (data->type != REDIS_REPLY_STRING || turn->type != REDIS_REPLY_STRING) {
      out.why = "not a session value";
      return out;
    }
    // The base and its deltas, as one image.
    std::string image(data->str, data->len);
    for (size_t i = 2; i < rep.elements; ++i) {
      const redisReply* d = rep.element[i];
      if (d->type != REDIS_REPLY_STRING) {
        out.why = "a delta is missing";
        return out;
      }
      image.append(d->str, d->len);
    }
    bytes = image.size();
    auto snap = ParseSessionImage(image, model_, kv_, &out.extent);
    if (!snap.ok()) {
      out.why = snap.message();
      return out;
    }
    // The image must be this key's: a value copied under another id or tenant is refused.
    if (snap->id != id || snap->tenant != tenant) {
      out.why = "the value holds another session or tenant";
      return out;
    }
    if (ParseU64(turn->str, turn->len) != snap->turn) {
      out.why = "the turn counter does not match the value";
      return out;
    }
    out.found = Found::kFound;
    out.snapshot = std::move(snap).value();
    return out;
  }

  // One command on the shared connection (connecting first when there is none). A connection
  // that fails is dropped and the command is sent once more on a new one: after a Redis restart
  // the old connection fails at its first use. (Both commands may be repeated: a load reads, and
  // a save of the same turn is refused the second time.)
  Result<Reply> Command(int argc, const char** argv, const size_t* lens) {
    std::lock_guard lock(mu_);
    Reply reply;
    for (int attempt = 0; attempt < 2 && !reply; ++attempt) {
      const bool fresh = !ctx_;
      if (fresh) {
        if (Status st = ConnectLocked(); !st.ok()) return st;
      }
      reply.reset(static_cast<redisReply*>(redisCommandArgv(ctx_.get(), argc, argv, lens)));
      if (!reply) {
        const std::string why = ctx_->errstr;
        ctx_.reset();  // unusable after an I/O error
        if (fresh) return Status::Error("redis " + Where() + ": " + why);
      }
    }
    if (!reply) return Status::Error("redis " + Where() + ": no answer");
    if (reply->type == REDIS_REPLY_ERROR)
      return Status::Error("redis " + Where() + ": " + std::string(reply->str, reply->len));
    return reply;
  }

  Status ConnectLocked() {
    const timeval timeout{2, 0};  // a dead store fails a turn's save or load, not the server
    std::unique_ptr<redisContext, ContextDeleter> c(
        redisConnectWithTimeout(address_.host.c_str(), address_.port, timeout));
    if (!c) return Status::Error("redis " + Where() + ": out of memory");
    if (c->err) return Status::Error("redis " + Where() + ": " + c->errstr);
    if (redisSetTimeout(c.get(), timeout) != REDIS_OK)
      return Status::Error("redis " + Where() + ": cannot set the timeout");
    if (address_.db != 0) {
      Reply r(static_cast<redisReply*>(redisCommand(c.get(), "SELECT %d", address_.db)));
      if (!r || r->type == REDIS_REPLY_ERROR)
        return Status::Error("redis " + Where() + ": cannot select database " +
                             std::to_string(address_.db));
    }
    ctx_ = std::move(c);
    return Status::Ok();
  }

  std::string Where() const { return address_.host + ":" + std::to_string(address_.port); }

  RedisAddress address_;
  int ttl_s_;
  size_t max_bytes_;
  const Model& model_;
  KvCacheOptions kv_;
  std::mutex mu_;  // the connection: hiredis contexts are not thread-safe
  std::unique_ptr<redisContext, ContextDeleter> ctx_;
};

}  // namespace

Result<RedisAddress> ParseRedisUrl(const std::string& url) {
  const std::string_view scheme = "redis://";
  const std::string bad = "'" + url + "' is not redis://HOST[:PORT][/DB]";
  if (url.rfind(scheme, 0) != 0) return Status::Error(bad);
  std::string rest = url.substr(scheme.size());
  RedisAddress a;
  if (const size_t slash = rest.find('/'); slash != std::string::npos) {
    const std::string db = rest.substr(slash + 1);
    rest.resize(slash);
    const auto v = ParseU64(db.data(), db.size());
    if (!db.empty() && (!v || *v > 1000)) return Status::Error(bad + " (DB: 0..1000)");
    a.db = static_cast<int>(v.value_or(0));
  }
  if (const size_t colon = rest.rfind(':'); colon != std::string::npos) {
    const std::string port = rest.substr(colon + 1);
    const auto v = ParseU64(port.data(), port.size());
    if (!v || *v < 1 || *v > 65535) return Status::Error(bad + " (PORT: 1..65535)");
    a.port = static_cast<int>(*v);
    rest.resize(colon);
  }
  if (rest.empty() || rest.find_first_of("@?#") != std::string::npos) return Status::Error(bad);
  a.host = rest;
  return a;
}

namespace {

constexpr uint64_t kFnvOffset = 1469598103934665603ull;

// FNV-1a 64 of `n` more bytes after state `h`.
uint64_t Fnv1a(uint64_t h, const void* data, size_t n) {
  const auto* b = static_cast<const unsigned char*>(data);
  for (size_t i = 0; i < n; ++i) {
    h ^= b[i];
    h *= 1099511628211ull;
  }
  return h;
}

}  // namespace

std::vector<uint64_t> PrefixHashes(const std::vector<Token>& tokens, size_t up_to) {
  std::vector<uint64_t> out(std::min(up_to, tokens.size()) + 1);
  out[0] = kFnvOffset;
  for (size_t i = 0; i + 1 < out.size(); ++i) out[i + 1] = Fnv1a(out[i], &tokens[i], sizeof(Token));
  return out;
}

std::string RedisPrefixKey(const ConversationRecord& like) {
  // Salt, press and ratio as one hash: prefixes are shared only between equal ones.
  char ratio[32];
  std::snprintf(ratio, sizeof(ratio), "%.17g", like.schedule.ratio);
  const std::string what = like.cache_salt + '\0' + like.press + '\0' + ratio;
  const uint64_t h = Fnv1a(kFnvOffset, what.data(), what.size());
  char hex[17];
  std::snprintf(hex, sizeof(hex), "%016llx", static_cast<unsigned long long>(h));
  return "primekv:prefix:" + (like.tenant.empty() ? std::string("-") : like.tenant) + ":" + hex;
}

std::string RedisSessionKey(const std::string& tenant, const std::string& id) {
  return "primekv:session:" + (tenant.empty() ? std::string("-") : tenant) + ":" + id;
}

std::unique_ptr<SessionBackend> MakeRedisBackend(const RedisAddress& address, int ttl_s,
                                                 size_t max_bytes, const Model& model,
                                                 const KvCacheOptions& kv) {
  return std::make_unique<RedisBackend>(address, ttl_s, max_bytes, model, kv);
}

}  // namespace primekv::server

primekv::Status primekv::ValidateSessionStoreUrl(const std::string& url) {
  return server::ParseRedisUrl(url).status();
}
