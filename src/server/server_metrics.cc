// The counters of `primekv serve` and the Prometheus text of its /metrics.
#include "server/server_metrics.h"

#include <sstream>

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
  metric("store_prefix_hits_total", "counter",
         "New conversations that found their prefix in a session another replica stored",
         st.prefix_hits);
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

void Metrics::CountRequest(int status) {
  std::lock_guard lock(mu_);
  ++requests_[status];
}

void Metrics::Count(Event event) {
  std::lock_guard lock(mu_);
  ++events_[static_cast<size_t>(event)];
}

uint64_t Metrics::count(Event event) const {
  std::lock_guard lock(mu_);
  return events_[static_cast<size_t>(event)];
}

void Metrics::AddTurn(const TurnCounts& t) {
  std::lock_guard lock(mu_);
  turns_.prompt_tokens += t.prompt_tokens;
  turns_.cached_tokens += t.cached_tokens;
  turns_.prefill_tokens += t.prefill_tokens;
  turns_.completion_tokens += t.completion_tokens;
  turns_.prefill_seconds += t.prefill_seconds;
  turns_.decode_seconds += t.decode_seconds;
  turns_.compressions += t.compressions;
  turns_.cancelled += t.cancelled;
  turns_.not_saved += t.not_saved;
}

std::string Metrics::Text(const Gauges& g) const {
  std::lock_guard lock(mu_);
  const TurnCounts& c = turns_;
  const auto event = [&](Event e) { return events_[static_cast<size_t>(e)]; };
  std::ostringstream o;
  const MetricWriter metric{o};
  o << "# HELP primekv_requests_total HTTP requests answered, by status\n"
       "# TYPE primekv_requests_total counter\n";
  for (const auto& [status, n] : requests_)
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
  metric("kv_bytes_held", "gauge",
         "KV cache bytes held by sessions in memory (pages that sessions share counted once)",
         g.kv_bytes_held);
  metric("kv_pools", "gauge", "KV page pools held (sessions begun by a prefix match share one)",
         g.kv_pools);
  metric("kv_bytes_accounted", "gauge", "KV bytes held plus reservations of running turns",
         g.kv_bytes_accounted);
  metric("kv_budget_bytes", "gauge", "The --kv-budget-mib budget", g.kv_budget_bytes);
  metric("compressions_total", "counter", "Cache compressions", c.compressions);
  metric("sessions_in_memory", "gauge", "Sessions whose cache is in memory", g.sessions_in_memory);
  metric("sessions_on_disk", "gauge", "Sessions evicted to the session store", g.sessions_on_disk);
  metric("evictions_total", "counter", "Sessions evicted (least recently used)",
         event(Event::kEviction));
  metric("restores_total", "counter", "Sessions restored from the session store",
         event(Event::kRestore));
  metric("session_files_rejected_total", "counter", "Corrupt or truncated sessions refused",
         event(Event::kSessionFileRejected));
  if (g.store) WriteStoreMetrics(metric, *g.store, c.not_saved);
  metric("requests_cancelled_total", "counter", "Streams whose client went away", c.cancelled);
  metric("requests_rejected_memory_total", "counter", "Requests refused with 503 (KV budget)",
         event(Event::kRejectedMemory));
  metric("requests_waiting_memory", "gauge", "Requests waiting for KV budget to come free",
         g.requests_waiting_memory);
  metric("memory_gave_way_total", "counter",
         "Requests that let another go first when all waited on each other's memory",
         event(Event::kGaveWay));
  metric("decode_batches_total", "counter", "Batched decode forward passes", g.decode_batches);
  metric("decode_batch_rows_total", "counter",
         "Tokens decoded in batched forward passes (over decode_batches_total: the mean batch)",
         g.decode_batch_rows);
  return o.str();
}

}  // namespace primekv::server
