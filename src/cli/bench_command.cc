// `primekv bench`: prefill and decode throughput of a model, llama-bench style.
//
// Tests: "pp<P>" prefills P tokens into an empty cache (in micro-batches of --ubatch, as
// llama.cpp does); "tg<N>" decodes N tokens one at a time after a cache of --depth entries per
// head (filled by a real prefill, or with synthetic rows, which cost the decode step the same
// reads; compressed once at the end or after every chunk, bench_fill.h). Each test runs once to
// warm up and then --reps times; the table shows the median and the sample standard deviation.
// For decode tests it also shows the bytes one step reads (every weight matrix, one embedding
// row, and the live KV cache) and what share of the read bandwidth that is at the measured
// speed: the bandwidth is measured right before and after each timed run over the model's own
// mapped weights, so both figures see the same memory at the same moment. Every test also
// gives the CPU steal over its timed runs (Linux's /proc/stat): on a shared virtual machine the
// hypervisor can take a third of the CPU time for minutes, and a figure made then says so.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <random>
#include <span>
#include <string>
#include <vector>

#include "cli/bench_fill.h"
#include "cli/commands.h"
#include "cli/options.h"
#include "cli/proc_usage.h"
#include "cli/sample_summary.h"
#include "primekv/model/model.h"
#include "primekv/press/compressor.h"
#include "primekv/quant/bandwidth.h"
#include "primekv/quant/cpu.h"
#include "primekv/session/pipeline.h"

