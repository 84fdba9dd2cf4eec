// The Prometheus text of `primekv serve`'s /metrics.
#include <sstream>

#include "server/server_internal.h"
#include "server/session_backend.h"

namespace primekv::server {

namespace {

// One metric in Prometheus' text format: HELP, TYPE and the value.
struct MetricWriter {
  std::ostringstream& o;
  template <typename T>
  void operator()(const char* name, const char* type, const char* help, T value) const {
    o << "# HELP primekv_" << name << " " << help << "\n# TYPE primekv_" << name << " " << type
      << "\nprimekv_" << name << " " << value << "\n";
  }
};

void WriteStoreMetrics(const MetricWriter& metric, const StoreStats& st, uint64_t not_saved) {
  metric("store_loads_total", "counter", "Sessions read from the session store", st.loads);
  metric("store_misses_total", "counter", "Session reads that found nothing", st.misses);
  metric("store_rejected_total", "counter",
         "Session values refused (checksum, shape, another id or tenant)", st.rejected);
  metric("store_saves_total", "counter", "Sessions written after a turn", st.saves);
  metric("store_stale_saves_total", "counter", "Writes refused because the store held a newer turn",
         st.stale_saves);
  metric("store_too_large_total", "counter", "Sessions over --store-max-kib, not written",
         st.too_large);
  metric("store_errors_total", "counter", "Store operations that failed (unreachable)", st.errors);
  metric("store_bytes_loaded_total", "counter", "Bytes of sessions read", st.bytes_loaded);
  metric("store_bytes_saved_total", "counter", "Bytes of sessions written", st.bytes_saved);
  metric("store_load_seconds_total", "counter", "Time reading sessions (with verification)",
         st.load_seconds);
  metric("store_save_seconds_total", "counter", "Time writing sessions (with serialising)",
         st.save_seconds);
  metric("turns_not_saved_total", "counter",
         "Completed turns the store does not hold (a failed save; answered X-PrimeKV-Saved: "
         "false)",
         not_saved);
}

}  // namespace

void Engine::CountRequest(int status) {
  std::lock_guard lock(store_mu_);
  ++counters_.requests[status];
}

std::string Engine::MetricsText() {
  std::lock_guard lock(store_mu_);
  const Counters& c = counters_;
  std::ostringstream o;
  const MetricWriter metric{o};
  o << "# HELP primekv_requests_total HTTP requests answered, by status\n"
       "# TYPE primekv_requests_total counter\n";
  for (const auto& [status, n] : c.requests)
    o << "primekv_requests_total{status=\"" << status << "\"} " << n << "\n";
  metric("prompt_tokens_total", "counter", "Prompt tokens of completed turns", c.prompt_tokens);
  metric("cached_prompt_tokens_total", "counter",
         "Prompt tokens reused from a session's cache (not prefilled)", c.cached_tokens);
  metric("prefill_tokens_total", "counter", "Prompt tokens run through the model",
         c.prefill_tokens);
  metric("completion_tokens_total", "counter", "Generated tokens", c.completion_tokens);
  metric("prefill_seconds_total", "counter", "Time spent prefilling", c.prefill_seconds);
  metric("decode_seconds_total", "counter", "Time spent decoding", c.decode_seconds);
  metric("prefill_tokens_per_second", "gauge", "Prefill throughput over the server's life",
         c.prefill_seconds > 0 ? static_cast<double>(c.prefill_tokens) / c.prefill_seconds : 0.0);
  metric("decode_tokens_per_second", "gauge", "Decode throughput over the server's life",
         c.decode_seconds > 0 ? static_cast<double>(c.completion_tokens) / c.decode_seconds : 0.0);
  size_t held = 0, live = 0, on_disk = 0;
  for (const auto& [id, s] : sessions_) {
    if (s->cache) {
      held += s->bytes;
      ++live;
    } else {
      ++on_disk;
    }
  }
  metric("kv_bytes_held", "gauge", "KV cache bytes held by sessions in memory", held);
  metric("kv_bytes_accounted", "gauge", "KV bytes held plus reservations of running turns",
         bytes_used_);
  metric("kv_budget_bytes", "gauge", "The --kv-budget-mib budget", options_.kv_budget_bytes);
  metric("compressions_total", "counter", "Cache compressions", c.compressions);
  metric("sessions_in_memory", "gauge", "Sessions whose cache is in memory", live);
  metric("sessions_on_disk", "gauge", "Sessions evicted to the session store", on_disk);
  metric("evictions_total", "counter", "Sessions evicted (least recently used)", c.evictions);
  metric("restores_total", "counter", "Sessions restored from the session store", c.restores);
  metric("session_files_rejected_total", "counter", "Corrupt or truncated sessions refused",
         c.session_files_rejected);
  if (backend_) WriteStoreMetrics(metric, backend_->stats(), c.turns_not_saved);
  metric("requests_cancelled_total", "counter", "Streams whose client went away", c.cancelled);
  metric("requests_rejected_memory_total", "counter", "Requests refused with 503 (KV budget)",
         c.rejected_memory);
  metric("requests_waiting_memory", "gauge", "Requests waiting for KV budget to come free",
         memory_waiters_.size());
  metric("memory_gave_way_total", "counter",
         "Requests that let another go first when all waited on each other's memory", c.gave_way);
  std::lock_guard batch_lock(batch_mu_);
  metric("decode_batches_total", "counter", "Batched decode forward passes", decode_batches_);
  metric("decode_batch_rows_total", "counter",
         "Tokens decoded in batched forward passes (over decode_batches_total: the mean batch)",
         decode_batch_rows_);
  return o.str();
}

}  // namespace primekv::server
