// The sessions of `primekv serve` (stored_session.h) under their own lock: finding the session
// a request continues, tenants' shares and eviction, and the copies kept in the backend
// (--session-dir or --session-store; session_backend.h). It never calls the memory budget
// (memory_budget.h): what a call frees or takes is returned in bytes, for the engine to hand on.
#pragma once

#include <cstddef>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <variant>
#include <vector>

#include "server/common.h"
#include "server/http_error.h"
#include "server/memory_budget.h"
#include "server/request.h"
#include "server/server_metrics.h"
#include "server/session_backend.h"
#include "server/stored_session.h"
#include "server/turn_request.h"

namespace primekv::server {

class Metrics;
class SessionBackend;

// A session's bytes in the budget before and after a call (MemoryBudget::Replace).
struct Accounted {
  size_t before = 0;
  size_t after = 0;
};

class SessionStore {
 public:
  // `backend` null: sessions live in memory only. Evictions, restores and refused session
  // files are counted in `metrics`.
  // Conversations run on `pool`, their forward passes and compressions under `model_mutex`
  // (the decode batcher's).
  SessionStore(const Model& model, const KvCacheOptions& kv, const ServerOptions& options,
               std::unique_ptr<SessionBackend> backend, Metrics& metrics, ThreadPool& pool,
               std::mutex& model_mutex);
  ~SessionStore();

  // Knows the sessions of --session-dir by their headers (caches are read on first use).
  void IndexDir(const std::string& dir);
  // Adds a session over `record` (its id must be new), with an empty cache when the record
  // has none and `in_memory`, else without one (known by its tokens, as after an eviction).
  Session& Add(ConversationRecord record, bool in_memory);
  const SessionBackend* backend() const { return backend_.get(); }
  size_t size() const;
  // The compressor of a press spec (made once; CheckPress accepted the spec).
  const Compressor& CompressorFor(const std::string& press);

  // A request naming session `id` waits for a slot: kBusy (409) when the session answers or
  // awaits another request, kClaimed when this one now awaits it, kUnknown when there is none
  // of the tenant's by that id.
  enum class Claim { kUnknown, kClaimed, kBusy };
  Claim ClaimNamed(const std::string& tenant, const std::string& id);
  void Unclaim(const std::string& id);

  // The session a turn runs on: the one the request names (continued in place), or a new one,
  // which starts from a copy of `source`'s first `keep` tokens when the request shares them
  // with a session of its tenant and salt (prefix reuse never changes that session). Both are
  // marked busy.
  struct Found {
    Session* session = nullptr;
    Session* source = nullptr;
    size_t keep = 0;
  };
  std::variant<Found, HttpError> Find(const TurnRequest& req);
  // The copy of source's first `keep` tokens into `s`, which releases `source` (the result is
  // its accounting); keep becomes 0 when the source cannot be read back from the store (the
  // request then starts afresh).
  Accounted CopyPrefix(Session& s, Session& source, const std::vector<Token>& prompt, size_t& keep);
  // Reads an evicted session, or one known by id only, back from the store (on failure the
  // session is dropped or released), and gives it a cache and capture.
  std::optional<HttpError> RestoreIfEvicted(Session& s, bool& restored);
  // A shared store holds a newer turn of `s` than this replica (another replica served it):
  // the local copy is dropped and the session is read from the store.
  Accounted DropIfBehind(Session& s);

  // Accounts what the pool of the cache of `s` holds now.
  Accounted Account(Session& s);
  // Whether `tenant` may hold `more` bytes under --tenant-kv-mib (always without it).
  bool TenantFits(const std::string& tenant, size_t more) const;
  // Evicts one idle session for a request of `tenant`: of a tenant over its share first, else
  // the tenant's own (only its own when `own_only`). The bytes freed; nullopt when none is.
  std::optional<size_t> EvictOne(const Session* except, const std::string& tenant, bool own_only);
  void SetReserved(Session& s, size_t bytes);
  // Releases the session of a refused request: forgotten when empty, back to the store when it
  // was only read for this request. The bytes freed.
  size_t Refuse(Session& s, bool restored);
  // Releases the session of a request giving way: forgotten, or its cache dropped. Bytes freed.
  size_t GiveWay(Session& s, bool forget);
  // A turn on `s` ended (`ok`: completed; `modified`: it changed the session).
  Accounted Finish(Session& s, bool ok, bool modified);
  // Writes the session's completed turn to the backend (none: OK).
  Status Persist(Session& s);

