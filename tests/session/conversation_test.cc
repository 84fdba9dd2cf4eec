// Conversation (session/conversation.h) on a random model: its chunk, context, decode-interval
// and multi-turn rules leave the caches a hand-written loop of forward passes and compressions
// leaves, at the token counts the schedule names; its decode loop feeds what it says; it keeps
// its tokens and turns with its cache.
#include "primekv/session/conversation.h"

#include <gtest/gtest.h>

#include <limits>
#include <random>
#include <string>
#include <tuple>
#include <vector>

#include "common/random_models.h"
#include "primekv/session/pipeline.h"

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
  // The reference a conversation must match: one forward pass over `ctx` and one compression
  // to `ratio`, by hand; `logits` gets the last position's.
  KvCache ForwardAndCompress(const Compressor& comp, const std::vector<Token>& ctx, double ratio,
                             std::vector<float>& logits) {
    KvCache want = m.NewCache();
    PressCapture cap(m, comp.Needs());
    ForwardWorkspace ws;
    logits.assign(static_cast<size_t>(m.config().vocab_size), 0.0f);
    Check(m.Forward(ctx, want, {}, {logits.data(), 1, m.config().vocab_size}, pool, ws, &cap).ok(),
          "reference forward");
    Check(comp.Compress(want, ratio, &cap, pool).ok(), "reference compression");
    return want;
  }
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

    const Schedule schedule{.ratio = 0.5, .mode = ScheduleMode::kChunked, .chunk = 48};
    Conversation s(m, comp, pool, {.schedule = schedule});
    KvCache& cache = s.cache();
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
  const Schedule schedule{.ratio = 0.75, .mode = ScheduleMode::kChunked, .chunk = 64};
  Conversation s(m, comp, pool, {.schedule = schedule});
  KvCache& cache = s.cache();
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
  Conversation ctx_mode(m, comp, pool, {.schedule = {.ratio = 0.75}});
  KvCache& other = ctx_mode.cache();
  ASSERT_TRUE(ctx_mode.Prefill(ctx).ok());
  ASSERT_TRUE(ctx_mode.AfterChunk().ok());
  EXPECT_EQ(other.MaxLength(), 128);
  EXPECT_EQ(ctx_mode.stats().compressions, 0);
}

TEST_F(SessionTest, ContextModeCompressesOnceToTheRatio) {
  const auto ctx = RandomTokens(150, 3);
  Compressor comp(m, Make("snapkv"));
  std::vector<float> logits;
  const KvCache want = ForwardAndCompress(comp, ctx, 0.6, logits);

  Conversation s(m, comp, pool, {.schedule = {.ratio = 0.6}});
  KvCache& cache = s.cache();
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
    Conversation s(m, *comp, pool,
                   {.schedule = {.ratio = ratio, .mode = ScheduleMode::kChunked, .chunk = 16}});
    KvCache& cache = s.cache();
    EXPECT_FALSE(s.Compressing());
    ASSERT_TRUE(s.PrefillContext(ctx).ok());
    EXPECT_EQ(cache.MaxLength(), 90);
    EXPECT_EQ(s.stats().compressions, 0);
  }
}

TEST_F(SessionTest, DecodeIntervalRuleFiresEveryIntervalTokens) {
  Compressor comp(m, Make("knorm"));
  const Schedule schedule{.ratio = 0.5, .mode = ScheduleMode::kDecode, .interval = 3};
  Conversation s(m, comp, pool, {.schedule = schedule});
  KvCache& cache = s.cache();
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
  Conversation loop(m, comp, pool, {.schedule = schedule});
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
  Conversation s(m, comp, pool, {.schedule = {.ratio = 0.5, .mode = ScheduleMode::kMultiTurn}});
  KvCache& cache = s.cache();
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
  ConversationRecord image{.budget = 40, .turn = s.record().turn, .tokens = s.tokens()};
  image.cache = s.TakeCache();
  s.Restore(std::move(image));
  ASSERT_TRUE(s.EndTurn().ok());
  EXPECT_EQ(s.cache().MaxLength(), 40);
  // Other modes never compress at the end of a turn.
  Conversation ctx_mode(m, comp, pool, {.schedule = {.ratio = 0.5}});
  KvCache& c2 = ctx_mode.cache();
  ASSERT_TRUE(ctx_mode.PrefillContext(RandomTokens(100, 6)).ok());
  ASSERT_TRUE(ctx_mode.Prefill(RandomTokens(30, 7)).ok());
  ASSERT_TRUE(ctx_mode.EndTurn().ok());
  EXPECT_EQ(c2.MaxLength(), 80);
}

