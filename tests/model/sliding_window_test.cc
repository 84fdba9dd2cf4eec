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

std::vector<float> Logits(const Model& m, KvCache& cache, std::span<const Token> tokens,
                          ThreadPool& pool) {
  ForwardWorkspace ws;
  const int vocab = m.config().vocab_size;
  std::vector<float> logits(tokens.size() * static_cast<size_t>(vocab));
  const Status s = m.Forward(tokens, cache, {true},
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

// After DropExpired a local layer holds what a later query can see (positions past
// next - window), plus at most the rest of the page that straddles the window's start; the
// global layers keep everything. Continuing from the trimmed cache gives the logits of a
// cache that kept every entry.
TEST(SlidingWindow, DropExpiredFreesPagesAndChangesNoLogit) {
  const Model& m = Gemma2();
  ThreadPool pool(2);
  const std::vector<Token> tokens = RandomTokenIds(140, 5, 3, 500);
  const std::span<const Token> first(tokens.data(), 100), rest(tokens.data() + 100, 40);
  KvCache full = m.NewCache({KvDType::kF32});
  KvCache ring = m.NewCache({KvDType::kF32});
  Logits(m, full, first, pool);
  Logits(m, ring, first, pool);
  const size_t before = ring.BytesInUse();
  m.DropExpired(ring);
  EXPECT_LT(ring.BytesInUse(), before);
  const int page = ring.page_tokens();
  for (int l = 0; l < m.config().n_layers; ++l) {
    for (int h = 0; h < m.config().n_kv_heads; ++h) {
      const int len = ring.Length(l, h);
      if (!m.config().LocalLayer(l)) {
        EXPECT_EQ(len, 100) << l;
        continue;
      }
      EXPECT_GE(len, kWindow - 1) << l;  // positions 85..99
      EXPECT_LE(len, kWindow - 1 + page - 1) << l;
      EXPECT_EQ(ring.PositionAt(l, h, len - 1), 99);
      EXPECT_LE(ring.PositionAt(l, h, 0), 100 - kWindow + 1);
    }
  }
  EXPECT_EQ(ring.ExpiredBelow(), 100 - kWindow + 1);
  // Token by token, trimming after every step, as a long decode with turns would.
  const int vocab = m.config().vocab_size;
  const std::vector<float> want = Logits(m, full, rest, pool);
  for (size_t i = 0; i < rest.size(); ++i) {
    const std::vector<float> got = Logits(m, ring, rest.subspan(i, 1), pool);
    m.DropExpired(ring);
    for (int v = 0; v < vocab; ++v) {
      ASSERT_NEAR(got[static_cast<size_t>(v)], want[i * vocab + static_cast<size_t>(v)], 1e-4)
          << "token " << i << " logit " << v;
    }
    for (int l = 0; l < m.config().n_layers; l += 2)
      EXPECT_LE(ring.Length(l, 0), kWindow - 1 + page - 1);
  }
}

// A conversation on a sliding-window model: the local layers stay within the window after the
// context and after every turn; rewinding past what they freed starts over instead of
// answering from a cache with a hole.
TEST(SlidingWindow, ConversationTrimsAtCommitPointsAndRefusesHoles) {
  const Model& m = Gemma2();
  ThreadPool pool(2);
  auto press = MakePress(*ParsePressSpec("none"));
  ASSERT_TRUE(press.ok());
  Compressor comp(m, std::move(press).value());
  Conversation conv(m, comp, pool, ConversationRecord{});
  const std::vector<Token> ctx = RandomTokenIds(200, 6, 3, 500);
  ASSERT_TRUE(conv.PrefillContext(ctx).ok());
  const int page = conv.cache().page_tokens();
  EXPECT_LE(conv.cache().Length(0, 0), kWindow - 1 + page - 1);
  EXPECT_EQ(conv.cache().Length(1, 0), 200);
  // Answers and rewinds to the context's end are exact: nothing past it was freed.
  ASSERT_TRUE(conv.Prefill(RandomTokenIds(30, 7, 3, 500)).ok());
  EXPECT_EQ(conv.TruncateTo(200), 200u);
  ASSERT_TRUE(conv.Prefill(RandomTokenIds(30, 8, 3, 500)).ok());
  ASSERT_TRUE(conv.EndTurn().ok());
  EXPECT_LE(conv.cache().Length(0, 0), kWindow - 1 + page - 1);
  // The turn's end freed entries position 200 still needs: the rewind resets instead.
  EXPECT_EQ(conv.TruncateTo(200), 0u);
  EXPECT_TRUE(conv.tokens().empty());
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
