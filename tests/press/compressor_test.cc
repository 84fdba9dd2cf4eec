// Compressor::Run reads and scores one KV head at a time when the scorer is a HeadScorer (its
// head h's scores read only head h), so a layer's float copies never coexist. Checked here: a
// HeadScorer sees exactly its own head filled, and it keeps the same rows as a whole-layer
// Scorer computing the same scores from all heads at once.
#include "primekv/press/compressor.h"

#include <gtest/gtest.h>

#include <atomic>
#include <numeric>

#include "common/random_models.h"
#include "press/scorer_util.h"

namespace primekv::press_internal {
namespace {

// A score that depends on every coordinate of key and value and on the position.
float ProbeScore(const LayerInput& in, int h, int64_t j) {
  const MatView<const float> k = in.Keys(h), v = in.Values(h);
  double s = 0;
  for (int64_t c = 0; c < k.cols; ++c) s += (c + 1.0) * k(j, c) - 0.5 * v(j, c) * v(j, c);
  return static_cast<float>(s + 1e-3 * in.heads[static_cast<size_t>(h)].positions[j]);
}

std::atomic<int> g_bad_views{0};

class PerHeadProbe : public HeadScorer {
 public:
  PressNeeds Needs() const override { return {.values = true}; }
  void ScoreHead(const LayerInput& in, int h, std::vector<float>& s) const override {
    for (int j = 0; j < in.n_kv_heads(); ++j) {
      const HeadEntries& e = in.heads[static_cast<size_t>(j)];
      const bool filled = !e.keys.empty() || !e.values.empty() || !e.positions.empty();
      if (filled != (j == h) || (j == h && e.size() != std::ssize(s))) ++g_bad_views;
    }
    for (int64_t j = 0; j < std::ssize(s); ++j) s[j] = ProbeScore(in, h, j);
  }
};

class WholeLayerProbe : public Scorer {
 public:
  PressNeeds Needs() const override { return {.values = true}; }
  void Score(const LayerInput& in, HeadScores& out) const override {
    for (int h = 0; h < in.n_kv_heads(); ++h) {
      if (in.heads[static_cast<size_t>(h)].size() != std::ssize(out[h])) ++g_bad_views;
      for (int64_t j = 0; j < std::ssize(out[h]); ++j) out[h][j] = ProbeScore(in, h, j);
    }
  }
};

Press ProbePress(std::unique_ptr<Scorer> s) {
  Press p;
  p.name = "probe";
  p.scorer = std::move(s);
  p.budget.kind = BudgetKind::kUniform;
  return p;
}

std::vector<std::vector<int32_t>> KeptPositions(const KvCache& cache, int layers, int heads) {
  std::vector<std::vector<int32_t>> kept;
  for (int l = 0; l < layers; ++l) {
    for (int h = 0; h < heads; ++h) {
      std::vector<int32_t> pos;
      cache.ReadHead(l, h, nullptr, nullptr, &pos);
      kept.push_back(std::move(pos));
    }
  }
  return kept;
}

TEST(Compressor, HeadScorersSeeOneHeadAndKeepWhatWholeLayerScoringKeeps) {
  const Model model = WriteLoadAndRemove(SmallGqaSpec(11), "primekv_compressor_test.gguf");
  std::vector<Token> tokens(120);
  std::iota(tokens.begin(), tokens.end(), 5);
  std::vector<float> logits(300);
  std::vector<std::vector<int32_t>> kept[2];
  for (int which = 0; which < 2; ++which) {
    ThreadPool pool(2);
    KvCache cache = model.NewCache({KvDType::kF32});
    ForwardWorkspace ws;
    ASSERT_TRUE(model.Forward(tokens, cache, {}, {logits.data(), 1, 300}, pool, ws).ok());
    std::unique_ptr<Scorer> s;
    if (which == 0) {
      s = std::make_unique<PerHeadProbe>();
    } else {
      s = std::make_unique<WholeLayerProbe>();
    }
    const Compressor comp(model, ProbePress(std::move(s)));
    ASSERT_TRUE(comp.Compress(cache, 0.6, nullptr, pool).ok());
    // A second round over what remains: buffers of the first round are reused.
    ASSERT_TRUE(comp.CompressTo(cache, 20, nullptr, pool).ok());
    kept[which] = KeptPositions(cache, 2, 2);
  }
  EXPECT_EQ(g_bad_views.load(), 0);
  ASSERT_EQ(kept[0].size(), 4u);
  for (const auto& k : kept[0]) EXPECT_EQ(k.size(), 20u);
  EXPECT_EQ(kept[0], kept[1]);
}

TEST(Compressor, SharedBudgetKeepsOnePositionSetAndRefusesHeadsThatDiffer) {
  const Model model = WriteLoadAndRemove(SmallGqaSpec(12), "primekv_compressor_shared.gguf");
  std::vector<Token> tokens(100);
  std::iota(tokens.begin(), tokens.end(), 7);
  std::vector<float> logits(300);
  ThreadPool pool(2);
  auto prefill = [&] {
    KvCache cache = model.NewCache({KvDType::kF32});
    ForwardWorkspace ws;
    EXPECT_TRUE(model.Forward(tokens, cache, {}, {logits.data(), 1, 300}, pool, ws).ok());
    return cache;
  };
  auto shared = MakePress(*ParsePressSpec("keydiff:budget=shared"));
  ASSERT_TRUE(shared.ok()) << shared.message();
  const Compressor comp(model, std::move(*shared));
  KvCache cache = prefill();
  ASSERT_TRUE(comp.Compress(cache, 0.75, nullptr, pool).ok());
  const auto kept = KeptPositions(cache, 2, 2);
  for (const auto& k : kept) {
    EXPECT_EQ(k.size(), 25u);
    EXPECT_EQ(k, kept.front()) << "one set of positions in every layer and head";
  }
  // Per-head KeyDiff leaves the heads with different positions: shared selection refuses.
  auto per_head = MakePress(*ParsePressSpec("keydiff"));
  ASSERT_TRUE(per_head.ok());
  KvCache other = prefill();
  ASSERT_TRUE(Compressor(model, std::move(*per_head)).Compress(other, 0.5, nullptr, pool).ok());
  const auto differ = KeptPositions(other, 2, 2);
  ASSERT_NE(differ[0], differ[1]) << "the check below needs heads that differ";
  const Status st = comp.Compress(other, 0.5, nullptr, pool);
  EXPECT_FALSE(st.ok());
  EXPECT_NE(st.message().find("same positions"), std::string::npos) << st.message();
}

}  // namespace
}  // namespace primekv::press_internal
