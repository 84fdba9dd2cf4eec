// The press machinery on a real (random-weight) model: identities, budgets, positions, modes.
#include "primekv/session/pipeline.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <functional>
#include <limits>
#include <random>

#include "common/random_models.h"
#include "primekv/model/random_model.h"
#include "primekv/press/compressor.h"

namespace primekv {
namespace {

const Model& LoadRandom(const RandomModelSpec& spec, const char* name) {
  // One file per process: ctest runs this file's tests as parallel processes, and two writers
  // of one path race on its temporary file.
  const auto path =
      std::filesystem::temp_directory_path() / (std::to_string(::getpid()) + "_" + name);
  Status s = WriteRandomModel(spec, path);
  Check(s.ok(), "random model");
  auto m = Model::Load(path);
  Check(m.ok(), "load random model");
  std::filesystem::remove(path);  // the mapping stays valid
  return *new Model(std::move(m).value());
}

// Two layers, GQA 2:1: every press and mode has something to do.
const Model& SmallModel() {
  static const Model& model = [] {
    RandomModelSpec spec = SmallLlamaSpec(/*seed=*/11);
    spec.max_context = 32768;
    return std::cref(LoadRandom(spec, "primekv_pipeline_small.gguf"));
  }();
  return model;
}

// The cheapest shape that still has a KV cache, for 16K-token prefills.
const Model& TinyModel() {
  static const Model& model = [] {
    RandomModelSpec spec;
    spec.arch = Arch::kLlama;
    spec.n_layers = 1;
    spec.d_model = 32;
    spec.n_heads = 2;
    spec.n_kv_heads = 1;
    spec.head_dim = 16;
    spec.d_ff = 64;
    spec.vocab_size = 512;
    spec.max_context = 32768;
    spec.seed = 12;
    return std::cref(LoadRandom(spec, "primekv_pipeline_tiny.gguf"));
  }();
  return model;
}

std::vector<Token> RandomTokens(int n, uint32_t seed) { return RandomTokenIds(n, seed, 3, 500); }

Press Make(const std::string& name) {
  auto p = MakePress(*ParsePressSpec(name));
  Check(p.ok(), "press");
  return std::move(p).value();
}

// The presses these tests run, read from the registry table (src/press/registry.cc), so a new
// row is tested without being named here: every row with a scorer ("none" has none: it
// compresses nothing), and each budget-wrapper row ("adakv:<press>") over every scorer row it
// takes (not one that reads the true future queries: docs/design.md §3). A row runs with its
// defaults, so one PrimeKV parameter variant is added.
std::vector<std::string> RegistryPresses() {
  std::vector<std::string> scorers;
  for (const PressEntry& e : PressTable())
    if (e.factory != nullptr) scorers.push_back(e.info.name);
  std::vector<std::string> names = scorers;
  for (const PressEntry& e : PressTable()) {
    if (e.wraps.empty()) continue;
    for (const std::string& inner : scorers)
      if (!Make(inner).scorer->Needs().future_queries)
        names.push_back(std::string(e.wraps) + ":" + inner);
  }
  names.push_back("primekv:key=cosine,value=norm");
  return names;
}

// Whether a test here gives `needs` to a press it compresses itself (a prefill through a
// PressCapture, KVzip's pass when asked for, then Compressor::Compress): all but the true future
// queries, which only the fidelity protocol records (the oracle).
bool DirectCompressionProvides(const PressNeeds& needs) { return !needs.future_queries; }

// Prefills `ctx` into an empty `cache` through `cap` and, when the press asks for it, runs
// KVzip's pass as RunPipeline does.
Status PrefillFor(const Model& m, const Compressor& comp, std::span<const Token> ctx,
                  KvCache& cache, PressCapture& cap, ThreadPool& pool, ForwardWorkspace& ws) {
  std::vector<float> last(static_cast<size_t>(m.config().vocab_size));
  PRIMEKV_RETURN_IF_ERROR(
      m.Forward(ctx, cache, {}, {last.data(), 1, m.config().vocab_size}, pool, ws, &cap));
  if (comp.Needs().reconstruction) return ReconstructContext(m, cache, ctx, 0, pool, cap);
  return Status::Ok();
}

// Whether RunPipeline runs `press` in `mode`, from what the press declares (docs/design.md §4):
// not a press that reads the true future queries (CheckPipelinePress); not KVzip's pass over the
// whole context where the cache is compressed again later (chunked, decode, multiturn); in
// chunked mode only a query-free press. Pipeline.RunsEveryPressItDeclaresItCanRun checks this
// against RunPipeline itself.
bool PipelineRuns(const Press& press, CompressionMode mode) {
  if (!CheckPipelinePress(press).ok()) return false;
  const bool compresses_again = mode == CompressionMode::kChunked ||
                                mode == CompressionMode::kDecode ||
                                mode == CompressionMode::kMultiTurn;
  if (press.scorer && press.scorer->Needs().reconstruction && compresses_again) return false;
  return mode != CompressionMode::kChunked || press.query_free;
}

TEST(Compression, RatioZeroReproducesLogitsExactly) {
  const Model& m = SmallModel();
  ThreadPool pool(2);
  const auto ctx = RandomTokens(300, 1);
  const auto next = RandomTokens(20, 2);
  const int V = m.config().vocab_size;
  std::vector<float> ref(next.size() * V), got(next.size() * V), last(V);
  ForwardWorkspace ws;
  KvCache full = m.NewCache();
  ASSERT_TRUE(m.Forward(ctx, full, {}, {last.data(), 1, V}, pool, ws).ok());
  ASSERT_TRUE(m.Forward(next, full, {true}, {ref.data(), 20, V}, pool, ws).ok());
  for (const std::string& name : RegistryPresses()) {
    Compressor comp(m, Make(name));
    if (!DirectCompressionProvides(comp.Needs())) continue;
    PressCapture cap(m, comp.Needs());
    KvCache cache = m.NewCache();
    ASSERT_TRUE(PrefillFor(m, comp, ctx, cache, cap, pool, ws).ok()) << name;
    ASSERT_TRUE(comp.Compress(cache, 0.0, &cap, pool).ok()) << name;
    ASSERT_TRUE(m.Forward(next, cache, {true}, {got.data(), 20, V}, pool, ws).ok());
    EXPECT_EQ(got, ref) << name << ": ratio 0 must change nothing";
  }
}

// One prefill per press, compressed at each ratio from a copy of the cache and the capture.
TEST(Compression, KeepsExactCountAndContinuesPositions) {
  const Model& m = SmallModel();
  ThreadPool pool(2);
  const int n = 777;
  const auto ctx = RandomTokens(n, 3);
  const int V = m.config().vocab_size;
  std::vector<float> logits(V);
  ForwardWorkspace ws;
  for (const std::string& name : RegistryPresses()) {
    if (!DirectCompressionProvides(Make(name).scorer->Needs())) continue;
    Press proto = Make(name);
    const BudgetKind kind = proto.budget.kind;
    Compressor comp(m, std::move(proto));
    PressCapture prefill_cap(m, comp.Needs());
    KvCache prefilled = m.NewCache();
    ASSERT_TRUE(PrefillFor(m, comp, ctx, prefilled, prefill_cap, pool, ws).ok()) << name;
    for (double r : {0.25, 0.5, 0.75, 0.9}) {
      SCOPED_TRACE(::testing::Message() << name << " ratio " << r);
      PressCapture cap = prefill_cap;
      KvCache cache = prefilled.Clone();
      CompressStats st;
      ASSERT_TRUE(comp.Compress(cache, r, &cap, pool, &st).ok());
      int64_t total = 0;
      for (int l = 0; l < m.config().n_layers; ++l) {
        for (int h = 0; h < m.config().n_kv_heads; ++h) {
          total += cache.Length(l, h);
          if (kind == BudgetKind::kUniform) {
            EXPECT_EQ(cache.Length(l, h), KeepCount(n, r));
          }
          std::vector<int32_t> pos;
          cache.ReadHead(l, h, nullptr, nullptr, &pos);
          EXPECT_TRUE(std::is_sorted(pos.begin(), pos.end()));
        }
      }
      // Budgets that move entries between heads or layers keep the uniform total.
      if (kind == BudgetKind::kAdaptive || kind == BudgetKind::kGlobal) {
        EXPECT_EQ(total, int64_t{KeepCount(n, r)} * m.config().n_layers * m.config().n_kv_heads);
      }
      EXPECT_EQ(st.bytes_after, static_cast<size_t>(total) * cache.BytesPerEntry());
      EXPECT_EQ(cache.NextPosition(), n);
      const Token t = 42;
      ASSERT_TRUE(
          m.Forward(std::span<const Token>(&t, 1), cache, {}, {logits.data(), 1, V}, pool, ws)
              .ok());
      for (int h = 0; h < m.config().n_kv_heads; ++h) {
        EXPECT_EQ(cache.PositionAt(0, h, cache.Length(0, h) - 1), n)
            << "new token takes the original next position";
      }
    }
  }
}

TEST(Compression, ChunkedPrefillKeepsPeakWithinBudgetPlusChunk) {
  const Model& m = TinyModel();
  ThreadPool pool(2);
  // Under the sanitizers a quarter of the document, in sixteen chunks that each cut the cache.
  const int n = kSanitized ? 4096 : 16384, chunk = kSanitized ? 256 : 512;
  const auto ctx = RandomTokens(n, 4);
  for (const std::string& name : RegistryPresses()) {
    Press press = Make(name);
    if (!PipelineRuns(press, CompressionMode::kChunked)) continue;
    SCOPED_TRACE(name);
    Compressor comp(m, std::move(press));
    PipelineOptions opt;
    opt.schedule.ratio = 0.75;
    opt.mode = CompressionMode::kChunked;
    opt.schedule.chunk = chunk;
    opt.max_new_tokens = 1;
    auto r = RunPipeline(m, comp, opt, ctx, {}, pool);
    ASSERT_TRUE(r.ok()) << r.message();
    const size_t per_token = static_cast<size_t>(m.config().n_layers) * m.config().n_kv_heads *
                             m.NewCache().BytesPerEntry();
    const size_t bound =
        static_cast<size_t>(KeepCount(n, opt.schedule.ratio) + chunk + 1) * per_token;
    EXPECT_LE(r->kv_bytes_peak, bound);
    EXPECT_LT(r->kv_bytes_peak, r->kv_bytes_full / 3);
  }
  // Query-aware presses refuse chunked mode instead of silently doing something else.
  Compressor snap(m, Make("snapkv"));
  PipelineOptions opt;
  opt.schedule.ratio = 0.5;
  opt.mode = CompressionMode::kChunked;
  EXPECT_FALSE(RunPipeline(m, snap, opt, ctx, {}, pool).ok());
}

TEST(Attention, SixteenThousandTokenPrefillUsesTileScratchOnly) {
  const Model& m = TinyModel();
  ThreadPool pool(2);
  const int V = m.config().vocab_size;
  std::vector<float> logits(V);
  size_t small = 0;
  for (int n : {1024, 16384}) {
    ForwardWorkspace ws;
    KvCache cache = m.NewCache();
    ASSERT_TRUE(m.Forward(RandomTokens(n, 5), cache, {}, {logits.data(), 1, V}, pool, ws).ok());
    if (small == 0) small = ws.attention.HighWaterBytes();
    EXPECT_EQ(ws.attention.HighWaterBytes(), small) << "attention scratch must not grow with n";
    EXPECT_LT(ws.attention.HighWaterBytes(), 1u << 20);
  }
}

TEST(Pipeline, MultiTurnStaysNearBudgetAndAnswersEveryTurn) {
  const Model& m = SmallModel();
  ThreadPool pool(2);
  Compressor comp(m, Make("primekv"));
  PipelineOptions opt;
  opt.schedule.ratio = 0.5;
  opt.mode = CompressionMode::kMultiTurn;
  opt.max_new_tokens = 8;
  const auto ctx = RandomTokens(400, 6);
  std::vector<std::vector<Token>> qs{RandomTokens(10, 7), RandomTokens(12, 8), RandomTokens(9, 9)};
  auto r = RunPipeline(m, comp, opt, ctx, qs, pool);
  ASSERT_TRUE(r.ok()) << r.message();
  EXPECT_EQ(r->turns.size(), 3u);
  EXPECT_GE(r->compressions, 2);
  const size_t per_token = static_cast<size_t>(m.config().n_layers) * m.config().n_kv_heads *
                           m.NewCache().BytesPerEntry();
  EXPECT_LE(r->kv_bytes_final, static_cast<size_t>(KeepCount(400, 0.5)) * per_token)
      << "every turn ends back at the context budget";
  EXPECT_LE(r->kv_bytes_peak, 400 * per_token);
}

// kFirstQuestion compresses once, with the first question in SnapKV's window: its first turn is
// question mode's first turn, and no later turn compresses again.
TEST(Pipeline, FirstQuestionCompressesOnceWithTheFirstQuestion) {
  const Model& m = SmallModel();
  ThreadPool pool(2);
  Compressor comp(m, Make("snapkv"));
  PipelineOptions opt;
  opt.schedule.ratio = 0.5;
  opt.max_new_tokens = 6;
  const auto ctx = RandomTokens(300, 11);
  std::vector<std::vector<Token>> qs{RandomTokens(10, 12), RandomTokens(8, 13),
                                     RandomTokens(9, 14)};
  opt.mode = CompressionMode::kQuestion;
  auto per_question = RunPipeline(m, comp, opt, ctx, qs, pool);
  opt.mode = CompressionMode::kFirstQuestion;
  auto once = RunPipeline(m, comp, opt, ctx, qs, pool);
  ASSERT_TRUE(per_question.ok()) << per_question.message();
  ASSERT_TRUE(once.ok()) << once.message();
  ASSERT_EQ(once->turns.size(), 3u);
  EXPECT_EQ(per_question->compressions, 3);
  EXPECT_EQ(once->compressions, 1);
  EXPECT_EQ(once->turns[0].tokens, per_question->turns[0].tokens);
  const size_t per_token = static_cast<size_t>(m.config().n_layers) * m.config().n_kv_heads *
                           m.NewCache().BytesPerEntry();
  // The budget is taken over the context and the first question (question mode's report holds
  // its last turn's compression instead).
  EXPECT_EQ(once->kv_bytes_compressed, static_cast<size_t>(KeepCount(310, 0.5)) * per_token);
}

// -n 2147483647 once overflowed the decode reservation (and -n 3000000 reserved gigabytes): the
// reservation is now bounded by the room left in the trained context.
TEST(Pipeline, HugeMaxNewTokensReservesOnlyTheRoomInTheContext) {
  const Model& m = TinyModel();
  ThreadPool pool(1);
  Compressor comp(m, Make("none"));
  for (int max_new : {std::numeric_limits<int>::max(), 3000000, 1 << 24}) {
    PipelineOptions opt;
    opt.max_new_tokens = max_new;
    int produced = 0;
    opt.on_token = [&](int, Token) { return ++produced < 3; };
    auto r = RunPipeline(m, comp, opt, RandomTokens(20, 5), {}, pool);
    ASSERT_TRUE(r.ok()) << r.message();
    EXPECT_LE(r->turns[0].tokens.size(), 3u);
    // At most the trained context's 32768 positions are reserved (1 layer, 1 KV head of 16
    // dims: 32768 * (2 * 16 * 2 + 4) bytes = 2.2 MB), not max_new of them.
    EXPECT_LE(r->kv_bytes_reserved, size_t{32768 + 64} * (2 * 16 * 2 + 4)) << max_new;
  }
}

TEST(ContextSize, DefaultsToTheTrainedContextAndOverflowIsOptIn) {
  ModelConfig c;
  c.max_context = 2048;
  EXPECT_EQ(*ResolveContextSize(c, 0, false), 2048);
  EXPECT_EQ(*ResolveContextSize(c, 100, false), 100);
  EXPECT_EQ(*ResolveContextSize(c, 2048, false), 2048);
  auto r = ResolveContextSize(c, 4096, false);
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.message().find("--ctx-size 4096 exceeds the model's trained context of 2048"),
            std::string::npos)
      << r.message();
  std::string warning;
  EXPECT_EQ(*ResolveContextSize(c, 4096, true, &warning), 4096);
  EXPECT_NE(warning.find("runs past the model's trained context"), std::string::npos);
  EXPECT_FALSE(ResolveContextSize(c, 0, true).ok());  // the opt-in needs a size
  EXPECT_FALSE(ResolveContextSize(c, -1, false).ok());
  EXPECT_FALSE(ResolveContextSize(c, int64_t{kMaxContextSize} + 1, true).ok());
  c.max_context = 0;  // the model does not say
  EXPECT_FALSE(ResolveContextSize(c, 0, false).ok());
  EXPECT_EQ(*ResolveContextSize(c, 512, false), 512);
}

TEST(ContextSize, ConversationPositionsFollowTheMode) {
  const std::vector<std::vector<Token>> q = {{1, 2, 3}, {4, 5}};
  // Independent turns: the context and the largest turn; multi-turn: every turn stays.
  EXPECT_EQ(ConversationPositions(CompressionMode::kContext, 100, q, 10), 100 + 3 + 10);
  EXPECT_EQ(ConversationPositions(CompressionMode::kQuestion, 100, q, 10), 100 + 3 + 10);
  EXPECT_EQ(ConversationPositions(CompressionMode::kMultiTurn, 100, q, 10), 100 + 13 + 12);
  EXPECT_EQ(ConversationPositions(CompressionMode::kDecode, 100, {}, 10), 110);
  // The first question stays in the cache under every later turn.
  EXPECT_EQ(ConversationPositions(CompressionMode::kFirstQuestion, 100, q, 10), 100 + 3 + 3 + 10);
  EXPECT_EQ(ParseCompressionMode("first-question"), CompressionMode::kFirstQuestion);
  EXPECT_EQ(CompressionModeName(CompressionMode::kFirstQuestion), "first-question");
  // No overflow at the extremes of int.
  EXPECT_EQ(
      ConversationPositions(CompressionMode::kMultiTurn, 100, q, std::numeric_limits<int>::max()),
      100 + 5 + 2 * int64_t{std::numeric_limits<int>::max()});
}

TEST(Pipeline, OracleIsRefusedOutsideFidelity) {
  const Model& m = SmallModel();
  ThreadPool pool(1);
  Compressor comp(m, Make("oracle"));
  PipelineOptions opt;
  opt.schedule.ratio = 0.5;
  auto r = RunPipeline(m, comp, opt, RandomTokens(50, 1), {}, pool);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.message(),
            "press oracle reads the true future queries, so it runs only under the fidelity "
            "protocol (primekv fidelity)");
}

