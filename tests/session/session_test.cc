// Session (session/session.h) on a random model: its chunk, context, decode-interval and
// multi-turn rules leave the caches a hand-written loop of forward passes and compressions
// leaves, at the token counts the schedule names, and its decode loop feeds what it says.
#include "primekv/session/session.h"

#include <gtest/gtest.h>

#include <limits>
#include <random>
#include <string>
#include <tuple>
#include <vector>

#include "common/random_models.h"

namespace primekv {
namespace {

const Model& TestModel() {
  static const Model& model =
      *new Model(WriteLoadAndRemove(SmallGqaSpec(7), "primekv_session_test.gguf"));
  return model;
}

std::vector<Token> RandomTokens(int n, uint32_t seed) { return RandomTokenIds(n, seed, 3, 290); }

class SessionTest : public ::testing::Test {
 protected:
  const Model& m = TestModel();
  ThreadPool pool{2};
};

Press Make(const std::string& spec) {
  auto p = MakePress(*ParsePressSpec(spec));
  Check(p.ok(), "press");
  return std::move(p).value();
}

// Every head's keys, values and positions are the same, bit for bit.
void ExpectSameCache(const KvCache& a, const KvCache& b) {
  ASSERT_EQ(a.NextPosition(), b.NextPosition());
  for (int l = 0; l < a.n_layers(); ++l) {
    for (int h = 0; h < a.n_kv_heads(); ++h) {
      std::vector<float> ka, va, kb, vb;
      std::vector<int32_t> pa, pb;
      a.ReadHead(l, h, &ka, &va, &pa);
      b.ReadHead(l, h, &kb, &vb, &pb);
      EXPECT_EQ(pa, pb) << "layer " << l << " head " << h;
      EXPECT_EQ(ka, kb) << "layer " << l << " head " << h;
      EXPECT_EQ(va, vb) << "layer " << l << " head " << h;
    }
  }
}

// The chunked prefill as forward passes and compressions written out: after each chunk every
// head comes down to KeepCount(tokens so far).
void ChunkLoop(const Model& m, const Compressor& comp, std::span<const Token> ctx, int chunk,
               double ratio, KvCache& cache, PressCapture& cap, ThreadPool& pool) {
  ForwardWorkspace ws;
  std::vector<float> logits(static_cast<size_t>(m.config().vocab_size));
  MatView<float> out(logits.data(), 1, m.config().vocab_size);
  for (size_t b = 0; b < ctx.size(); b += static_cast<size_t>(chunk)) {
    const size_t n = std::min(static_cast<size_t>(chunk), ctx.size() - b);
    ASSERT_TRUE(m.Forward(ctx.subspan(b, n), cache, {}, out, pool, ws, &cap).ok());
    ASSERT_TRUE(comp.CompressTo(cache, KeepCount(static_cast<int>(b + n), ratio), &cap, pool).ok());
  }
}

TEST_F(SessionTest, ChunkedPrefillLeavesTheCacheOfTheChunkLoop) {
  const auto ctx = RandomTokens(200, 1);
  for (const char* spec : {"primekv", "streamingllm", "knorm"}) {
    SCOPED_TRACE(spec);
    Compressor comp(m, Make(spec));
    KvCache want = m.NewCache();
    PressCapture want_cap(m, comp.Needs());
    ChunkLoop(m, comp, ctx, 48, 0.5, want, want_cap, pool);

    KvCache cache = m.NewCache();
    PressCapture cap(m, comp.Needs());
    const Schedule schedule{.ratio = 0.5, .mode = CompressionMode::kChunked, .chunk = 48};
    Session s(m, comp, schedule, pool, {.cache = cache, .capture = &cap});
    ASSERT_TRUE(s.PrefillContext(ctx).ok());
    ExpectSameCache(cache, want);
    EXPECT_EQ(s.stats().compressions, 5);  // chunks of 48, 48, 48, 48, 8
    EXPECT_EQ(cache.MaxLength(), KeepCount(200, 0.5));
    EXPECT_EQ(s.budget(), KeepCount(200, 0.5));
    int64_t kept = 0;
    for (int64_t k : s.stats().kept_per_layer) kept += k;
    EXPECT_EQ(kept, cache.TotalEntries());  // the last chunk's figures
  }
}

TEST_F(SessionTest, ChunkRuleCountsPositionsSoFar) {
  Compressor comp(m, Make("knorm"));
  KvCache cache = m.NewCache();
  const Schedule schedule{.ratio = 0.75, .mode = CompressionMode::kChunked, .chunk = 64};
  Session s(m, comp, schedule, pool, {.cache = cache});
  const auto ctx = RandomTokens(128, 2);
  ASSERT_TRUE(s.Prefill(std::span(ctx).first(64)).ok());
  ASSERT_TRUE(s.AfterChunk().ok());
  EXPECT_EQ(cache.MaxLength(), KeepCount(64, 0.75));
  ASSERT_TRUE(s.Prefill(std::span(ctx).subspan(64)).ok());
  EXPECT_EQ(cache.MaxLength(), KeepCount(64, 0.75) + 64);
  ASSERT_TRUE(s.AfterChunk().ok());
  EXPECT_EQ(cache.MaxLength(), KeepCount(128, 0.75));
  EXPECT_EQ(s.stats().compressions, 2);
  // Outside chunked mode the chunk rule does nothing.
  KvCache other = m.NewCache();
  Session ctx_mode(m, comp, {.ratio = 0.75}, pool, {.cache = other});
  ASSERT_TRUE(ctx_mode.Prefill(ctx).ok());
  ASSERT_TRUE(ctx_mode.AfterChunk().ok());
  EXPECT_EQ(other.MaxLength(), 128);
  EXPECT_EQ(ctx_mode.stats().compressions, 0);
}

TEST_F(SessionTest, ContextModeCompressesOnceToTheRatio) {
  const auto ctx = RandomTokens(150, 3);
  Compressor comp(m, Make("snapkv"));
  KvCache want = m.NewCache();
  PressCapture want_cap(m, comp.Needs());
  ForwardWorkspace ws;
  std::vector<float> logits(static_cast<size_t>(m.config().vocab_size));
  ASSERT_TRUE(
      m.Forward(ctx, want, {}, {logits.data(), 1, m.config().vocab_size}, pool, ws, &want_cap)
          .ok());
  ASSERT_TRUE(comp.Compress(want, 0.6, &want_cap, pool).ok());

  KvCache cache = m.NewCache();
  PressCapture cap(m, comp.Needs());
  Session s(m, comp, {.ratio = 0.6}, pool, {.cache = cache, .capture = &cap});
  ASSERT_TRUE(s.PrefillContext(ctx).ok());
  ExpectSameCache(cache, want);
  EXPECT_EQ(s.stats().compressions, 1);
  EXPECT_EQ(s.budget(), KeepCount(150, 0.6));
  EXPECT_EQ(std::vector<float>(s.logits().begin(), s.logits().end()), logits);
  EXPECT_EQ(s.stats().kv_bytes_compressed, cache.BytesInUse());
  EXPECT_GE(s.stats().kv_bytes_peak, static_cast<size_t>(150) * m.config().n_layers *
                                         m.config().n_kv_heads * cache.BytesPerEntry());
}

TEST_F(SessionTest, NothingIsCompressedWithoutARatioOrAPress) {
  const auto ctx = RandomTokens(90, 4);
  Compressor none(m, Make("none")), knorm(m, Make("knorm"));
  for (const auto& [comp, ratio] :
       {std::pair<const Compressor*, double>{&none, 0.5}, {&knorm, 0.0}}) {
    KvCache cache = m.NewCache();
    Session s(m, *comp, {.ratio = ratio, .mode = CompressionMode::kChunked, .chunk = 16}, pool,
              {.cache = cache});
    EXPECT_FALSE(s.Compressing());
    ASSERT_TRUE(s.PrefillContext(ctx).ok());
    EXPECT_EQ(cache.MaxLength(), 90);
    EXPECT_EQ(s.stats().compressions, 0);
  }
}

TEST_F(SessionTest, DecodeIntervalRuleFiresEveryIntervalTokens) {
  Compressor comp(m, Make("knorm"));
  KvCache cache = m.NewCache();
  const Schedule schedule{.ratio = 0.5, .mode = CompressionMode::kDecode, .interval = 3};
  Session s(m, comp, schedule, pool, {.cache = cache});
  ASSERT_TRUE(s.PrefillContext(RandomTokens(60, 5)).ok());
  ASSERT_EQ(s.stats().compressions, 1);
  std::vector<int> fired;
  for (int generated = 1; generated <= 10; ++generated) {
    ASSERT_TRUE(s.FeedToken(7).ok());
    const int before = s.stats().compressions;
    ASSERT_TRUE(s.AfterToken(generated).ok());
    if (s.stats().compressions > before) {
      fired.push_back(generated);
      EXPECT_EQ(cache.MaxLength(), KeepCount(cache.NextPosition(), 0.5));
    }
  }
  EXPECT_EQ(fired, (std::vector<int>{3, 6, 9}));
  // The decode loop applies the same rule after each token it feeds and will follow up on.
  KvCache c2 = m.NewCache();
  Session loop(m, comp, schedule, pool, {.cache = c2});
  ASSERT_TRUE(loop.PrefillContext(RandomTokens(60, 5)).ok());
  std::vector<int> seen;  // compressions when the k-th token is handed on
  DecodeOptions d;
  d.max_new_tokens = 11;
  d.sampler = {0.0f, 0, 1.0f, 0};
  d.on_token = [&](Token) {
    seen.push_back(loop.stats().compressions);
    return true;
  };
  auto r = loop.Decode(d);
  ASSERT_TRUE(r.ok()) << r.message();
  for (size_t k = 0; k < seen.size(); ++k)
    EXPECT_EQ(seen[k], 1 + static_cast<int>(k) / 3) << "token " << k + 1;
}

TEST_F(SessionTest, EndTurnBringsAMultiTurnCacheBackToItsBudget) {
  Compressor comp(m, Make("primekv"));
  KvCache cache = m.NewCache();
  PressCapture cap(m, comp.Needs());
  Session s(m, comp, {.ratio = 0.5, .mode = CompressionMode::kMultiTurn}, pool,
            {.cache = cache, .capture = &cap});
  ASSERT_TRUE(s.PrefillContext(RandomTokens(100, 6)).ok());
  EXPECT_EQ(s.budget(), 50);
  EXPECT_EQ(cache.MaxLength(), 50);
  ASSERT_TRUE(s.EndTurn().ok());  // at the budget: nothing to do
  EXPECT_EQ(s.stats().compressions, 1);
  ASSERT_TRUE(s.Prefill(RandomTokens(30, 7)).ok());
  EXPECT_EQ(cache.MaxLength(), 80);
  ASSERT_TRUE(s.EndTurn().ok());
  EXPECT_EQ(s.stats().compressions, 2);
  EXPECT_EQ(cache.MaxLength(), 50);
  // A budget carried over from elsewhere (a stored conversation) is the one kept.
  s.set_budget(40);
  ASSERT_TRUE(s.EndTurn().ok());
  EXPECT_EQ(cache.MaxLength(), 40);
  // Other modes never compress at the end of a turn.
  KvCache c2 = m.NewCache();
  Session ctx_mode(m, comp, {.ratio = 0.5}, pool, {.cache = c2});
  ASSERT_TRUE(ctx_mode.PrefillContext(RandomTokens(100, 6)).ok());
  ASSERT_TRUE(ctx_mode.Prefill(RandomTokens(30, 7)).ok());
  ASSERT_TRUE(ctx_mode.EndTurn().ok());
  EXPECT_EQ(c2.MaxLength(), 80);
}

TEST_F(SessionTest, CompressContextCompressesWhatIsInTheCache) {
  Compressor comp(m, Make("knorm"));
  KvCache cache = m.NewCache();
  Session s(m, comp, {.ratio = 0.75, .mode = CompressionMode::kMultiTurn}, pool, {.cache = cache});
  ASSERT_TRUE(s.Prefill(RandomTokens(120, 12)).ok());
  ASSERT_TRUE(s.CompressContext(120).ok());
  EXPECT_EQ(cache.MaxLength(), KeepCount(120, 0.75));
  EXPECT_EQ(s.budget(), KeepCount(120, 0.75));
  EXPECT_EQ(s.stats().compressions, 1);
  EXPECT_EQ(s.stats().kv_bytes_compressed, cache.BytesInUse());
}

// The server feeds each token through a batched forward pass (Engine::DecodeStep); the loop
// and its interval rule answer the same as with the session's own one-token forward.
TEST_F(SessionTest, DecodeThroughABatchedFeedAnswersAsItsOwn) {
  Compressor comp(m, Make("knorm"));
  const Schedule schedule{.ratio = 0.5, .mode = CompressionMode::kDecode, .interval = 4};
  const auto run = [&](bool batched) {
    KvCache cache = m.NewCache();
    Session s(m, comp, schedule, pool, {.cache = cache});
    Check(s.PrefillContext(RandomTokens(50, 11)).ok(), "prefill");
    DecodeOptions d;
    d.max_new_tokens = 12;
    d.sampler = {0.0f, 0, 1.0f, 0};
    d.feed_last = true;
    ForwardWorkspace ws;
    const auto feed = [&](Token t) {
      const DecodeSlot slot{t, &cache, nullptr};
      return m.ForwardDecodeBatch(std::span<const DecodeSlot>(&slot, 1),
                                  MatView<float>(s.logits().data(), 1, m.config().vocab_size), pool,
                                  ws);
    };
    auto r = batched ? s.Decode(d, feed) : s.Decode(d);
    Check(r.ok(), "decode");
    return std::tuple(r->tokens, s.stats().compressions, cache.TotalEntries());
  };
  const auto own = run(false);
  EXPECT_GE(std::get<1>(own), 2);  // the context's compression and at least one interval's
  EXPECT_EQ(run(true), own);
}

TEST_F(SessionTest, DecodeFeedsWhatTheOptionsSay) {
  Compressor none(m, Make("none"));
  const auto ctx = RandomTokens(40, 8);
  const auto run = [&](bool feed_last, int stop_after) {
    KvCache cache = m.NewCache();
    Session s(m, none, {}, pool, {.cache = cache});
    Check(s.Prefill(ctx).ok(), "prefill");
    DecodeOptions d;
    d.max_new_tokens = 6;
    d.sampler = {0.0f, 0, 1.0f, 0};
    d.feed_last = feed_last;
    d.reserve = 6;
    int handed = 0;
    d.keep_going = [&] { return ++handed < stop_after; };
    int fed = 0;
    auto r = s.Decode(d, [&](Token t) {
      ++fed;
      return s.FeedToken(t);
    });
    Check(r.ok(), "decode");
    return std::tuple(fed, cache.NextPosition(), r->tokens.size() + r->stopped_at_end);
  };
  // Every sampled token but the last is fed back, or every one with feed_last.
  const auto [fed, next, sampled] = run(false, 100);
  EXPECT_EQ(static_cast<size_t>(fed) + 1, sampled);
  EXPECT_EQ(next, 40 + fed);
  const auto [fed_all, next_all, sampled_all] = run(true, 100);
  EXPECT_EQ(static_cast<size_t>(fed_all), sampled_all);
  EXPECT_EQ(next_all, 40 + fed_all);
  // keep_going false after the second token stops there (a client gone).
  const auto [fed_two, next_two, sampled_two] = run(true, 2);
  EXPECT_LE(sampled_two, 2u);
  EXPECT_EQ(static_cast<size_t>(fed_two), sampled_two);
}

TEST_F(SessionTest, DecodeSamplesFromTheLogitsItWasGiven) {
  Compressor none(m, Make("none"));
  KvCache cache = m.NewCache();
  Session s(m, none, {}, pool, {.cache = cache});
  ASSERT_TRUE(s.Prefill(RandomTokens(10, 9)).ok());
  std::vector<float> logits(static_cast<size_t>(m.config().vocab_size), 0.0f);
  logits[123] = 10.0f;
  s.SetLogits(logits);
  DecodeOptions d;
  d.max_new_tokens = 1;
  d.sampler = {0.0f, 0, 1.0f, 0};
  auto r = s.Decode(d);
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r->tokens, std::vector<Token>{123});
  EXPECT_EQ(cache.NextPosition(), 10);  // the last token is not fed without feed_last
  // Sampling errors name the turn and the token.
  d.sampler.temperature = 1.0f;
  std::fill(logits.begin(), logits.end(), std::numeric_limits<float>::quiet_NaN());
  s.SetLogits(logits);
  d.label = "turn 2, ";
  auto bad = s.Decode(d);
  ASSERT_FALSE(bad.ok());
  EXPECT_EQ(bad.message().rfind("turn 2, token 1: ", 0), 0u) << bad.message();
}

TEST_F(SessionTest, MicroBatchesAndWorkspaceKeepPositions) {
  Compressor none(m, Make("none"));
  KvCache cache = m.NewCache();
  ForwardWorkspace ws;
  Session s(m, none, {.ubatch = 16}, pool, {.cache = cache, .workspace = &ws});
  ASSERT_TRUE(s.Prefill(RandomTokens(50, 10)).ok());
  EXPECT_EQ(cache.NextPosition(), 50);
  EXPECT_EQ(cache.MaxLength(), 50);
  EXPECT_FALSE(ws.x.empty());  // the caller's buffers did the work
  s.ReleaseWorkspace();
  EXPECT_TRUE(ws.x.empty());
  s.NotePeak();
  EXPECT_EQ(s.stats().kv_bytes_peak, cache.BytesInUse());
}

TEST_F(SessionTest, ScheduleChecksFollowWhatThePressDeclares) {
  const Schedule chunked{.ratio = 0.5, .mode = CompressionMode::kChunked};
  const Schedule context{.ratio = 0.5};
  const Schedule multiturn{.ratio = 0.5, .mode = CompressionMode::kMultiTurn};
  EXPECT_TRUE(CheckSchedule(Make("primekv"), chunked).ok());
  EXPECT_TRUE(CheckSchedule(Make("none"), chunked).ok());
  const Status snap = CheckSchedule(Make("snapkv"), chunked);
  EXPECT_NE(snap.message().find("cannot compress during chunked prefill"), std::string::npos);
  EXPECT_TRUE(CheckSchedule(Make("snapkv"), context).ok());
  // The true future queries exist only under the fidelity protocol.
  EXPECT_FALSE(CheckPipelinePress(Make("oracle")).ok());
  EXPECT_FALSE(CheckSchedule(Make("oracle"), context).ok());
  // KVzip's pass over the whole context runs once, after it.
  EXPECT_TRUE(CheckSchedule(Make("kvzip"), context).ok());
  const Status kvzip = CheckSchedule(Make("kvzip"), multiturn);
  EXPECT_NE(kvzip.message().find("not multiturn"), std::string::npos) << kvzip.message();
  EXPECT_TRUE(CheckSchedule(Make("kvzip"), {.mode = CompressionMode::kMultiTurn}).ok());
}

TEST_F(SessionTest, ModeNamesRoundTrip) {
  for (auto mode :
       {CompressionMode::kContext, CompressionMode::kQuestion, CompressionMode::kMultiTurn,
        CompressionMode::kChunked, CompressionMode::kDecode, CompressionMode::kFirstQuestion}) {
    EXPECT_EQ(ParseCompressionMode(CompressionModeName(mode)), mode);
  }
  EXPECT_EQ(ParseCompressionMode("multi-turn"), CompressionMode::kMultiTurn);
  EXPECT_EQ(ParseCompressionMode("nosuchmode"), std::nullopt);
}

}  // namespace
}  // namespace primekv
