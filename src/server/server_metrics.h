// The counters of `primekv serve` under their own lock, and its /metrics text (Prometheus).
// Nothing is called with this lock held, so any part may count while holding its own.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <map>
#include <mutex>
#include <string>

namespace primekv::server {

struct StoreStats;  // session_backend.h

// One turn's figures, and their sums over the server's life.
struct TurnCounts {
  uint64_t prompt_tokens = 0, cached_tokens = 0, prefill_tokens = 0, completion_tokens = 0;
  double prefill_seconds = 0, decode_seconds = 0;
  uint64_t compressions = 0;
  uint64_t cancelled = 0;  // turns whose client went away
  uint64_t not_saved = 0;  // completed turns the session store does not hold
};

class Metrics {
 public:
  enum class Event { kEviction, kRestore, kSessionFileRejected, kRejectedMemory, kGaveWay };
  // What the other parts hold now, read by the engine for one /metrics answer.
  struct Gauges {
    size_t kv_bytes_held = 0, kv_bytes_accounted = 0, kv_budget_bytes = 0;
    size_t sessions_in_memory = 0, sessions_on_disk = 0;
    size_t kv_pools = 0;  // page pools behind those sessions (a prefix match shares one)
    size_t requests_waiting_memory = 0;
    uint64_t decode_batches = 0, decode_batch_rows = 0;
    const StoreStats* store = nullptr;  // null without a session store
  };

  void CountRequest(int status);
  void Count(Event event);
  void AddTurn(const TurnCounts& turn);
  uint64_t count(Event event) const;
  std::string Text(const Gauges& gauges) const;

 private:
  static constexpr size_t kEvents = static_cast<size_t>(Event::kGaveWay) + 1;
  mutable std::mutex mu_;
  std::map<int, uint64_t> requests_;  // by HTTP status
  TurnCounts turns_;
  std::array<uint64_t, kEvents> events_{};
};

}  // namespace primekv::server