// This file skips a press in a mode only where PipelineRuns says RunPipeline refuses it: that
// claim, checked against RunPipeline for every press and mode.
TEST(Pipeline, RunsEveryPressItDeclaresItCanRun) {
  const Model& m = SmallModel();
  ThreadPool pool(2);
  const auto ctx = RandomTokens(80, 41);
  const std::vector<std::vector<Token>> qs{RandomTokens(4, 42), RandomTokens(4, 43)};
  for (const std::string& name : RegistryPresses()) {
    for (CompressionMode mode :
         {CompressionMode::kContext, CompressionMode::kQuestion, CompressionMode::kMultiTurn,
          CompressionMode::kChunked, CompressionMode::kDecode, CompressionMode::kFirstQuestion}) {
      SCOPED_TRACE(::testing::Message() << name << " " << CompressionModeName(mode));
      Compressor comp(m, Make(name));
      PipelineOptions opt;
      opt.schedule.ratio = 0.5;
      opt.mode = mode;
      opt.schedule.chunk = 32;
      opt.schedule.interval = 2;
      opt.max_new_tokens = 3;
      auto r = RunPipeline(m, comp, opt, ctx, qs, pool);
      EXPECT_EQ(r.ok(), PipelineRuns(comp.press(), mode)) << (r.ok() ? "" : r.message());
    }
  }
}

}  // namespace
}  // namespace primekv

