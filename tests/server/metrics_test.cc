// The counters of `primekv serve` and their /metrics text (server/server_metrics.h).
#include <gtest/gtest.h>

#include <string>
#include <thread>
#include <vector>

#include "server/server_metrics.h"
#include "server/session_backend.h"

namespace primekv::server {
namespace {

// The value of metric `name` (without labels) in `text`, or -1 when absent.
double Value(const std::string& text, const std::string& name) {
  const std::string key = "\nprimekv_" + name + " ";
  const size_t at = text.find(key);
  return at == std::string::npos ? -1 : std::stod(text.substr(at + key.size()));
}

TEST(ServerMetrics, TurnsEventsAndGaugesAreWrittenAsPrometheusText) {
  Metrics m;
  m.CountRequest(200);
  m.CountRequest(200);
  m.CountRequest(503);
  m.AddTurn({.prompt_tokens = 10,
             .cached_tokens = 4,
             .prefill_tokens = 6,
             .completion_tokens = 8,
             .prefill_seconds = 0.5,
             .decode_seconds = 2,
             .compressions = 1});
  m.AddTurn({.prompt_tokens = 5, .completion_tokens = 2, .decode_seconds = 3, .cancelled = 1});
  m.Count(Metrics::Event::kEviction);
  m.Count(Metrics::Event::kEviction);
  m.Count(Metrics::Event::kGaveWay);
  EXPECT_EQ(m.count(Metrics::Event::kEviction), 2u);
  const std::string text = m.Text({.kv_bytes_held = 1000,
                                   .kv_bytes_accounted = 1500,
                                   .kv_budget_bytes = 4096,
                                   .sessions_in_memory = 2,
                                   .sessions_on_disk = 3,
                                   .requests_waiting_memory = 1,
                                   .decode_batches = 4,
                                   .decode_batch_rows = 10});
  EXPECT_NE(text.find("primekv_requests_total{status=\"200\"} 2\n"), std::string::npos) << text;
  EXPECT_NE(text.find("primekv_requests_total{status=\"503\"} 1\n"), std::string::npos);
  EXPECT_NE(text.find("# TYPE primekv_prompt_tokens_total counter\n"), std::string::npos);
  EXPECT_EQ(Value(text, "prompt_tokens_total"), 15);
  EXPECT_EQ(Value(text, "cached_prompt_tokens_total"), 4);
  EXPECT_EQ(Value(text, "completion_tokens_total"), 10);
  EXPECT_EQ(Value(text, "decode_tokens_per_second"), 2);  // 10 tokens in 5 s
  EXPECT_EQ(Value(text, "prefill_tokens_per_second"), 12);
  EXPECT_EQ(Value(text, "compressions_total"), 1);
  EXPECT_EQ(Value(text, "requests_cancelled_total"), 1);
  EXPECT_EQ(Value(text, "evictions_total"), 2);
  EXPECT_EQ(Value(text, "memory_gave_way_total"), 1);
  EXPECT_EQ(Value(text, "restores_total"), 0);
  EXPECT_EQ(Value(text, "kv_bytes_held"), 1000);
  EXPECT_EQ(Value(text, "kv_bytes_accounted"), 1500);
  EXPECT_EQ(Value(text, "sessions_on_disk"), 3);
  EXPECT_EQ(Value(text, "requests_waiting_memory"), 1);
  EXPECT_EQ(Value(text, "decode_batch_rows_total"), 10);
  // The store's figures only with a store.
  EXPECT_EQ(Value(text, "store_saves_total"), -1);
  EXPECT_EQ(Value(text, "turns_not_saved_total"), -1);
  m.AddTurn({.not_saved = 1});
  StoreStats stats;
  stats.saves = 7;
  const std::string with_store = m.Text({.store = &stats});
  EXPECT_EQ(Value(with_store, "store_saves_total"), 7);
  EXPECT_EQ(Value(with_store, "turns_not_saved_total"), 1);
}

TEST(ServerMetrics, CountsFromManyThreadsAreAllKept) {
  Metrics m;
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&] {
      for (int i = 0; i < 1000; ++i) {
        m.AddTurn({.completion_tokens = 1});
        m.Count(Metrics::Event::kRestore);
        m.CountRequest(200);
      }
    });
  }
  for (auto& t : threads) t.join();
  const std::string text = m.Text({});
  EXPECT_EQ(Value(text, "completion_tokens_total"), 4000);
  EXPECT_EQ(Value(text, "restores_total"), 4000);
  EXPECT_NE(text.find("primekv_requests_total{status=\"200\"} 4000\n"), std::string::npos);
}

}  // namespace
}  // namespace primekv::server