TEST_F(SessionTest, CompressContextCompressesWhatIsInTheCache) {
  Compressor comp(m, Make("knorm"));
  Conversation s(m, comp, pool, {.schedule = {.ratio = 0.75, .mode = ScheduleMode::kMultiTurn}});
  KvCache& cache = s.cache();
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
  const Schedule schedule{.ratio = 0.5, .mode = ScheduleMode::kDecode, .interval = 4};
  const auto run = [&](bool batched) {
    Conversation s(m, comp, pool, {.schedule = schedule});
    KvCache& cache = s.cache();
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
    Conversation s(m, none, pool, {.schedule = {}});
    KvCache& cache = s.cache();
    Check(s.Prefill(ctx).ok(), "prefill");
    DecodeOptions d;
    d.max_new_tokens = 6;
    d.sampler = {0.0f, 0, 1.0f, 0};
    d.feed_last = feed_last;
    d.reserve = 6;
    int handed = 0;
    d.keep_going = [&] { return ++handed < stop_after; };
    int fed = 0;
    ForwardWorkspace ws;
    auto r = s.Decode(d, [&](Token t) {
      ++fed;
      const DecodeSlot slot{t, &cache, nullptr};
      return m.ForwardDecodeBatch(std::span<const DecodeSlot>(&slot, 1),
                                  MatView<float>(s.logits().data(), 1, m.config().vocab_size), pool,
                                  ws);
    });
    Check(r.ok(), "decode");
    // Whatever runs the forward pass, the conversation records each token fed.
    Check(s.tokens().size() == static_cast<size_t>(cache.NextPosition()), "tokens recorded");
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
  Conversation s(m, none, pool, {.schedule = {}});
  KvCache& cache = s.cache();
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
  ForwardWorkspace ws;
  Conversation s(m, none, pool, {.schedule = {.ubatch = 16}}, {}, {.workspace = &ws});
  KvCache& cache = s.cache();
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
  const Schedule chunked{.ratio = 0.5, .mode = ScheduleMode::kChunked};
  const Schedule context{.ratio = 0.5};
  const Schedule multiturn{.ratio = 0.5, .mode = ScheduleMode::kMultiTurn};
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
  EXPECT_TRUE(CheckSchedule(Make("kvzip"), {.mode = ScheduleMode::kMultiTurn}).ok());
}

TEST_F(SessionTest, ModeNamesRoundTrip) {
  for (auto mode : {ScheduleMode::kContext, ScheduleMode::kMultiTurn, ScheduleMode::kChunked,
                    ScheduleMode::kDecode}) {
    EXPECT_EQ(ParseScheduleMode(ScheduleModeName(mode)), mode);
  }
  EXPECT_EQ(ParseScheduleMode("multi-turn"), ScheduleMode::kMultiTurn);
  // The eval protocols are not schedules a conversation runs.
  EXPECT_EQ(ParseScheduleMode("question"), std::nullopt);
  EXPECT_EQ(ParseScheduleMode("first-question"), std::nullopt);
  for (auto mode :
       {CompressionMode::kContext, CompressionMode::kQuestion, CompressionMode::kMultiTurn,
        CompressionMode::kChunked, CompressionMode::kDecode, CompressionMode::kFirstQuestion}) {
    EXPECT_EQ(ParseCompressionMode(CompressionModeName(mode)), mode);
  }
  EXPECT_EQ(ScheduleModeOf(CompressionMode::kQuestion), ScheduleMode::kContext);
  EXPECT_EQ(ScheduleModeOf(CompressionMode::kFirstQuestion), ScheduleMode::kContext);
  EXPECT_EQ(ScheduleModeOf(CompressionMode::kChunked), ScheduleMode::kChunked);
  EXPECT_EQ(ParseCompressionMode("nosuchmode"), std::nullopt);
}

TEST_F(SessionTest, KeepsItsTokensAndTurnsWithItsCache) {
  Compressor comp(m, Make("knorm"));
  Conversation s(m, comp, pool, {.schedule = {.ratio = 0.5, .mode = ScheduleMode::kMultiTurn}});
  const auto ctx = RandomTokens(60, 13), q = RandomTokens(9, 14);
  ASSERT_TRUE(s.PrefillContext(ctx).ok());
  ASSERT_TRUE(s.Prefill(q).ok());
  std::vector<Token> want = ctx;
  want.insert(want.end(), q.begin(), q.end());
  EXPECT_EQ(s.tokens(), want);
  EXPECT_EQ(s.cache().NextPosition(), 69);
  DecodeOptions d;
  d.max_new_tokens = 5;
  d.sampler = {0.0f, 0, 1.0f, 0};
  d.feed_last = true;
  auto r = s.Decode(d);
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(s.tokens().size(), static_cast<size_t>(s.cache().NextPosition()));
  EXPECT_EQ(s.record().turn, 0u);
  ASSERT_TRUE(s.EndTurn().ok());
  EXPECT_EQ(s.record().turn, 1u);
  // Truncation drops tokens and their entries together.
  s.TruncateTo(60);
  EXPECT_EQ(s.tokens(), ctx);
  EXPECT_EQ(s.cache().NextPosition(), 60);
  EXPECT_LE(s.cache().MaxLength(), 30);
  s.Reset();
  EXPECT_TRUE(s.tokens().empty());
  EXPECT_EQ(s.cache().TotalEntries(), 0);
}

// CompressNow is Compressor::Compress on the conversation's cache and capture, counted in its
// stats, and sets the multi-turn budget to the ratio's share of its tokens.
TEST_F(SessionTest, CompressNowIsOneCompressionToTheRatio) {
  const auto ctx = RandomTokens(120, 15);
  Compressor comp(m, Make("primekv"));
  std::vector<float> logits;
  const KvCache want = ForwardAndCompress(comp, ctx, 0.7, logits);
  Conversation s(m, comp, pool, {.schedule = {.ratio = 0.25}});
  ASSERT_TRUE(s.Prefill(ctx).ok());
  ASSERT_TRUE(s.CompressNow(0.7).ok());
  ExpectSameCache(s.cache(), want);
  EXPECT_EQ(s.stats().compressions, 1);
  EXPECT_EQ(s.budget(), KeepCount(120, 0.7));
  EXPECT_FALSE(s.CompressNow(1.0).ok());
  EXPECT_FALSE(s.CompressNow(-0.1).ok());
  ASSERT_TRUE(s.CompressNow(0.0).ok());  // nothing to do
  EXPECT_EQ(s.stats().compressions, 1);
}

}  // namespace
}  // namespace primekv