namespace primekv {
namespace {

TEST(Pipeline, SharedPrefillGivesTheSameAnswers) {
  const Model& m = SmallModel();
  ThreadPool pool(2);
  const auto ctx = RandomTokens(500, 21);
  std::vector<std::vector<Token>> qs{RandomTokens(8, 22), RandomTokens(8, 23)};
  const std::vector<std::string> names = RegistryPresses();
  PressNeeds all;
  for (const std::string& name : names) {
    const Press press = Make(name);
    if (PipelineRuns(press, CompressionMode::kContext))
      all = UnionNeeds(all, press.scorer->Needs());
  }
  auto pre = PrefillForPresses(m, all, {}, ctx, pool);
  ASSERT_TRUE(pre.ok()) << pre.message();
  // KVzip is among the presses: its second pass is timed apart from the shared prefill.
  ASSERT_TRUE(all.reconstruction);
  EXPECT_GT(pre->second_pass_ms, 0.0);
  EXPECT_GT(pre->prefill_ms, 0.0);
  for (const std::string& name : names) {
    for (CompressionMode mode : {CompressionMode::kContext, CompressionMode::kMultiTurn}) {
      if (!PipelineRuns(Make(name), mode)) continue;
      SCOPED_TRACE(::testing::Message() << name << " " << CompressionModeName(mode));
      Compressor comp(m, Make(name));
      PipelineOptions opt;
      opt.schedule.ratio = 0.6;
      opt.mode = mode;
      opt.max_new_tokens = 6;
      auto a = RunPipeline(m, comp, opt, ctx, qs, pool);
      auto b = RunPipeline(m, comp, opt, ctx, qs, pool, &*pre);
      ASSERT_TRUE(a.ok()) << a.message();
      ASSERT_TRUE(b.ok()) << b.message();
      for (size_t t = 0; t < qs.size(); ++t) EXPECT_EQ(a->turns[t].tokens, b->turns[t].tokens);
      EXPECT_EQ(a->kept_per_layer, b->kept_per_layer);
    }
  }
}

}  // namespace
}  // namespace primekv

