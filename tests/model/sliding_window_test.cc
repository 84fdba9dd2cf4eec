// Gemma 2's sliding-window layers: what the cache frees as the window moves, that freeing it
// changes no logit, and which layers the presses compress.
#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>
#include <string>
#include <vector>

#include "common/random_models.h"
#include "primekv/press/compressor.h"
#include "primekv/session/conversation.h"
#include "primekv/session/pipeline.h"

namespace primekv {
namespace {

constexpr int kWindow = 16;

// Four layers (0 and 2 local, 1 and 3 global), a window of 16 tokens.
const Model& Gemma2() {
  static const Model* model = [] {
    RandomModelSpec s = SmallLlamaSpec(31);
    s.arch = Arch::kGemma2;
    s.n_layers = 4;
    s.sliding_window = kWindow;
    s.max_context = 4096;
    return new Model(
        WriteAndLoad(s, std::filesystem::temp_directory_path() / "primekv_gemma2_swa.gguf"));
  }();
  return *model;
}

// Every position's logits; `drop`: the windowed layers drop what no later query sees.
std::vector<float> Logits(const Model& m, KvCache& cache, std::span<const Token> tokens,
                          ThreadPool& pool, bool drop = false) {
  ForwardWorkspace ws;
  const int vocab = m.config().vocab_size;
  std::vector<float> logits(tokens.size() * static_cast<size_t>(vocab));
  const Status s = m.Forward(tokens, cache, {.all_logits = true, .drop_expired = drop},
                             MatView<float>(logits.data(), std::ssize(tokens), vocab), pool, ws);
  EXPECT_TRUE(s.ok()) << s.message();
  return logits;
}

TEST(SlidingWindow, LocalLayersAreEvenOnes) {
  const ModelConfig& c = Gemma2().config();
  EXPECT_EQ(c.sliding_window, kWindow);
  for (int l = 0; l < c.n_layers; ++l) EXPECT_EQ(c.LocalLayer(l), l % 2 == 0) << l;
  EXPECT_EQ(Gemma2().Attention(0).window, kWindow);
  EXPECT_EQ(Gemma2().Attention(1).window, 0);
}

// After DropExpired a local layer holds exactly what a later query can see (positions past
// next - window); the global layers keep everything. Continuing from the trimmed cache gives
// the logits of a cache that kept every entry.
TEST(SlidingWindow, DropExpiredFreesRowsAndChangesNoLogit) {
  const Model& m = Gemma2();
  ThreadPool pool(2);
  const std::vector<Token> tokens = RandomTokenIds(140, 5, 3, 500);
  const std::span<const Token> first(tokens.data(), 100), rest(tokens.data() + 100, 40);
  KvCache full = m.NewCache({KvDType::kF32});
  KvCache ring = m.NewCache({KvDType::kF32});
  Logits(m, full, first, pool);
  Logits(m, ring, first, pool);
  const size_t before = ring.BytesInUse();
  m.Retention().DropExpired(ring);
  EXPECT_LT(ring.BytesInUse(), before);
  for (int l = 0; l < m.config().n_layers; ++l) {
    for (int h = 0; h < m.config().n_kv_heads; ++h) {
      const int len = ring.Length(l, h);
      if (!m.config().LocalLayer(l)) {
        EXPECT_EQ(len, 100) << l;
        continue;
      }
      ASSERT_EQ(len, kWindow - 1) << l;  // positions 85..99
      EXPECT_EQ(ring.PositionAt(l, h, 0), 100 - kWindow + 1);
      EXPECT_EQ(ring.PositionAt(l, h, len - 1), 99);
    }
  }
  EXPECT_EQ(ring.ExpiredBelow(), 100 - kWindow + 1);
  // Token by token, trimming after every step.
  const int vocab = m.config().vocab_size;
  const std::vector<float> want = Logits(m, full, rest, pool);
  for (size_t i = 0; i < rest.size(); ++i) {
    const std::vector<float> got = Logits(m, ring, rest.subspan(i, 1), pool);
    m.Retention().DropExpired(ring);
    for (int v = 0; v < vocab; ++v) {
      ASSERT_NEAR(got[static_cast<size_t>(v)], want[i * vocab + static_cast<size_t>(v)], 1e-4)
          << "token " << i << " logit " << v;
    }
    for (int l = 0; l < m.config().n_layers; l += 2) EXPECT_EQ(ring.Length(l, 0), kWindow - 1);
  }
}

// Entries of one (layer, head) summed over the cache's layers, with `local` for each
// sliding-window layer and `global` for the others.
size_t BytesOf(const Model& m, const KvCache& c, int local, int global) {
  size_t entries = 0;
  for (int l = 0; l < m.config().n_layers; ++l)
    entries += static_cast<size_t>(m.config().LocalLayer(l) ? local : global);
  return entries * static_cast<size_t>(m.config().n_kv_heads) * c.BytesPerEntry();
}

// A forward pass that drops expired entries: a local layer never holds more than the window
// in a one-token step, nor more than the window and one page of queries in a batch, and the
// logits are those of a cache that keeps everything.
TEST(SlidingWindow, ForwardDropsAsItGoesAndChangesNoLogit) {
  const Model& m = Gemma2();
  ThreadPool pool(2);
  const std::vector<Token> tokens = RandomTokenIds(150, 12, 3, 500);
  const std::span<const Token> first(tokens.data(), 110), rest(tokens.data() + 110, 40);
  KvCache full = m.NewCache({KvDType::kF32});
  KvCache ring = m.NewCache({KvDType::kF32});
  const int page = ring.page_tokens();
  const std::vector<float> want = Logits(m, full, tokens, pool);
  std::vector<float> got = Logits(m, ring, first, pool, true);
  // While the batch ran: at most window - 1 + one page in a local layer.
  EXPECT_LE(ring.PeakBytesInUse(), BytesOf(m, ring, kWindow - 1 + page, 110));
  for (int l = 0; l < m.config().n_layers; ++l) {
    const bool local = m.config().LocalLayer(l);
    for (int h = 0; h < m.config().n_kv_heads; ++h) {
      ASSERT_EQ(ring.Length(l, h), local ? kWindow - 1 : 110) << l;
      if (local) {
        EXPECT_EQ(ring.PositionAt(l, h, 0), 110 - kWindow + 1);
      }
    }
  }
  for (size_t i = 0; i < rest.size(); ++i) {
    ring.ResetPeak();
    const std::vector<float> step = Logits(m, ring, rest.subspan(i, 1), pool, true);
    got.insert(got.end(), step.begin(), step.end());
    const int seen = 110 + static_cast<int>(i) + 1;
    EXPECT_LE(ring.PeakBytesInUse(), BytesOf(m, ring, kWindow, seen));
    EXPECT_EQ(ring.Length(0, 0), kWindow - 1);
  }
  ASSERT_EQ(got.size(), want.size());
  for (size_t i = 0; i < want.size(); ++i) ASSERT_NEAR(got[i], want[i], 1e-4) << i;
}

// Reserving for a turn counts what a local layer holds at once (window - 1 + a page), not the
// turn's length: the pool a long prefill then really allocates stays within the prediction,
// which is well under the whole turn's, and a decode loop after Reserve allocates nothing.
TEST(SlidingWindow, ReserveCountsTheWindowNotTheTurn) {
  const Model& m = Gemma2();
  ThreadPool pool(2);
  const std::vector<Token> tokens = RandomTokenIds(740, 17, 3, 500);
  KvCache cache = m.NewCache({KvDType::kF32, 8});
  const std::vector<int> rows = m.Retention().TurnRows(cache.page_tokens());
  EXPECT_EQ(rows, (std::vector<int>{kWindow - 1 + 8, 0, kWindow - 1 + 8, 0}));
  Logits(m, cache, std::span<const Token>(tokens.data(), 40), pool, true);

  const size_t before = cache.BytesAllocated();
  const size_t windowed = cache.BytesAllocatedAfterReserve(600, rows);
  const size_t whole = cache.BytesAllocatedAfterReserve(600);
  // Global heads: 75 pages each either way; local heads: at most 23 rows, so 5 pages, not 75.
  EXPECT_LT(windowed - before, (whole - before) * 6 / 10);
  Logits(m, cache, std::span<const Token>(tokens.data() + 40, 600), pool, true);
  EXPECT_LE(cache.BytesAllocated(), windowed);
  EXPECT_EQ(cache.Length(0, 0), kWindow - 1);
  EXPECT_EQ(cache.Length(1, 0), 640);

  cache.Reserve(100, rows);
  const size_t reserved = cache.BytesAllocated();
  for (size_t i = 640; i < 740; ++i)
    Logits(m, cache, std::span<const Token>(&tokens[i], 1), pool, true);
  EXPECT_EQ(cache.BytesAllocated(), reserved) << "the decode loop allocated past its Reserve";
  EXPECT_EQ(cache.Length(1, 0), 740);
}

// The server reserves a turn once (prefill and answer), and the decode loop then reserves its
// part again: the two together must stay within the first prediction. Phi-3 windows every
// layer; 16 heads of at most 31 rows (window 16 + a page of 16) are 4 pages each, one chunk of
// 64 pages, so a second reservation that forgot the pages the heads already hold would
// allocate a second chunk.
TEST(SlidingWindow, ATurnsPrefillAndDecodeStayWithinItsOneReservation) {
  RandomModelSpec spec = SmallLlamaSpec(32);
  spec.arch = Arch::kPhi3;
  spec.n_layers = 4;
  spec.n_heads = 4;
  spec.n_kv_heads = 4;
  spec.sliding_window = kWindow;
  spec.max_context = 4096;
  const Model m =
      WriteAndLoad(spec, std::filesystem::temp_directory_path() / "primekv_phi3_swa.gguf");
  ASSERT_TRUE(m.config().swa_every_layer);
  ThreadPool pool(2);
  const std::vector<Token> tokens = RandomTokenIds(740, 19, 3, 500);
  KvCache cache = m.NewCache({KvDType::kF32, 16});
  const std::vector<int> rows = m.Retention().TurnRows(cache.page_tokens());
  const size_t turn = cache.BytesAllocatedAfterReserve(640 + 100 + 1, rows);
  EXPECT_EQ(turn * 12, cache.BytesAllocatedAfterReserve(640 + 100 + 1)) << "47 pages a head";
  Logits(m, cache, std::span<const Token>(tokens.data(), 640), pool, true);
  cache.Reserve(100 + 1, rows);
  for (size_t i = 640; i < 740; ++i)
    Logits(m, cache, std::span<const Token>(&tokens[i], 1), pool, true);
  EXPECT_EQ(cache.Length(3, 3), kWindow - 1);
  EXPECT_LE(cache.BytesAllocated(), turn);
}

// A conversation on a sliding-window model: the local layers hold the window from its first
// forward pass on. Independent questions return to the context's end through the rewind
// point and answer as a fresh conversation would; rewinding past what the layers freed
// starts over instead of answering from a cache with a hole.
TEST(SlidingWindow, ConversationHoldsTheWindowAndRewindsToItsPoint) {
  const Model& m = Gemma2();
  ThreadPool pool(2);
  auto press = MakePress(*ParsePressSpec("none"));
  ASSERT_TRUE(press.ok());
  Compressor comp(m, std::move(press).value());
  Conversation conv(m, comp, pool, ConversationRecord{});
  const std::vector<Token> ctx = RandomTokenIds(200, 6, 3, 500);
  const std::vector<Token> q1 = RandomTokenIds(30, 7, 3, 500), q2 = RandomTokenIds(30, 8, 3, 500);
  ASSERT_TRUE(conv.PrefillContext(ctx).ok());
  EXPECT_EQ(conv.cache().Length(0, 0), kWindow - 1);
  EXPECT_EQ(conv.cache().Length(1, 0), 200);
  // Without a rewind point the window has moved past what position 200 needs.
  ASSERT_TRUE(conv.Prefill(q1).ok());
  EXPECT_EQ(conv.cache().Length(0, 0), kWindow - 1);
  // Keepable tells beforehand (what the server reserves for) and cuts nothing.
  EXPECT_EQ(conv.Keepable(200), 0u);
  EXPECT_EQ(conv.Keepable(230), 230u);
  EXPECT_EQ(conv.tokens().size(), 230u);
  EXPECT_EQ(conv.TruncateTo(200), 0u);
  EXPECT_TRUE(conv.tokens().empty());

  ASSERT_TRUE(conv.PrefillContext(ctx).ok());
  conv.SetRewindPoint();
  ASSERT_TRUE(conv.Prefill(q1).ok());
  ASSERT_TRUE(conv.EndTurn().ok());
  EXPECT_EQ(conv.Keepable(200), 200u);  // the rewind point
  EXPECT_EQ(conv.Keepable(199), 0u);
  EXPECT_EQ(conv.TruncateTo(200), 200u);
  EXPECT_EQ(conv.cache().Length(0, 0), kWindow - 1);
  EXPECT_EQ(conv.cache().PositionAt(0, 0, 0), 200 - kWindow + 1);
  EXPECT_EQ(conv.cache().Length(1, 0), 200);
  ASSERT_TRUE(conv.Prefill(q2).ok());
  const std::vector<float> got(conv.logits().begin(), conv.logits().end());

  Conversation fresh(m, comp, pool, ConversationRecord{});
  ASSERT_TRUE(fresh.PrefillContext(ctx).ok());
  ASSERT_TRUE(fresh.Prefill(q2).ok());
  for (size_t v = 0; v < got.size(); ++v) ASSERT_NEAR(got[v], fresh.logits()[v], 1e-4) << v;
  // A point other than the rewind point, past what the window kept: start over.
  EXPECT_EQ(conv.TruncateTo(215), 0u);
  // Within the first window too: a query at 5 needs positions 0..4, long gone.
  ASSERT_TRUE(conv.PrefillContext(ctx).ok());
  EXPECT_EQ(conv.TruncateTo(5), 0u);
  // A cache read back elsewhere (no record of what was dropped) is judged by what it holds.
  ASSERT_TRUE(conv.PrefillContext(ctx).ok());
  ConversationRecord record;
  record.tokens = conv.tokens();
  record.cache = conv.TakeCache();
  Conversation restored(m, comp, pool, std::move(record));
  EXPECT_EQ(restored.TruncateTo(190), 0u);
}

// KVzip's second pass re-reads the whole context, windowed layers included: a conversation
// keeps them until that pass is done, then drops what the window no longer sees.
TEST(SlidingWindow, KvzipReadsTheWholeContextThenTheWindowDrops) {
  const Model& m = Gemma2();
  ThreadPool pool(2);
  auto press = MakePress(*ParsePressSpec("kvzip"));
  ASSERT_TRUE(press.ok()) << press.message();
  Compressor comp(m, std::move(press).value());
  Conversation conv(m, comp, pool, ConversationRecord{.schedule = {.ratio = 0.5}});
  const std::vector<Token> ctx = RandomTokenIds(96, 16, 3, 500);
  const Status s = conv.PrefillContext(ctx);
  ASSERT_TRUE(s.ok()) << s.message();
  // KVzip shares the budget across the global layers' heads (half of the 96 entries each, on
  // average); the windowed ones keep what the window sees.
  int global = 0, global_heads = 0;
  for (int l = 0; l < m.config().n_layers; ++l) {
    for (int h = 0; h < m.config().n_kv_heads; ++h) {
      if (m.config().LocalLayer(l)) {
        EXPECT_EQ(conv.cache().Length(l, h), kWindow - 1) << l;
      } else {
        global += conv.cache().Length(l, h);
        ++global_heads;
      }
    }
  }
  EXPECT_EQ(global, 48 * global_heads);
}

// Eval's independent questions on a sliding-window model: each answers as if asked alone.
TEST(SlidingWindow, PipelineQuestionsRewindToTheContext) {
  const Model& m = Gemma2();
  ThreadPool pool(2);
  const std::vector<Token> ctx = RandomTokenIds(120, 13, 3, 500);
  const std::vector<std::vector<Token>> questions = {RandomTokenIds(20, 14, 3, 500),
                                                     RandomTokenIds(20, 15, 3, 500)};
  PipelineOptions opt;
  opt.max_new_tokens = 24;
  for (const char* spec : {"none", "primekv"}) {
    SCOPED_TRACE(spec);
    auto press = MakePress(*ParsePressSpec(spec));
    ASSERT_TRUE(press.ok());
    Compressor comp(m, std::move(press).value());
    opt.schedule.ratio = std::string(spec) == "none" ? 0.0 : 0.5;
    auto both = RunPipeline(m, comp, opt, ctx, questions, pool);
    ASSERT_TRUE(both.ok()) << both.message();
    auto second = RunPipeline(m, comp, opt, ctx, {questions[1]}, pool);
    ASSERT_TRUE(second.ok()) << second.message();
    ASSERT_EQ(both->turns.size(), 2u);
    EXPECT_EQ(both->turns[1].tokens, second->turns[0].tokens);
    // Every local layer ends within the window.
    for (int l = 0; l < m.config().n_layers; l += 2)
      EXPECT_LE(both->entries_per_layer_final[static_cast<size_t>(l)],
                int64_t{kWindow} * m.config().n_kv_heads);
  }
}

// The presses compress the global layers and leave the local ones, unless asked
// ("local=compress").
TEST(SlidingWindow, PressesLeaveLocalLayersUnlessAsked) {
  const Model& m = Gemma2();
  ThreadPool pool(2);
  const std::vector<Token> ctx = RandomTokenIds(96, 9, 3, 500);
  for (const char* spec : {"primekv", "primekv:local=compress", "keydiff"}) {
    SCOPED_TRACE(spec);
    auto press = MakePress(*ParsePressSpec(spec));
    ASSERT_TRUE(press.ok()) << press.message();
    const bool local = std::string(spec).find("local=compress") != std::string::npos;
    EXPECT_NE(press->resolved.find("local=compress"), local ? std::string::npos : 0u);
    Compressor comp(m, std::move(press).value());
    KvCache cache = m.NewCache();
    Logits(m, cache, ctx, pool);
    ASSERT_TRUE(comp.Compress(cache, 0.5, nullptr, pool).ok());
    for (int l = 0; l < m.config().n_layers; ++l) {
      const bool compressed = !m.config().LocalLayer(l) || local;
      EXPECT_EQ(cache.Length(l, 0), compressed ? 48 : 96) << "layer " << l;
    }
  }
  EXPECT_FALSE(MakePress(*ParsePressSpec("primekv:local=maybe")).ok());
}

}  // namespace
}  // namespace primekv
