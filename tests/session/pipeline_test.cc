// The press machinery on a real (random-weight) model: identities, budgets, positions, modes.
#include "primekv/session/pipeline.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <limits>
#include <optional>
#include <string_view>

#include "common/random_models.h"
#include "primekv/model/random_model.h"
#include "primekv/press/compressor.h"

namespace primekv {
namespace {

// Two layers, GQA 2:1: every press and mode has something to do.
const Model& SmallModel() {
  static const Model& model = []() -> const Model& {
    RandomModelSpec spec = SmallLlamaSpec(/*seed=*/11);
    spec.max_context = 32768;
    return *new Model(WriteLoadAndRemove(spec, "primekv_pipeline_small.gguf"));
  }();
  return model;
}

// The cheapest shape that still has a KV cache, for 16K-token prefills.
const Model& TinyModel() {
  static const Model& model =
      *new Model(WriteLoadAndRemove(LongPrefillSpec(/*seed=*/12), "primekv_pipeline_tiny.gguf"));
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

// What a conversation may do with each press, written by hand from the presses' definitions
// (their rows in src/press/registry.cc, docs/design.md §3-4), not derived from what a press
// declares: Pipeline.RunsEveryPressInTheModesItsDefinitionAllows holds RunPipeline (CheckSchedule)
// to it.
enum class Allowed {
  kEveryMode,         // query-free: scores from the cache and the weights alone
  kNotChunked,        // reads queries: nothing to read while a chunk of the context is prefilled
  kOnceAfterPrefill,  // KVzip's pass repeats the whole context: context, question, first-question
  kNoMode,            // the true future queries: the fidelity protocol only
};

struct ExpectedRow {
  std::string_view press;
  Allowed allowed;
};

constexpr ExpectedRow kExpected[] = {
    // Query-free: scores from the cached keys and values (and the weights) alone.
    {"primekv", Allowed::kEveryMode},
    {"primekv:key=cosine,value=norm", Allowed::kEveryMode},
    {"keydiff", Allowed::kEveryMode},
    {"knorm", Allowed::kEveryMode},
    {"streamingllm", Allowed::kEveryMode},
    {"random", Allowed::kEveryMode},
    {"lagkv", Allowed::kEveryMode},
    {"curdkv", Allowed::kEveryMode},
    // Read queries: SnapKV's window (PyramidKV scores as SnapKV), TOVA's last query,
    // ExpectedAttention's statistics of the context's queries, Lookback's every context query.
    {"snapkv", Allowed::kNotChunked},
    {"lookback", Allowed::kNotChunked},
    {"pyramidkv", Allowed::kNotChunked},
    {"tova", Allowed::kNotChunked},
    {"expected_attention", Allowed::kNotChunked},
    // Scores the entries a second pass over the whole context saw.
    {"kvzip", Allowed::kOnceAfterPrefill},
    // Reads the true future queries.
    {"oracle", Allowed::kNoMode},
};

// A budget wrapper changes how many entries each head keeps, not what is scored: "adakv:X" is
// allowed what X is.
constexpr std::string_view kBudgetWrappers[] = {"adakv"};

std::optional<Allowed> ExpectedFor(std::string_view press) {
  for (const ExpectedRow& row : kExpected)
    if (row.press == press) return row.allowed;
  const size_t colon = press.find(':');
  if (colon != std::string_view::npos &&
      std::ranges::find(kBudgetWrappers, press.substr(0, colon)) != std::end(kBudgetWrappers))
    return ExpectedFor(press.substr(colon + 1));
  return std::nullopt;
}

std::string Undecided(std::string_view press) {
  return "press " + std::string(press) +
         " is not in kExpected (tests/session/pipeline_test.cc): decide from its definition "
         "whether a conversation may compress with it in every mode (query-free), in all but "
         "chunked (reads queries), once after the prefill (a pass over the whole context) or in "
         "none (the true future queries), and add its row";
}

bool Allows(Allowed allowed, CompressionMode mode) {
  switch (allowed) {
    case Allowed::kEveryMode:
      return true;
    case Allowed::kNotChunked:
      return mode != CompressionMode::kChunked;
    case Allowed::kOnceAfterPrefill:
      return mode == CompressionMode::kContext || mode == CompressionMode::kQuestion ||
             mode == CompressionMode::kFirstQuestion;
    case Allowed::kNoMode:
      return false;
  }
  return false;
}

// Whether RunPipeline runs `press` in `mode` by the table; a press missing from it fails the
// test that asks and runs nowhere.
bool PipelineRuns(std::string_view press, CompressionMode mode) {
  const std::optional<Allowed> allowed = ExpectedFor(press);
  if (!allowed) ADD_FAILURE() << Undecided(press);
  return allowed && Allows(*allowed, mode);
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
    if (!PipelineRuns(name, CompressionMode::kChunked)) continue;
    SCOPED_TRACE(name);
    Compressor comp(m, Make(name));
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

// The reason CheckSchedule gives for refusing a press that `allowed` keeps out of a mode.
std::string_view RefusalReason(Allowed allowed) {
  switch (allowed) {
    case Allowed::kEveryMode:
      return "(none: it runs in every mode)";
    case Allowed::kNotChunked:
      return "reads queries, so it cannot compress during chunked prefill";
    case Allowed::kOnceAfterPrefill:
      return "a pass that repeats it, so it compresses once after the prefill";
    case Allowed::kNoMode:
      return "reads the true future queries";
  }
  return "";
}

// That RunPipeline runs `press` in `mode` where `allowed` says so, and otherwise refuses it for
// the table's reason (not some later failure, such as a scorer missing its inputs).
void ExpectRunsAsAllowed(std::string_view press, Allowed allowed, CompressionMode mode) {
  const Model& m = SmallModel();
  ThreadPool pool(2);
  const auto ctx = RandomTokens(80, 41);
  const std::vector<std::vector<Token>> qs{RandomTokens(4, 42), RandomTokens(4, 43)};
  Compressor comp(m, Make(std::string(press)));
  PipelineOptions opt;
  opt.schedule.ratio = 0.5;
  opt.mode = mode;
  opt.schedule.chunk = 32;
  opt.schedule.interval = 2;
  opt.max_new_tokens = 3;
  auto r = RunPipeline(m, comp, opt, ctx, qs, pool);
  const std::string what =
      std::string(press) + " in " + std::string(CompressionModeName(mode)) + " mode";
  if (Allows(allowed, mode)) {
    EXPECT_TRUE(r.ok()) << what << " must run; RunPipeline refused it: " << r.message();
  } else {
    ASSERT_FALSE(r.ok()) << what << " must be refused (" << RefusalReason(allowed)
                         << "); RunPipeline ran it";
    EXPECT_NE(r.message().find(RefusalReason(allowed)), std::string::npos)
        << what << " must be refused for the table's reason (\"" << RefusalReason(allowed)
        << "\"); RunPipeline said: " << r.message();
  }
}

// RunPipeline runs a press in a mode exactly where kExpected allows it, for every registry
// press: the table is written from the presses' definitions, so a wrong rule in CheckSchedule
// (or a press that declares the wrong needs) fails here, and so does a press with no row.
TEST(Pipeline, RunsEveryPressInTheModesItsDefinitionAllows) {
  const std::vector<std::string> names = RegistryPresses();
  for (const ExpectedRow& row : kExpected)  // a row whose press is gone is stale
    EXPECT_NE(std::ranges::find(names, row.press), names.end()) << row.press << ": no such press";
  for (const std::string& name : names) {
    const std::optional<Allowed> allowed = ExpectedFor(name);
    if (!allowed) {
      ADD_FAILURE() << Undecided(name);
      continue;
    }
    for (CompressionMode mode :
         {CompressionMode::kContext, CompressionMode::kQuestion, CompressionMode::kMultiTurn,
          CompressionMode::kChunked, CompressionMode::kDecode, CompressionMode::kFirstQuestion})
      ExpectRunsAsAllowed(name, *allowed, mode);
  }
}

TEST(Pipeline, SharedPrefillGivesTheSameAnswers) {
  const Model& m = SmallModel();
  ThreadPool pool(2);
  const auto ctx = RandomTokens(500, 21);
  std::vector<std::vector<Token>> qs{RandomTokens(8, 22), RandomTokens(8, 23)};
  const std::vector<std::string> names = RegistryPresses();
  PressNeeds all;
  for (const std::string& name : names) {
    if (PipelineRuns(name, CompressionMode::kContext))
      all = UnionNeeds(all, Make(name).scorer->Needs());
  }
  auto pre = PrefillForPresses(m, all, {}, ctx, pool);
  ASSERT_TRUE(pre.ok()) << pre.message();
  // KVzip is among the presses: its second pass is timed apart from the shared prefill.
  ASSERT_TRUE(all.reconstruction);
  EXPECT_GT(pre->second_pass_ms, 0.0);
  EXPECT_GT(pre->prefill_ms, 0.0);
  for (const std::string& name : names) {
    for (CompressionMode mode :
         {CompressionMode::kContext, CompressionMode::kMultiTurn, CompressionMode::kQuestion}) {
      if (!PipelineRuns(name, mode)) continue;
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