// KVzip against a reference written from kvpress's description: the context is fed again, in
// chunks, behind its prompt; an entry's score is the largest softmax probability any query of its
// chunk's pass (any head of the group) gives it, where a query sees the first 4 entries, its
// chunk's entries and the pass's own tokens up to itself. Here every probability comes from a
// double softmax over the whole cache with the other rows masked.
namespace primekv {
namespace {

// Every layer's queries of one forward call.
struct RecordQueries : ForwardTap {
  std::vector<std::vector<float>> q;  // [layer][rows * n_heads * d]
  void OnQueries(int layer, std::span<const int32_t>, MatView<const float> x) override {
    if (std::ssize(q) <= layer) q.resize(layer + 1);
    for (int64_t r = 0; r < x.rows; ++r)
      q[layer].insert(q[layer].end(), x.Row(r), x.Row(r) + x.cols);
  }
};

std::vector<std::vector<float>> KvzipReference(const Model& m, std::span<const Token> ctx,
                                               int chunk, ThreadPool& pool) {
  const ModelConfig& c = m.config();
  const int n = static_cast<int>(ctx.size()), d = c.head_dim;
  const auto first = m.tokenizer().Encode("\n\nRepeat the previous context exactly.\n", false);
  const auto later = m.tokenizer().Encode(
      "\n\nRepeat the part of the previous context exactly, starting with", false);
  std::vector<std::vector<float>> ref(c.n_layers, std::vector<float>(size_t(c.n_kv_heads) * n));
  KvCache cache = m.NewCache();
  ForwardWorkspace ws;
  std::vector<float> logits(c.vocab_size);
  const MatView<float> out(logits.data(), 1, c.vocab_size);
  Check(m.Forward(ctx, cache, {}, out, pool, ws).ok(), "prefill");
  for (int b = 0; b < n; b += chunk) {
    const int e = std::min(n, b + chunk);
    std::vector<Token> t = b == 0 ? first : later;
    if (b > 0) t.insert(t.end(), ctx.begin() + std::max(0, b - 8), ctx.begin() + b);
    t.insert(t.end(), ctx.begin() + b, ctx.begin() + e);
    RecordQueries rec;
    Check(m.Forward(t, cache, {}, out, pool, ws, &rec).ok(), "repeat");
    for (int l = 0; l < c.n_layers; ++l) {
      for (int h = 0; h < c.n_kv_heads; ++h) {
        std::vector<float> keys;
        std::vector<int32_t> pos;
        cache.ReadHead(l, h, &keys, nullptr, &pos);
        const MatView<const float> k(keys.data(), std::ssize(pos), d);
        std::vector<double> p(pos.size());
        for (int g = 0; g < c.group(); ++g) {
          const int qh = h * c.group() + g;
          for (size_t r = 0; r < t.size(); ++r) {
            const float* q = rec.q[l].data() + (r * c.n_heads + qh) * d;
            for (size_t j = 0; j < pos.size(); ++j) {
              const bool seen = pos[j] < std::min(4, b) || (pos[j] >= b && pos[j] < e) ||
                                (pos[j] >= n && pos[j] <= n + static_cast<int>(r));
              p[j] = seen ? DotF64(q, k.Row(j), d) / std::sqrt(double(d))
                          : -std::numeric_limits<double>::infinity();
            }
            MaskedSoftmax(p);
            for (int i = b; i < e; ++i) {
              float& s = ref[l][size_t(h) * n + i];
              s = std::max(s, static_cast<float>(p[i]));
            }
          }
        }
      }
    }
    cache.TruncateFrom(n);
  }
  for (auto& layer : ref)
    for (int h = 0; h < c.n_kv_heads; ++h) std::fill_n(layer.begin() + h * n, 4, 1.0f);
  return ref;
}

TEST(Kvzip, ScoresMatchTheReconstructionReference) {
  const Model& m = SmallModel();
  ThreadPool pool(2);
  const auto ctx = RandomTokens(150, 31);
  const int prompt = static_cast<int>(
      m.tokenizer()
          .Encode("\n\nRepeat the part of the previous context exactly, starting with", false)
          .size() +
      8);
  // One pass over the whole context, then a window that leaves room for chunks of 64 only.
  for (const auto& [window, chunk] : {std::pair{0, 150}, std::pair{150 + prompt + 64, 64}}) {
    SCOPED_TRACE(::testing::Message() << "chunk " << chunk);
    const auto ref = KvzipReference(m, ctx, chunk, pool);
    KvCache cache = m.NewCache();
    PressCapture capture(m, {.reconstruction = true});
    ForwardWorkspace ws;
    std::vector<float> logits(m.config().vocab_size);
    ASSERT_TRUE(
        m.Forward(ctx, cache, {}, {logits.data(), 1, m.config().vocab_size}, pool, ws).ok());
    ASSERT_TRUE(ReconstructContext(m, cache, ctx, window, pool, capture).ok());
    EXPECT_EQ(cache.NextPosition(), 150);  // the pass leaves the cache as it found it
    EXPECT_EQ(cache.Length(0, 0), 150);
    for (int l = 0; l < m.config().n_layers; ++l) {
      const auto got = capture.Reconstruction(l);
      ASSERT_EQ(got.size(), ref[l].size());
      double worst = 0;
      for (size_t i = 0; i < got.size(); ++i)
        worst = std::max(worst, double(std::abs(got[i] - ref[l][i])));
      EXPECT_LT(worst, 1e-5) << "layer " << l;
    }
  }
}

TEST(Kvzip, CompressesOnceAfterThePrefillOnly) {
  const Model& m = SmallModel();
  ThreadPool pool(2);
  const auto ctx = RandomTokens(300, 32);
  Compressor comp(m, Make("kvzip"));
  EXPECT_FALSE(comp.press().query_free);
  PipelineOptions opt;
  opt.schedule.ratio = 0.75;
  opt.max_new_tokens = 4;
  auto r = RunPipeline(m, comp, opt, ctx, {RandomTokens(8, 33)}, pool);
  ASSERT_TRUE(r.ok()) << r.message();
  // One threshold over layers: the total is the uniform total, the sinks are kept.
  int64_t kept = 0;
  for (int64_t k : r->kept_per_layer) kept += k;
  EXPECT_EQ(kept, int64_t{KeepCount(300, 0.75)} * m.config().n_layers * m.config().n_kv_heads);
  for (CompressionMode mode :
       {CompressionMode::kChunked, CompressionMode::kDecode, CompressionMode::kMultiTurn}) {
    opt.mode = mode;
    auto refused = RunPipeline(m, comp, opt, ctx, {RandomTokens(8, 33)}, pool);
    ASSERT_FALSE(refused.ok());
    EXPECT_NE(refused.message().find("repeats it"), std::string::npos) << refused.message();
  }
  // A window with no room for the pass is an error that names the way out.
  PressCapture capture(m, {.reconstruction = true});
  KvCache cache = m.NewCache();
  ForwardWorkspace ws;
  std::vector<float> logits(m.config().vocab_size);
  ASSERT_TRUE(m.Forward(ctx, cache, {}, {logits.data(), 1, m.config().vocab_size}, pool, ws).ok());
  const Status s = ReconstructContext(m, cache, ctx, 320, pool, capture);
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.message().find("--allow-ctx-overflow"), std::string::npos) << s.message();
}

}  // namespace
}  // namespace primekv
