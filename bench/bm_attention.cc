// AttendCached on the Llama-3.2-1B attention shape (32 query heads, 8 KV heads of 64), f16 cache.
//   bm_attention --benchmark_filter=Prefill   n queries at the end of a cache of `len` entries
//                                             (causal), FLOP/s counted over visible pairs
//   bm_attention --benchmark_filter=Decode    one query over `len` entries; also bytes/s of
//                                             K/V read
// FLOPs: 4 * d per (query head, visible key): QK^T and PV, a multiply and an add each.
#include <benchmark/benchmark.h>

#include <random>
#include <vector>

#include "primekv/attention/attention.h"
#include "primekv/kv/kv_cache.h"

namespace primekv {
namespace {

constexpr int kHeads = 32, kKvHeads = 8, kDim = 64;

struct Setup {
  KvCache cache{1, kKvHeads, kDim};
  std::vector<float> q;
  std::vector<int32_t> pos;
};

// A cache of `len` entries for one layer and n queries at positions len - n .. len - 1.
void Fill(Setup& s, int len, int n) {
  std::mt19937 rng(3);
  std::normal_distribution<float> dist(0.0f, 1.0f);
  const int chunk = 256;
  std::vector<float> k(static_cast<size_t>(chunk) * kKvHeads * kDim), v(k.size());
  std::vector<int32_t> p(chunk);
  for (int i = 0; i < len; i += chunk) {
    const int c = std::min(chunk, len - i);
    for (auto& x : k) x = dist(rng);
    for (auto& x : v) x = dist(rng);
    for (int j = 0; j < c; ++j) p[j] = i + j;
    (void)s.cache.Append(0, MatView<const float>(k.data(), c, kKvHeads * kDim),
                         MatView<const float>(v.data(), c, kKvHeads * kDim),
                         std::span<const int32_t>(p.data(), c));
  }
  s.q.resize(static_cast<size_t>(n) * kHeads * kDim);
  for (auto& x : s.q) x = dist(rng);
  s.pos.resize(n);
  for (int j = 0; j < n; ++j) s.pos[j] = len - n + j;
}

// Args: n queries, cache length, threads.
void Run(benchmark::State& state) {
  const int n = static_cast<int>(state.range(0));
  const int len = static_cast<int>(state.range(1));
  ThreadPool pool(static_cast<int>(state.range(2)));
  Setup s;
  Fill(s, len, n);
  const AttnShape shape{kHeads, kKvHeads, kDim, 0.125f};
  std::vector<float> out(s.q.size());
  AttentionWorkspace ws;
  for (auto _ : state) {
    AttendCached(shape, MatView<const float>(s.q.data(), n, kHeads * kDim), s.pos, s.cache, 0,
                 MatView<float>(out.data(), n, kHeads * kDim), pool, ws);
    benchmark::ClobberMemory();
  }
  double pairs = 0;  // visible (query, key) pairs per query head
  for (int i = 0; i < n; ++i) pairs += len - n + i + 1;
  state.counters["FLOP/s"] = benchmark::Counter(4.0 * kDim * kHeads * pairs,
                                                benchmark::Counter::kIsIterationInvariantRate);
  state.counters["KV bytes/s"] =
      benchmark::Counter(static_cast<double>(len) * kKvHeads * kDim * 2 * 2,
                         benchmark::Counter::kIsIterationInvariantRate);
}

BENCHMARK(Run)->Name("Prefill")->ArgsProduct({{512}, {512, 4096}, {1, 2}})->UseRealTime();
BENCHMARK(Run)->Name("Decode")->ArgsProduct({{1}, {4096, 16384}, {1, 2}})->UseRealTime();

}  // namespace
}  // namespace primekv
