// Scoring time of each press for one Llama-3.1-8B-shaped layer (32 query heads, 8 KV heads,
// d = 128) at n = 4K..32K cached tokens, beside the prefill time of one such layer.
// Run: build/release/bench/bm_press --benchmark_format=json (docs/results-press-cost.md).
#include <benchmark/benchmark.h>

#include <filesystem>
#include <optional>
#include <random>

#include "primekv/press/compressor.h"
#include "primekv/model/model.h"
#include "primekv/press/press.h"
#include "primekv/model/random_model.h"

namespace primekv {
namespace {

constexpr int kHeads = 32, kKvHeads = 8, kDim = 128, kModel = 4096, kFfn = 14336;

struct Inputs {
  std::vector<HeadEntries> heads;
  std::vector<float> gram, window, inv_freq;
  std::vector<int32_t> window_pos;
  QueryStats stats;
  ModelConfig config;
  std::optional<LayerInput> in;
};

Inputs MakeInputs(int n) {
  Inputs x;
  std::mt19937 rng(n);
  std::normal_distribution<float> g(0.0f, 1.0f);
  x.heads.resize(kKvHeads);
  for (auto& h : x.heads) {
    h.keys.resize(static_cast<size_t>(n) * kDim);
    h.values.resize(static_cast<size_t>(n) * kDim);
    for (auto& v : h.keys) v = g(rng);
    for (auto& v : h.values) v = g(rng);
    h.positions.resize(static_cast<size_t>(n));
    for (int i = 0; i < n; ++i) h.positions[static_cast<size_t>(i)] = i;
  }
  x.gram.assign(static_cast<size_t>(kKvHeads) * kDim * kDim, 0.0f);
  for (int h = 0; h < kKvHeads; ++h)
    for (int a = 0; a < kDim; ++a)
      x.gram[(static_cast<size_t>(h) * kDim + a) * kDim + a] = 1.0f + 0.01f * a;
  const int w = 64;
  x.window.resize(static_cast<size_t>(w) * kHeads * kDim);
  for (auto& v : x.window) v = g(rng);
  for (int i = 0; i < w; ++i) x.window_pos.push_back(n - w + i);
  x.stats.count = n;
  x.stats.sum.assign(static_cast<size_t>(kHeads) * kDim, 0.0);
  x.stats.sum_sq.assign(static_cast<size_t>(kHeads) * kDim * kDim, 0.0);
  for (int h = 0; h < kHeads; ++h)
    for (int a = 0; a < kDim; ++a)
      x.stats.sum_sq[(static_cast<size_t>(h) * kDim + a) * kDim + a] = n;
  for (int i = 0; i < kDim / 2; ++i)
    x.inv_freq.push_back(static_cast<float>(std::pow(500000.0, -2.0 * i / kDim)));
  x.config.n_layers = 32;
  x.config.n_heads = kHeads;
  x.config.n_kv_heads = kKvHeads;
  x.config.head_dim = kDim;
  x.config.d_model = kModel;
  x.in.emplace(x.config);
  x.in->rope_inv_freq = x.inv_freq;
  x.in->heads = x.heads;
  x.in->output_gram = x.gram;
  x.in->window_queries = {x.window.data(), w, kHeads * kDim};
  x.in->window_positions = x.window_pos;
  x.in->query_stats = &x.stats;
  x.in->next_position = n;
  return x;
}

void BM_PressScore(benchmark::State& state, const char* name) {
  const int n = static_cast<int>(state.range(0));
  Inputs x = MakeInputs(n);
  auto press = MakePress(*ParsePressSpec(name));
  HeadScores scores(kKvHeads, std::vector<float>(static_cast<size_t>(n)));
  for (auto _ : state) {
    press->scorer->Score(*x.in, scores);
    auto kept =
        SelectForLayer(scores, 0.5, press->budget, press->scorer->ComparableAcrossHeads(), 0, 32);
    benchmark::DoNotOptimize(kept);
  }
  state.counters["tokens"] = n;
}

// One decoder layer of Llama-3.1-8B's shape (F16 weights), prefilled over n tokens.
void BM_LayerPrefill(benchmark::State& state) {
  const int n = static_cast<int>(state.range(0));
  static const Model* model = [] {
    RandomModelSpec s;
    s.n_layers = 1;
    s.d_model = kModel;
    s.n_heads = kHeads;
    s.n_kv_heads = kKvHeads;
    s.head_dim = kDim;
    s.d_ff = kFfn;
    s.vocab_size = 512;
    s.max_context = 131072;
    s.type = GgmlType::kF16;
    s.rope_base = 500000;
    const auto path = std::filesystem::temp_directory_path() / "primekv_bm_llama8b_layer.gguf";
    if (!std::filesystem::exists(path)) Check(WriteRandomModel(s, path).ok(), "write layer");
    auto m = Model::Load(path);
    Check(m.ok(), "load layer");
    return new Model(std::move(m).value());
  }();
  ThreadPool pool(0);
  std::vector<Token> tokens(static_cast<size_t>(n));
  for (int i = 0; i < n; ++i) tokens[static_cast<size_t>(i)] = 3 + i % 500;
  std::vector<float> logits(512);
  for (auto _ : state) {
    KvCache cache = model->NewCache();
    ForwardWorkspace ws;
    Status s = model->Forward(tokens, cache, {}, {logits.data(), 1, 512}, pool, ws);
    Check(s.ok(), "forward");
  }
  state.counters["tokens"] = n;
}

void Sizes(benchmark::internal::Benchmark* b) {
  for (int n : {4096, 8192, 16384, 32768}) b->Arg(n);
  b->Unit(benchmark::kMillisecond)->Iterations(1);
}

BENCHMARK_CAPTURE(BM_PressScore, primekv, "primekv")->Apply(Sizes);
BENCHMARK_CAPTURE(BM_PressScore, primekv_cosine, "primekv:key=cosine")->Apply(Sizes);
BENCHMARK_CAPTURE(BM_PressScore, keydiff, "keydiff")->Apply(Sizes);
BENCHMARK_CAPTURE(BM_PressScore, knorm, "knorm")->Apply(Sizes);
BENCHMARK_CAPTURE(BM_PressScore, streamingllm, "streamingllm")->Apply(Sizes);
BENCHMARK_CAPTURE(BM_PressScore, random, "random")->Apply(Sizes);
BENCHMARK_CAPTURE(BM_PressScore, lagkv, "lagkv")->Apply(Sizes);
BENCHMARK_CAPTURE(BM_PressScore, snapkv, "snapkv")->Apply(Sizes);
BENCHMARK_CAPTURE(BM_PressScore, tova, "tova")->Apply(Sizes);
BENCHMARK_CAPTURE(BM_PressScore, expected_attention, "expected_attention")->Apply(Sizes);
// 16K and 32K layer prefills take minutes each on 2 cores; run them with --benchmark_filter.
BENCHMARK(BM_LayerPrefill)->Arg(4096)->Arg(8192)->Unit(benchmark::kMillisecond)->Iterations(1);

}  // namespace
}  // namespace primekv
