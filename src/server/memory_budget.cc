// The KV budget of `primekv serve`: what a turn may add is reserved before it runs.
#include "server/memory_budget.h"

#include <algorithm>

namespace primekv::server {

void MemoryBudget::Enter() {
  std::lock_guard lock(mu_);
  ++beginning_;
}

void MemoryBudget::Leave() {
  {
    std::lock_guard lock(mu_);
    --beginning_;
  }
  cv_.notify_all();
}

void MemoryBudget::Replace(size_t before, size_t after) {
  {
    std::lock_guard lock(mu_);
    used_ = used_ - before + after;
  }
  cv_.notify_all();
}

void MemoryBudget::TurnEnded(size_t before, size_t after) {
  {
    std::lock_guard lock(mu_);
    used_ = used_ - before + after;
    --running_;
    ++finished_;
  }
  cv_.notify_all();
}

size_t MemoryBudget::used() const {
  std::lock_guard lock(mu_);
  return used_;
}

size_t MemoryBudget::waiting() const {
  std::lock_guard lock(mu_);
  return waiters_.size();
}

int MemoryBudget::running() const {
  std::lock_guard lock(mu_);
  return running_;
}

bool MemoryBudget::MustGiveWayLocked(uint64_t ticket) const {
  if (running_ != 0 || waiters_.size() != static_cast<size_t>(beginning_)) return false;
  // Every beginning request waits for memory the others hold, and no turn runs to free any:
  // waiting would only run out the clock. One goes on (the oldest that cannot give way, else
  // the oldest); the others give way, or are refused now if they cannot.
  auto chosen = std::find_if(waiters_.begin(), waiters_.end(),
                             [](const auto& w) { return w.second == GiveWay::kNo; });
  if (chosen == waiters_.end()) chosen = waiters_.begin();
  return ticket != chosen->first;
}

MemoryBudget::Outcome MemoryBudget::Reserve(const Request& r) {
  std::unique_lock lock(mu_);
  size_t bytes = r.claimant->Need();
  if (std::max(r.alone, bytes) > budget_) {
    // Never fits, whatever is evicted or waited for: refused before anyone loses a session.
    --beginning_;
    cv_.notify_all();
    used_ -= r.claimant->Release(false);
    return Outcome::kRefusedBudget;
  }
  const uint64_t ticket = ++tickets_;
  waiters_.emplace(ticket, r.give_way);
  cv_.notify_all();  // the others may now all be waiting (below)
  // The budget, and the tenant's cap (--tenant-kv-mib), which only its own sessions can free.
  const auto fits = [&] {
    bytes = r.claimant->Need();
    return used_ + bytes <= budget_ && r.claimant->TenantFits(bytes);
  };
  // Evict idle sessions; while other turns hold the rest (running, or about to run with their
  // session held), wait for them to settle (bounded). Only a request that is alone and still
  // does not fit is refused.
  bool must_give_way = false;
  for (;;) {
    while (!fits()) {
      const std::optional<size_t> freed = r.claimant->EvictOne(!r.claimant->TenantFits(bytes));
      if (!freed) break;
      used_ -= *freed;
    }
    if (fits() || (running_ == 0 && beginning_ == 1)) break;
    if (MustGiveWayLocked(ticket)) {
      must_give_way = true;
      break;
    }
    if (cv_.wait_until(lock, r.deadline) == std::cv_status::timeout) break;
  }
  waiters_.erase(ticket);
  --beginning_;
  cv_.notify_all();  // a request waiting on this one's session may go on
  const bool gave_way = must_give_way && r.give_way != GiveWay::kNo;
  if (gave_way) {
    used_ -= r.claimant->Release(true);
    // Begin again once the request that went on (or any other turn) has finished.
    const uint64_t seen = finished_;
    return cv_.wait_until(lock, r.deadline,
                          [&] { return finished_ != seen || (running_ == 0 && beginning_ == 0); })
               ? Outcome::kRetry
               : Outcome::kTimedOut;
  }
  if (!fits()) {
    const bool tenant_cap = !r.claimant->TenantFits(bytes);
    used_ -= r.claimant->Release(false);
    return tenant_cap ? Outcome::kRefusedTenant : Outcome::kRefusedBudget;
  }
  used_ += bytes;
  r.claimant->Taken(bytes);
  ++running_;
  return Outcome::kTaken;
}

}  // namespace primekv::server