  // What the cache view reads of an idle session of `tenant` (404 as an unknown one for any
  // other tenant's; 409 while a turn runs on it or while its cache is not in memory).
  struct CacheSnapshot {
    std::string id{}, press{};
    Schedule schedule{};
    std::vector<Token> tokens{};
    int n_layers = 0, n_heads = 0;
    std::vector<std::vector<int32_t>> positions{};  // [layer * n_heads + head], ascending
    size_t bytes_per_entry = 0;                     // one key, value and position of one head
    std::vector<int> last_before{}, last_after{};   // ConversationStats' last compression
    std::vector<TurnFigures> turns{};
  };
  std::variant<CacheSnapshot, HttpError> Snapshot(const std::string& tenant, const std::string& id);

  struct Census {
    size_t bytes_held = 0;  // sessions' caches in memory (a pool that caches share, once)
    size_t in_memory = 0, on_disk = 0;
    size_t kv_pools = 0;  // distinct page pools behind those caches
  };
  Census census() const;
  // Bytes each tenant holds (sessions and running turns' reservations).
  std::map<std::string, size_t> TenantBytes() const;

 private:
  Session* BestPrefixLocked(const TurnRequest& req, size_t& keep);
  // A new conversation's prefix in a session another replica stored (the shared store's prefix
  // index), when no session here matches; asked without the lock held.
  std::optional<PrefixHit> RemotePrefix(const TurnRequest& req);
  // A session the shared store holds, known here by id only until RestoreIfEvicted reads it.
  Session& AddStoredLocked(ConversationRecord record);
  // That session, added as known by id only (read by CopyPrefix); null when it is here already.
  Session* RemoteSourceLocked(const TurnRequest& req, const PrefixHit& hit, size_t& keep);
  const Compressor& CompressorForLocked(const std::string& press);
  // A conversation over `r` (its id, tenant, salt, press and ratio), under the server's mode.
  std::unique_ptr<Conversation> NewConversationLocked(ConversationRecord r);
  std::map<std::string, size_t> TenantBytesLocked() const;
  // A tenant's share: --tenant-kv-mib, or the budget over the tenants holding memory (and the
  // requester's).
  size_t TenantShareLocked(const std::map<std::string, size_t>& held,
                           const std::string& tenant) const;
  bool TenantFitsLocked(const std::string& tenant, size_t more) const;
  // Frees a session's cache; its tokens stay, so the next request reads it back from the
  // store. The bytes freed.
  size_t DropCacheLocked(Session& s);
  // Removes a session (`s` is destroyed). The bytes freed.
  size_t ForgetLocked(Session& s);
  // Charges the page pool of the session's cache at what the pool holds now. Caches made by a
  // prefix match share their source's pool, so a pool is charged once, whichever of its
  // sessions changed it; the pool's bytes before and after.
  Accounted ChargeLocked(Session& s);
  // The session lets go of its pool's charge: what the pool cost when it was the last session
  // charged for it (the pool is gone with its cache), else 0 (the others still hold it).
  size_t DetachLocked(Session& s);

  const Model& model_;
  const KvCacheOptions kv_;
  const ServerOptions options_;
  const std::unique_ptr<SessionBackend> backend_;
  Metrics& metrics_;
  ThreadPool& pool_;
  std::mutex& model_mutex_;
  mutable std::mutex mu_;  // everything below, and the sessions' bookkeeping fields
  std::map<std::string, std::unique_ptr<Session>> sessions_;
  struct PoolCharge {
    size_t bytes = 0;  // the pool's bytes when last charged
    int sessions = 0;  // sessions charged for it (one tenant's: prefixes never cross tenants)
    std::string tenant;
  };
  std::map<std::weak_ptr<const void>, PoolCharge, std::owner_less<>> kv_pools_;
  std::map<std::string, std::unique_ptr<Compressor>> compressors_;
  uint64_t clock_ = 0;  // last_used of the sessions
};

}  // namespace primekv::server