namespace primekv::cli {

namespace {

struct BenchArgs {
  std::string model;
  WeightMemory weight_memory = WeightMemory::kMapped;
  std::vector<int> prompt = {512};
  std::vector<int> gen = {128};
  std::vector<int> depth = {0};
  std::vector<int> threads = {0};
  int ubatch = 512;
  int reps = 5;
  std::string press = "none";
  double ratio = 0.0;
  std::string fill = "synthetic";
  std::string mode = "context";
  int chunk = 512;
  KvDType kv_type = KvDType::kF16;
  bool json = false;
  bool bandwidth_only = false;
  int bandwidth_mib = 1024;
  int ctx_size = 0;  // 0 = the model's trained context
  bool allow_ctx_overflow = false;
  uint64_t memory_limit = 0;  // bytes; 0 = the machine's memory
};

// Flag ranges. Token counts go up to the largest context size any run may use (each test must
// also fit the model's, checked once it is loaded); the heap buffer of --bandwidth up to 64 GiB.
constexpr int kMaxTokens = kMaxContextSize;
constexpr int kMaxBandwidthMib = 1 << 16;
constexpr int kMaxReps = 1000;

using Clock = std::chrono::steady_clock;

double Seconds(Clock::time_point a, Clock::time_point b) {
  return std::chrono::duration<double>(b - a).count();
}

// The model file's tensor data as mapped: the bytes a decode step streams (8-byte aligned).
std::span<const uint8_t> WeightRegion(const Model& m) {
  const uint8_t* lo = nullptr;
  const uint8_t* hi = nullptr;
  for (const GgufTensorInfo& t : m.file().tensors()) {
    const std::span<const uint8_t> d = m.file().TensorData(t);
    if (d.empty()) continue;
    if (lo == nullptr || d.data() < lo) lo = d.data();
    if (hi == nullptr || d.data() + d.size() > hi) hi = d.data() + d.size();
  }
  if (lo == nullptr) return {};
  const auto a = (reinterpret_cast<uintptr_t>(lo) + 7) / 8 * 8;
  const auto z = reinterpret_cast<uintptr_t>(hi) / 8 * 8;
  return {reinterpret_cast<const uint8_t*>(a), z > a ? z - a : 0};
}

// Bytes of weights one decode step reads: every layer matrix, the output matrix, the norms
// and one embedding row.
double WeightBytesPerToken(const Model& m) {
  const ModelConfig& c = m.config();
  const auto mat = [](const WeightView& w) { return static_cast<double>(w.rows) * w.row_bytes; };
  double bytes = 0;
  for (int l = 0; l < c.n_layers; ++l) {
    const LayerWeights& L = m.layer(l);
    bytes +=
        mat(L.wq) + mat(L.wk) + mat(L.wv) + mat(L.wo) + mat(L.w_gate) + mat(L.w_up) + mat(L.w_down);
    bytes += 2.0 * c.d_model * sizeof(float);
  }
  const GgufTensorInfo* out = m.file().FindTensor("output.weight");
  const GgufTensorInfo* emb = m.file().FindTensor("token_embd.weight");
  const auto size = [&](const GgufTensorInfo* t) {
    return static_cast<double>(m.file().TensorData(*t).size());
  };
  if (out != nullptr) bytes += size(out);
  if (emb != nullptr) {
    if (out == nullptr) bytes += size(emb);  // tied: read whole as the output matrix
    bytes += size(emb) / c.vocab_size;       // the embedding row
  }
  return bytes + c.d_model * sizeof(float);
}

struct BenchContext {
  const Model& model;
  const BenchArgs& args;
  ThreadPool& pool;
  std::span<const uint8_t> weights;  // read by the bandwidth passes beside each decode run
  ForwardWorkspace ws;
  std::vector<float> logits;
  std::mt19937_64 rng{1234};
};

std::vector<Token> RandomTokens(BenchContext& b, int n) {
  std::uniform_int_distribution<int> dist(0, b.model.config().vocab_size - 1);
  std::vector<Token> t(static_cast<size_t>(n));
  for (auto& x : t) x = dist(b.rng);
  return t;
}

Status Prefill(BenchContext& b, KvCache& cache, int n) {
  const std::vector<Token> tokens = RandomTokens(b, n);
  const int ub = std::max(1, b.args.ubatch);
  MatView<float> logits(b.logits.data(), 1, b.model.config().vocab_size);
  for (int i = 0; i < n; i += ub) {
    const int count = std::min(ub, n - i);
    std::span<const Token> part(tokens.data() + i, static_cast<size_t>(count));
    if (Status s = b.model.Forward(part, cache, {}, logits, b.pool, b.ws); !s.ok()) return s;
  }
  return Status::Ok();
}

struct TestResult {
  std::string name;
  int threads = 0;
  int prompt = 0, gen = 0, depth = 0;
  std::vector<double> tokens_per_s;
  Summary summary;
  double kv_bytes = 0;         // live KV bytes read per decode step (at the start)
  double kv_bytes_end = 0;     // live KV bytes after a decode run (the most the run holds)
  double kv_allocated = 0;     // KV pool bytes at the fill's peak (free pages included)
  double workspace_bytes = 0;  // the forward buffers after the test (ForwardWorkspace::Bytes)
  double bytes_per_token = 0;  // weights + KV, decode tests only
  // Per timed decode run: the read bandwidth (the better of the passes just before and just
  // after it) and bytes_per_token * tokens/s over it; the table shows the medians.
  std::vector<double> bandwidth, shares;
  double bandwidth_median = 0, bandwidth_share = 0;
  double kept_fraction = 1.0;  // entries kept by the press
  // Decode tests: the depth fill (prefill or synthetic rows, and every compression), once.
  double fill_s = 0, score_s = 0;
  double steal_share = -1;  // CPU time stolen by the hypervisor over the timed runs; -1 unknown
};

// One prefill run: tokens/s.
Result<double> RunPrompt(BenchContext& b, KvCache& cache, int n) {
  cache.Clear();
  cache.SetNextPosition(0);
  const auto t0 = Clock::now();
  if (Status s = Prefill(b, cache, n); !s.ok()) return s;
  return n / Seconds(t0, Clock::now());
}

DepthFillOptions FillOptions(const BenchArgs& a) {
  DepthFillOptions o;
  o.source = a.fill == "prefill" ? FillSource::kPrefill : FillSource::kSynthetic;
  o.schedule = {.ratio = a.ratio,
                .mode = a.mode == "chunked" ? ScheduleMode::kChunked : ScheduleMode::kContext,
                .chunk = a.chunk,
                .ubatch = a.ubatch};
  return o;
}

// One decode run of n tokens from the cache as prepared; the appended entries are dropped
// afterwards so every run starts at the same depth.
Result<double> RunGen(BenchContext& b, KvCache& cache, int n) {
  const int32_t start = cache.NextPosition();
  cache.Reserve(n);
  const std::vector<Token> tokens = RandomTokens(b, n);
  MatView<float> logits(b.logits.data(), 1, b.model.config().vocab_size);
  const auto t0 = Clock::now();
  for (int i = 0; i < n; ++i) {
    std::span<const Token> one(tokens.data() + i, 1);
    if (Status s = b.model.Forward(one, cache, {}, logits, b.pool, b.ws); !s.ok()) return s;
  }
  const double secs = Seconds(t0, Clock::now());
  cache.TruncateFrom(start);
  cache.SetNextPosition(start);
  return n / secs;
}

std::string Human(double bytes) {
  char buf[32];
  if (bytes >= 1e9) {
    std::snprintf(buf, sizeof(buf), "%.2f GB", bytes / 1e9);
  } else {
    std::snprintf(buf, sizeof(buf), "%.1f MB", bytes / 1e6);
  }
  return buf;
}

// Bandwidth alone: over a heap buffer, or over the model's mapped weights when -m is given.
int RunBandwidthOnly(const BenchArgs& a) {
  std::optional<Model> model;
  if (!a.model.empty()) {
    auto m = Model::Load(a.model, a.weight_memory, a.ctx_size);
    if (!m.ok()) return Fail(m.message());
    model.emplace(std::move(m).value());
  }
  nlohmann::json rows = nlohmann::json::array();
  for (int t : a.threads) {
    ThreadPool pool(t);
    const double bw = model ? quant::MeasureBandwidth(WeightRegion(*model), pool, 8)
                            : quant::MeasureHeapBandwidth(a.bandwidth_mib, pool);
    rows.push_back({{"threads", pool.size()}, {"read_bytes_per_s", bw}});
    if (!a.json) {
      std::printf("read bandwidth, %d thread(s): %.2f GB/s (%s)\n", pool.size(), bw / 1e9,
                  model ? "the model's mapped weights" : "heap buffer");
    }
  }
  if (a.json) std::printf("%s\n", rows.dump(2).c_str());
  return 0;
}

// Times `reps` runs of `run` after one warm-up call.
template <typename Run, typename WarmUp>
Status TimeReps(const BenchArgs& a, TestResult& r, WarmUp warm_up, Run run) {
  PRIMEKV_RETURN_IF_ERROR(warm_up());
  const std::optional<CpuTicks> before = ReadCpuTicks();
  for (int rep = 0; rep < a.reps; ++rep) {
    PRIMEKV_ASSIGN_OR_RETURN(const double tps, run());
    r.tokens_per_s.push_back(tps);
  }
  r.steal_share = StealShare(before, ReadCpuTicks());
  r.summary = Summarise(r.tokens_per_s);
  if (!a.json)
    std::fprintf(stderr, "  %s t=%d: %.2f tok/s\n", r.name.c_str(), r.threads, r.summary.median);
  return Status::Ok();
}

// "pp<p>": p tokens prefilled into an empty cache.
Result<TestResult> BenchPrompt(BenchContext& b, KvCache& cache, int p) {
  TestResult r;
  r.name = "pp" + std::to_string(p);
  r.threads = b.pool.size();
  r.prompt = p;
  // Warm-up: one micro-batch (page faults of the mapping, the workspaces, the pool).
  PRIMEKV_RETURN_IF_ERROR(TimeReps(
      b.args, r, [&] { return RunPrompt(b, cache, std::min(p, b.args.ubatch)); },
      [&] { return RunPrompt(b, cache, p); }));
  r.workspace_bytes = static_cast<double>(b.ws.Bytes());
  return r;
}

// "tg<g> @ d<d>": g tokens decoded after a cache of d entries per head.
Result<TestResult> BenchGen(BenchContext& b, const Compressor& compressor, KvCache& cache, int d,
                            int g, double weight_bytes) {
  const ModelConfig& c = b.model.config();
  TestResult r;
  r.name = "tg" + std::to_string(g) + (d > 0 ? " @ d" + std::to_string(d) : "");
  r.threads = b.pool.size();
  r.gen = g;
  r.depth = d;
  DepthFillStats fill;
  const auto fill_start = Clock::now();
  PRIMEKV_RETURN_IF_ERROR(
      FillDepth(b.model, compressor, FillOptions(b.args), d, cache, b.pool, b.ws, b.rng, &fill));
  r.fill_s = Seconds(fill_start, Clock::now());
  r.workspace_bytes = static_cast<double>(fill.workspace_peak);
  r.score_s = fill.score_ms / 1000.0;
  r.kept_fraction = fill.kept_fraction;
  r.kv_allocated = static_cast<double>(fill.kv_allocated_peak);
  r.kv_bytes = static_cast<double>(cache.BytesInUse());
  const double entry_bytes =
      static_cast<double>(cache.BytesPerEntry()) * c.n_layers * c.n_kv_heads;  // one token
  r.kv_bytes_end = r.kv_bytes + g * entry_bytes;
  // The cache grows by g/2 entries on average over a run.
  r.bytes_per_token = weight_bytes + r.kv_bytes + 0.5 * g * entry_bytes;
  const auto paired_run = [&]() -> Result<double> {
    const double before = quant::MeasureBandwidth(b.weights, b.pool, 3);
    PRIMEKV_ASSIGN_OR_RETURN(const double tps, RunGen(b, cache, g));
    const double bw = std::max(before, quant::MeasureBandwidth(b.weights, b.pool, 3));
    r.bandwidth.push_back(bw);
    r.shares.push_back(bw > 0 ? r.bytes_per_token * tps / bw : 0.0);
    return tps;
  };
  PRIMEKV_RETURN_IF_ERROR(TimeReps(
      b.args, r, [&] { return RunGen(b, cache, 2); }, paired_run));
  r.bandwidth_median = Summarise(r.bandwidth).median;
  r.bandwidth_share = Summarise(r.shares).median;
  r.workspace_bytes = std::max(r.workspace_bytes, static_cast<double>(b.ws.Bytes()));
  return r;
}

// Every test for every thread count, in the order of the table.
Result<std::vector<TestResult>> RunTests(const BenchArgs& a, const Model& model,
                                         const Compressor& compressor, double weight_bytes) {
  int max_prompt = 0;
  for (int p : a.prompt) max_prompt = std::max(max_prompt, p);
  KvCacheOptions kv;
  kv.dtype = a.kv_type;
  std::vector<TestResult> results;
  for (int t : a.threads) {
    ThreadPool pool(t);
    BenchContext b{model, a,
                   pool,  WeightRegion(model),
                   {},    std::vector<float>(static_cast<size_t>(model.config().vocab_size))};
    KvCache cache = model.NewCache(kv);
    // Prefill tests allocate nothing while timed. A depth grows the pool as it is filled (in
    // chunked mode never past the budget plus one chunk), before any timing.
    cache.Reserve(max_prompt);
    for (int p : a.prompt) {
      if (p <= 0) continue;
      PRIMEKV_ASSIGN_OR_RETURN(TestResult r, BenchPrompt(b, cache, p));
      results.push_back(std::move(r));
    }
    for (int d : a.depth) {
      for (int g : a.gen) {
        if (g <= 0) continue;
        PRIMEKV_ASSIGN_OR_RETURN(TestResult r, BenchGen(b, compressor, cache, d, g, weight_bytes));
        results.push_back(std::move(r));
      }
    }
  }
  return results;
}

// Peak RSS against what a run cannot avoid holding: the mapped weights (a decode step reads
// every tensor) and the largest KV cache a decode test ends with. `loaded` is the RSS right
// after loading the model, before any weight page is read: the binary, its libraries, the
// file's header and the model's heap (tokenizer, norms), a fixed cost shown beside the ratio.
// `workspace` is the forward buffers at their largest (a prefill or a fill chunk's activations:
// the working set a chunked fill adds beside the KV pages), and `kv_allocated` the KV pool at
// its largest (free pages included); with those the budget accounts for the whole peak.
struct RssBudget {
  double weights = 0, kv = 0, loaded = 0, peak = 0;
  double workspace = 0, kv_allocated = 0;
  double Total() const { return weights + kv; }
  double Accounted() const { return weights + std::max(kv, kv_allocated) + workspace + loaded; }
};

RssBudget MakeRssBudget(const Model& model, const std::vector<TestResult>& results,
                        double loaded_rss, double peak_rss) {
  RssBudget r;
  r.weights = static_cast<double>(WeightRegion(model).size());
  for (const auto& t : results) {
    r.kv = std::max(r.kv, t.kv_bytes_end);
    r.kv_allocated = std::max(r.kv_allocated, t.kv_allocated);
    r.workspace = std::max(r.workspace, t.workspace_bytes);
  }
  r.loaded = loaded_rss;
  r.peak = peak_rss;
  return r;
}

struct BenchRun {
  const BenchArgs& args;
  const ModelConfig& config;
  std::string press;  // the press's name, or "none"
  double weight_bytes = 0;
  RssBudget rss;
  std::vector<TestResult> results;
};

void PrintJson(const BenchRun& run) {
  const BenchArgs& a = run.args;
  nlohmann::json j;
  j["model"] = a.model;
  j["model_name"] = run.config.name;
  j["weight_bytes_per_token"] = run.weight_bytes;
  j["peak_rss_bytes"] = run.rss.peak;
  j["rss_budget"] = {
      {"weights_bytes", run.rss.weights},
      {"kv_bytes", run.rss.kv},
      {"rss_after_load_bytes", run.rss.loaded},
      {"peak_over_budget", run.rss.peak / run.rss.Total()},
      {"peak_over_budget_and_load", run.rss.peak / (run.rss.Total() + run.rss.loaded)},
      {"workspace_bytes", run.rss.workspace},
      {"kv_allocated_bytes", run.rss.kv_allocated},
      {"peak_over_accounted", run.rss.peak / run.rss.Accounted()}};
  j["kernels"] = quant::IsaName(quant::BestKernelIsa());
  j["int8_kernels"] = quant::IsaName(quant::BestInt8Isa());
  j["kv_type"] = KvDTypeName(a.kv_type);
  j["weights"] = a.weight_memory == WeightMemory::kCopied ? "copied (--no-mmap)" : "mapped";
  j["press"] = run.press;
  j["ratio"] = a.ratio;
  j["fill"] = a.fill;
  j["mode"] = a.mode;
  if (a.mode == "chunked") j["chunk"] = a.chunk;
  j["reps"] = a.reps;
  nlohmann::json tests = nlohmann::json::array();
  for (const auto& r : run.results) {
    nlohmann::json e = {{"test", r.name},
                        {"threads", r.threads},
                        {"n_prompt", r.prompt},
                        {"n_gen", r.gen},
                        {"depth", r.depth},
                        {"tokens_per_s", r.tokens_per_s},
                        {"median", r.summary.median},
                        {"stddev", r.summary.stddev},
                        {"min", r.summary.min},
                        {"max", r.summary.max}};
    e["cpu_steal_share"] = r.steal_share >= 0 ? nlohmann::json(r.steal_share) : nlohmann::json();
    if (r.gen > 0) {
      e["kv_bytes"] = r.kv_bytes;
      e["kv_bytes_end"] = r.kv_bytes_end;
      e["kv_allocated_peak"] = r.kv_allocated;
      e["bytes_per_token"] = r.bytes_per_token;
      e["read_bytes_per_s"] = r.bandwidth;
      e["bandwidth_shares"] = r.shares;
      e["read_bytes_per_s_median"] = r.bandwidth_median;
      e["bandwidth_share"] = r.bandwidth_share;
      e["kept_fraction"] = r.kept_fraction;
      e["fill_s"] = r.fill_s;
      e["score_s"] = r.score_s;
    }
    tests.push_back(e);
  }
  j["tests"] = tests;
  std::printf("%s\n", j.dump(2).c_str());
}

void PrintTable(const BenchRun& run) {
  const std::string press_label = run.press != "none" && run.args.ratio > 0
                                      ? run.press + " " +
                                            std::to_string(run.args.ratio).substr(0, 4) +
                                            (run.args.mode == "chunked" ? " chunked" : "")
                                      : "none";
  std::printf(
      "| model | threads | press | test | t/s | bytes/token | read GB/s | of bandwidth | steal "
      "|\n");
  std::printf("|---|---:|---|---|---:|---:|---:|---:|---:|\n");
  for (const auto& r : run.results) {
    std::string bytes = "", bw = "", share = "", steal = "?";
    if (r.steal_share >= 0) {
      char buf[16];
      std::snprintf(buf, sizeof(buf), "%.0f%%", 100.0 * r.steal_share);
      steal = buf;
    }
    if (r.gen > 0) {
      bytes = Human(r.bytes_per_token);
      char buf[32];
      std::snprintf(buf, sizeof(buf), "%.2f", r.bandwidth_median / 1e9);
      bw = buf;
      std::snprintf(buf, sizeof(buf), "%.0f%%", 100.0 * r.bandwidth_share);
      share = buf;
    }
    std::printf("| %s | %d | %s | %s | %.2f ± %.2f | %s | %s | %s | %s |\n",
                run.config.name.c_str(), r.threads, press_label.c_str(), r.name.c_str(),
                r.summary.median, r.summary.stddev, bytes.c_str(), bw.c_str(), share.c_str(),
                steal.c_str());
  }
  std::printf("\npeak RSS %s", Human(run.rss.peak).c_str());
  if (run.rss.kv > 0) {
    std::printf(
        " = %.3fx (mapped weights %s + largest KV cache %s); %.3fx counting the %s "
        "resident right after loading (binary, tokenizer, metadata)",
        run.rss.peak / run.rss.Total(), Human(run.rss.weights).c_str(), Human(run.rss.kv).c_str(),
        run.rss.peak / (run.rss.Total() + run.rss.loaded), Human(run.rss.loaded).c_str());
    std::printf("; %.3fx of all that is accounted for (+ forward buffers %s, KV pool %s)",
                run.rss.peak / run.rss.Accounted(), Human(run.rss.workspace).c_str(),
                Human(run.rss.kv_allocated).c_str());
  }
  // The kernel table in use: PRIMEKV_MAX_ISA may cap it below what the CPU has.
  std::printf("; kernels %s, int8 %s\n", quant::IsaName(quant::BestKernelIsa()),
              quant::IsaName(quant::BestInt8Isa()));
  if (run.args.fill == "synthetic" && run.press != "none" && run.args.ratio > 0) {
    std::printf("(the press scored synthetic N(0,1) K/V rows; --fill prefill scores real ones)\n");
  }
}

// Every test must fit the context size before anything is allocated: a prefill test holds
// -p positions, a decode test -d + -n.
Status CheckTestsFit(const BenchArgs& a, const ModelConfig& config) {
  std::string note;
  PRIMEKV_ASSIGN_OR_RETURN(const int ctx,
                           ResolveContextSize(config, a.ctx_size, a.allow_ctx_overflow, &note));
  if (!note.empty()) std::fprintf(stderr, "primekv: warning: %s\n", note.c_str());
  const std::string where =
      " the context size of " + std::to_string(ctx) +
      (a.ctx_size == 0 ? " (the model's trained context; -c N --allow-ctx-overflow runs past it)"
                       : " (-c)");
  for (int p : a.prompt) {
    if (p > ctx) return Status::Error("-p " + std::to_string(p) + " tokens exceed" + where);
  }
  for (int d : a.depth) {
    for (int g : a.gen) {
      if (g > 0 && int64_t{d} + g > ctx) {
        return Status::Error("-d " + std::to_string(d) + " + -n " + std::to_string(g) +
                             " tokens exceed" + where);
      }
    }
  }
  return Status::Ok();
}

// The largest cache any test holds (-p, or -d + -n) must fit in memory, checked before the fill
// allocates it page by page.
Status CheckTestsMemory(const BenchArgs& a, const ModelConfig& config) {
  int64_t tokens = 0;
  for (int p : a.prompt) tokens = std::max<int64_t>(tokens, p);
  for (int d : a.depth) {
    for (int g : a.gen) {
      if (g > 0) tokens = std::max(tokens, int64_t{d} + g);
    }
  }
  return CheckMemoryFits(tokens, KvCacheBytes(config, a.kv_type, tokens), 0, a.memory_limit);
}

int RunBench(const BenchArgs& a) {
  if (a.bandwidth_only) return RunBandwidthOnly(a);
  if (a.model.empty()) return Fail("bench: -m MODEL is required (or --bandwidth)");
  auto spec = ParsePressSpec(a.press);
  if (!spec.ok()) return Fail(spec.message());
  auto press = MakePress(*spec);
  if (!press.ok()) return Fail(press.message());
  auto model = Model::Load(a.model, a.weight_memory, a.ctx_size);
  if (!model.ok()) return Fail(model.message());
  if (Status s = CheckKvDType(a.kv_type, model->config().head_dim); !s.ok())
    return Fail(s.message());
  if (Status s = CheckTestsFit(a, model->config()); !s.ok()) return Fail(s.message());
  if (Status s = CheckTestsMemory(a, model->config()); !s.ok()) return Fail(s.message());
  const double loaded_rss = CurrentRssBytes();
  Compressor compressor(*model, std::move(press).value());
  if (const Status& fits = compressor.CheckModel(); !fits.ok()) return Fail(fits.message());
  if (compressor.enabled() && compressor.Needs().ReadsQueries()) {
    return Fail("bench: press '" + compressor.press().name +
                "' reads queries, which bench does not capture; use a query-free press");
  }
  if (compressor.enabled() && compressor.Needs().reconstruction) {
    return Fail("bench: press '" + compressor.press().name +
                "' needs a second pass over the whole context, which bench does not run; "
                "measure it with primekv eval");
  }
  const double weight_bytes = WeightBytesPerToken(*model);
  auto results = RunTests(a, *model, compressor, weight_bytes);
  if (!results.ok()) return Fail(results.message());
  const RssBudget rss = MakeRssBudget(*model, *results, loaded_rss, PeakRssBytes());
  const BenchRun run{a,
                     model->config(),
                     compressor.enabled() ? compressor.press().name : "none",
                     weight_bytes,
                     rss,
                     std::move(results).value()};
  if (a.json) {
    PrintJson(run);
  } else {
    PrintTable(run);
  }
  return 0;
}

}  // namespace

void AddBench(CLI::App& app, Runner& run) {
  auto a = std::make_shared<BenchArgs>();
  auto* cmd = app.add_subcommand("bench", "Prefill and decode throughput (llama-bench style)");
  cmd->add_option("-m,--model", a->model, "GGUF model file");
  AddNoMmap(*cmd, a->weight_memory);
  struct ListOption {
    const char* flags;
    std::vector<int>* values;
    const char* help;
    CLI::Validator check;
  };
  for (const ListOption& o :
       {ListOption{"-p,--n-prompt", &a->prompt, "Prefill lengths (0 = none)",
                   IntegerIn(0, kMaxTokens)},
        ListOption{"-n,--n-gen", &a->gen, "Decoded tokens per run (0 = none)",
                   IntegerIn(0, kMaxTokens)},
        ListOption{"-d,--depth", &a->depth, "KV entries per head before decoding",
                   IntegerIn(0, kMaxTokens)},
        ListOption{"-t,--threads", &a->threads, "Thread counts (0 = all cores)", Threads()}}) {
    cmd->add_option(o.flags, *o.values, o.help)
        ->delimiter(',')
        ->capture_default_str()
        ->check(o.check);
  }
  cmd->add_option("-u,--ubatch", a->ubatch,
                  "Prefill micro-batch (also splits a larger --chunk of --mode chunked)")
      ->capture_default_str()
      ->check(IntegerIn(1, kMaxTokens));
  cmd->add_option("-r,--reps", a->reps, "Timed runs per test (after one warm-up)")
      ->capture_default_str()
      ->check(IntegerIn(1, kMaxReps));
  cmd->add_option("--press", a->press, "Compress the cache at depth with this press")
      ->capture_default_str()
      ->check(PressList(/*single=*/true));
  cmd->add_option("--ratio", a->ratio, "Fraction of the cache the press removes, in [0, 1)")
      ->capture_default_str()
      ->check(RealIn(0, 1, false, /*hi_open=*/true));
  cmd->add_option("--fill", a->fill,
                  "How the depth is filled: synthetic (random K/V rows; the decode step reads "
                  "the same bytes; the press scores these rows) | prefill (real forward passes "
                  "over random tokens)")
      ->capture_default_str()
      ->check(OneOf({"synthetic", "prefill"}));
  cmd->add_option("--mode", a->mode,
                  "When the press compresses the depth: context (the default: fill all of it, "
                  "then compress once) | chunked (fill --chunk tokens at a time and after each "
                  "cut every head over KeepCount(tokens so far, ratio) to it, as the pipeline's "
                  "chunked mode; the KV cache never holds more than the budget plus one chunk)")
      ->capture_default_str()
      ->check(OneOf({"context", "chunked"}));
  cmd->add_option("--chunk", a->chunk, "Tokens per chunk in --mode chunked")
      ->capture_default_str()
      ->check(IntegerIn(1, kMaxTokens));
  cmd->add_option("-c,--ctx-size", a->ctx_size,
                  "Context size in tokens (0 = the model's trained context); each test's "
                  "positions (-p, or -d + -n) must fit")
      ->check(IntegerIn(0, kMaxTokens));
  cmd->add_flag("--allow-ctx-overflow", a->allow_ctx_overflow,
                "Allow -c above the model's trained context (warns)");
  AddMemoryLimit(*cmd, a->memory_limit);
  AddKvType(*cmd, a->kv_type);
  cmd->add_flag("--json", a->json, "Print JSON instead of a markdown table");
  cmd->add_flag("--bandwidth", a->bandwidth_only,
                "Only measure the read bandwidth: over a heap buffer, or over the mapped weights "
                "of -m MODEL when given");
  cmd->add_option("--bandwidth-mib", a->bandwidth_mib, "Heap buffer of --bandwidth")
      ->capture_default_str()
      ->check(IntegerIn(1, kMaxBandwidthMib));
  cmd->callback([&run, a] { run = [a] { return RunBench(*a); }; });
}

}  // namespace primekv::cli
