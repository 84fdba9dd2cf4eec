// Where `primekv serve` keeps sessions between turns: a directory of session files
// (--session-dir, one replica) or Redis (--session-store redis://..., shared by replicas). Both
// hold the same bytes, a Conversation's session file image (session/session_file.h) with its
// checksum.
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "primekv/server/server.h"
#include "primekv/session/conversation.h"
#include "primekv/session/record.h"
#include "primekv/session/session_file.h"
#include "primekv/util/status.h"
#include "server/common.h"

namespace primekv::server {

// A stored session whose last prompt begins a new conversation's prompt (a shared store's
// prefix index: SessionBackend::FindPrefix).
struct PrefixHit {
  std::string id;
  size_t length = 0;  // the stored session's last prompt length: the tokens the hit covers
};

// Counters of one backend, for /metrics.
struct StoreStats {
  uint64_t loads = 0, saves = 0, misses = 0, rejected = 0, stale_saves = 0, too_large = 0;
  uint64_t errors = 0;       // the store could not be reached or answered an error
  uint64_t prefix_hits = 0;  // FindPrefix answers naming a session
  uint64_t bytes_loaded = 0, bytes_saved = 0;
  double load_seconds = 0, save_seconds = 0;
};

class SessionBackend {
 public:
  enum class Saved { kSaved, kStale, kTooLarge };
  enum class Found { kFound, kMissing, kDamaged };
  struct Loaded {
    Found found = Found::kMissing;
    ConversationRecord snapshot;  // kFound: with its cache
    ImageExtent extent;           // kFound: what the store holds of it
    std::string why;              // kDamaged: what was wrong, for the log
  };

  virtual ~SessionBackend() = default;
  virtual const char* name() const = 0;
  // Where session `id`'s image lies, as Conversation::stored() names it (a file's path, or
  // "redis").
  virtual std::string where(const std::string& id) const = 0;
  // True when other replicas write to the same store (a local copy may then be behind).
  virtual bool shared() const = 0;
  // Writes the conversation's turn (its record's): a delta over what the store holds when the
  // conversation knows that, else the whole image; kStale (nothing written) when the store holds
  // that turn or a newer one. An error means the store is unreachable.
  virtual Result<Saved> Save(Conversation& conv) = 0;
  // The session `id` of `tenant`. kDamaged: refused (checksum, shape, another id or tenant).
  virtual Result<Loaded> Load(const std::string& tenant, const std::string& id) = 0;
  // The turn the store holds (nullopt: none); only asked of shared stores.
  virtual Result<std::optional<uint64_t>> StoredTurn(const std::string& tenant,
                                                     const std::string& id) = 0;
  // Cross-replica prefix reuse: a stored session of the same tenant, cache salt, press and
  // ratio whose last prompt begins `prompt` (the longest such), by the hash of those tokens
  // (LMCache's way: any replica finds what another one computed). Only shared stores keep the
  // index; the others answer none.
  virtual Result<std::optional<PrefixHit>> FindPrefix(const ConversationRecord& like,
                                                      const std::vector<Token>& prompt) {
    (void)like;
    (void)prompt;
    return std::optional<PrefixHit>();
  }
  StoreStats stats() const;

 protected:
  void CountLoad(const Result<Loaded>& r, std::chrono::steady_clock::time_point t0, size_t bytes);
  void CountSave(const Result<Saved>& r, std::chrono::steady_clock::time_point t0, size_t bytes);
  void CountError();
  void CountPrefixHit();

 private:
  mutable std::mutex stats_mu_;
  StoreStats stats_;
};

// --session-dir: <dir>/<id>.pkvs, written atomically (session/session_file.h).
std::unique_ptr<SessionBackend> MakeDirBackend(std::string dir, const Model& model,
                                               const KvCacheOptions& kv);

// redis://HOST[:PORT][/DB]
struct RedisAddress {
  std::string host;
  int port = 6379;
  int db = 0;
};
Result<RedisAddress> ParseRedisUrl(const std::string& url);
// The key of a session: namespaced by the tenant id (never the API key itself).
std::string RedisSessionKey(const std::string& tenant, const std::string& id);
// The prefix index of one tenant, salt, press and ratio: a hash whose fields are
// "<hash of a session's last prompt, hex>:<its length>" and values session ids.
std::string RedisPrefixKey(const ConversationRecord& like);
// FNV-1a 64 of each prefix of `tokens` (as i32 bytes): hashes[n] covers tokens[0, n).
std::vector<uint64_t> PrefixHashes(const std::vector<Token>& tokens, size_t up_to);
// Connects lazily (and again after an error); `ttl_s` 0 = no expiry; values over `max_bytes`
// are not written.
std::unique_ptr<SessionBackend> MakeRedisBackend(const RedisAddress& address, int ttl_s,
                                                 size_t max_bytes, const Model& model,
                                                 const KvCacheOptions& kv);

}  // namespace primekv::server
