// The KV budget of `primekv serve`: what a turn may add is reserved before it runs.
#include <algorithm>
#include <chrono>
#include <string>

#include "server/server_internal.h"

namespace primekv::server {

// A request that does not fit after evicting and waiting: its session is released (forgotten
// when empty, back to disk when it was only read for this request) and the answer names the
// limit it hit.
HttpError Engine::RefuseMemoryLocked(Session& s, size_t reserve, bool restored) {
  ++counters_.rejected_memory;
  s.busy = false;
  const size_t need = s.bytes + reserve;
  const bool tenant_cap = !TenantFitsLocked(s.tenant, reserve);
  if (s.tokens.empty()) {
    ForgetLocked(s);
  } else if (restored && s.persisted) {
    DropCacheLocked(s);  // back to disk: it was only read for this request
  }
  const std::string limit =
      tenant_cap ? "the tenant's KV share (--tenant-kv-mib, " +
                       std::to_string(options_.tenant_kv_bytes) + " bytes)"
                 : "the KV budget (" + std::to_string(options_.kv_budget_bytes) + " bytes)";
  return HttpError{503, limit + " cannot hold this request (" + std::to_string(need) + " bytes)",
                   "", "server_overloaded"};
}

std::variant<std::monostate, Engine::Retry, HttpError> Engine::ReserveMemory(
    Session& s, size_t reserve, bool restored, GiveWay give_way,
    std::chrono::steady_clock::time_point deadline) {
  std::unique_lock lock(store_mu_);
  const size_t now = s.cache->BytesAllocated();
  if (restored) s.bytes = 0;
  bytes_used_ = bytes_used_ - s.bytes + now;
  s.bytes = now;
  const uint64_t ticket = ++memory_tickets_;
  memory_waiters_.emplace(ticket, give_way);
  store_cv_.notify_all();  // the others may now all be waiting (below)
  // Evict idle sessions; while other turns hold the rest (running, or about to run with their
  // session held), wait for them to settle (bounded). Only a request that is alone and still
  // does not fit is refused.
  bool gave_way = false;
  // The budget, and the tenant's cap (--tenant-kv-mib), which only its own sessions can free.
  const auto fits = [&] {
    return bytes_used_ + reserve <= options_.kv_budget_bytes && TenantFitsLocked(s.tenant, reserve);
  };
  for (;;) {
    while (!fits() && EvictOneLocked(&s, s.tenant, !TenantFitsLocked(s.tenant, reserve))) {
    }
    if (fits() || (running_turns_ == 0 && beginning_ == 1)) break;
    if (running_turns_ == 0 && memory_waiters_.size() == static_cast<size_t>(beginning_)) {
      // Every beginning request waits for memory the others hold, and no turn runs to free
      // any: waiting would only run out the clock. One goes on (the oldest that cannot give
      // way, else the oldest); the others give way, or are refused now if they cannot.
      auto chosen = std::find_if(memory_waiters_.begin(), memory_waiters_.end(),
                                 [](const auto& w) { return w.second == GiveWay::kNo; });
      if (chosen == memory_waiters_.end()) chosen = memory_waiters_.begin();
      if (ticket != chosen->first) {
        gave_way = give_way != GiveWay::kNo;
        break;
      }
    }
    if (store_cv_.wait_until(lock, deadline) == std::cv_status::timeout) break;
  }
  memory_waiters_.erase(ticket);
  --beginning_;
  store_cv_.notify_all();  // a request waiting on this one's session may go on
  if (gave_way) {
    ++counters_.gave_way;
    if (give_way == GiveWay::kForget) {
      ForgetLocked(s);
    } else {
      DropCacheLocked(s);
      s.busy = false;
    }
    // Begin again once the request that went on (or any other turn) has finished.
    const uint64_t seen = turns_finished_;
    if (store_cv_.wait_until(lock, deadline, [&] {
          return turns_finished_ != seen || (running_turns_ == 0 && beginning_ == 0);
        }))
      return Retry{};
    ++counters_.rejected_memory;
    return HttpError{503,
                     "the KV budget (" + std::to_string(options_.kv_budget_bytes) +
                         " bytes) did not free room for this request within --memory-wait-s",
                     "", "server_overloaded"};
  }
  if (!fits()) return RefuseMemoryLocked(s, reserve, restored);
  bytes_used_ += reserve;
  s.reserved = reserve;
  ++running_turns_;
  return std::monostate{};
}

}  // namespace primekv::server
