// The KV budget of `primekv serve`: what a turn may add is reserved before it runs.
#include <chrono>
#include <string>

#include "server/server_internal.h"

namespace primekv::server {

std::optional<HttpError> Engine::ReserveMemory(Session& s, size_t reserve, bool restored) {
  std::unique_lock lock(store_mu_);
  const size_t now = s.cache->BytesAllocated();
  if (restored) s.bytes = 0;
  bytes_used_ = bytes_used_ - s.bytes + now;
  s.bytes = now;
  // Evict idle sessions; while other turns hold the rest (running, or about to run with their
  // session held), wait for them to settle (bounded). Only a request that is alone and still
  // does not fit is refused.
  const auto deadline =
      std::chrono::steady_clock::now() + std::chrono::seconds(options_.memory_wait_s);
  for (;;) {
    while (bytes_used_ + reserve > options_.kv_budget_bytes && EvictOneLocked(&s)) {
    }
    if (bytes_used_ + reserve <= options_.kv_budget_bytes ||
        (running_turns_ == 0 && beginning_ == 1))
      break;
    if (store_cv_.wait_until(lock, deadline) == std::cv_status::timeout) break;
  }
  --beginning_;
  store_cv_.notify_all();  // a request waiting on this one's session may go on
  if (bytes_used_ + reserve > options_.kv_budget_bytes) {
    ++counters_.rejected_memory;
    s.busy = false;
    const size_t need = s.bytes + reserve;
    if (s.tokens.empty()) {
      bytes_used_ -= s.bytes;
      const std::string id = s.id;
      sessions_.erase(id);
    } else if (restored && s.persisted) {
      bytes_used_ -= s.bytes;  // back to disk: it was only read for this request
      s.bytes = 0;
      s.cache.reset();
      s.capture.reset();
    }
    return HttpError{503,
                     "the KV budget (" + std::to_string(options_.kv_budget_bytes) +
                         " bytes) cannot hold this request (" + std::to_string(need) + " bytes)",
                     "", "server_overloaded"};
  }
  bytes_used_ += reserve;
  ++running_turns_;
  return std::nullopt;
}

}  // namespace primekv::server
