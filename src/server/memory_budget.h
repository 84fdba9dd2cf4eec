// The KV budget of `primekv serve`: the bytes sessions hold plus what running turns reserved,
// the requests waiting for room, and how they give way to each other. A turn's memory is
// reserved before it runs. The sessions themselves are the store's: a reservation asks the
// store through its Request's Claimant, under this budget's lock, and the store never calls
// the budget (the lock order is budget, then store).
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <map>
#include <mutex>
#include <optional>

namespace primekv::server {

class MemoryBudget {
 public:
  // How a request waiting for memory can give way when every beginning request waits on the
  // others and no turn runs: a new session is forgotten (the request begins again from the
  // store), a stored one drops its cache (its file is current); otherwise it cannot.
  enum class GiveWay { kNo, kForget, kDropCache };
  enum class Outcome {
    kTaken,          // reserved: the turn runs
    kRetry,          // gave way, and a turn has finished since: begin again
    kTimedOut,       // gave way, and no turn finished by the deadline
    kRefusedBudget,  // does not fit the budget even alone (or by the deadline)
    kRefusedTenant,  // does not fit the tenant's cap
  };
  // What a reservation asks of the session store, under the budget's lock.
  class Claimant {
   public:
    // The bytes the turn would add now: fewer once the sessions sharing its pool are evicted or
    // have finished (their pages are then free for it, though the pool keeps them).
    virtual size_t Need() = 0;
    // Whether the tenant's cap (--tenant-kv-mib) holds `bytes` more.
    virtual bool TenantFits(size_t bytes) = 0;
    // Evicts one idle session (only the tenant's own when `own_only`): the bytes freed, or
    // nullopt when there is none to evict.
    virtual std::optional<size_t> EvictOne(bool own_only) = 0;
    // Lets the request's session go (refused, or giving way): the bytes freed.
    virtual size_t Release(bool gave_way) = 0;
    // `bytes` are reserved: the session records them.
    virtual void Taken(size_t bytes) = 0;

   protected:
    ~Claimant() = default;
  };
  struct Request {
    // The fewest bytes its session holds with this request's once every other session is
    // evicted or finished (those it shares a pool with included): over the budget, the request
    // can never fit, and nothing is evicted for it.
    size_t alone = 0;
    GiveWay give_way = GiveWay::kNo;
    std::chrono::steady_clock::time_point deadline;
    Claimant* claimant = nullptr;  // the caller's, alive until Reserve returns
  };

  explicit MemoryBudget(size_t budget_bytes) : budget_(budget_bytes) {}

  // A request holds its session from Enter until Reserve ends (or Leave): while some do, a
  // request that does not fit waits for them rather than being refused as if alone.
  void Enter();
  void Leave();
  // A session's accounted bytes went from `before` to `after` (wakes the waiting requests: a
  // session may have become idle too).
  void Replace(size_t before, size_t after);
  // Makes room for what the claimant needs (evicting, waiting for running turns and for the
  // other beginning requests) and takes it, by r.deadline. Ends what Enter began.
  Outcome Reserve(const Request& r);
  // A running turn ended; its session held `before` bytes with the reservation, `after` now.
  void TurnEnded(size_t before, size_t after);

  size_t budget() const { return budget_; }
  size_t used() const;
  size_t waiting() const;  // requests in Reserve
  int running() const;     // turns holding a reservation

 private:
  // Whether the request holding `ticket` must let another go first (all wait, none runs).
  bool MustGiveWayLocked(uint64_t ticket) const;

  const size_t budget_;
  mutable std::mutex mu_;
  std::condition_variable cv_;  // memory or a session came free, or the waiters changed
  size_t used_ = 0;             // sessions' bytes plus reservations of running turns
  int running_ = 0;
  int beginning_ = 0;  // requests between Enter and the end of Reserve
  uint64_t finished_ = 0;
  uint64_t tickets_ = 0;
  std::map<uint64_t, GiveWay> waiters_;  // requests in Reserve, oldest first
};

}  // namespace primekv::server
