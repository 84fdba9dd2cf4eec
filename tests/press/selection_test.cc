#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <numeric>
#include <random>
#include <set>
#include <tuple>

#include "primekv/press/press.h"

namespace primekv {
namespace {

TEST(KeepCount, MatchesKvPressCount) {
  EXPECT_EQ(KeepCount(100, 0.0), 100);
  EXPECT_EQ(KeepCount(100, 0.5), 50);
  EXPECT_EQ(KeepCount(101, 0.5), 50);
  EXPECT_EQ(KeepCount(7, 0.75), 1);
  EXPECT_EQ(KeepCount(3, 0.9), 1) << "never empty";
  EXPECT_EQ(KeepCount(1000, 0.875), 125);
}

TEST(SelectTopK, HighestFirstTiesToLowerIndex) {
  const std::vector<float> s{0.5f, 2.0f, 2.0f, -1.0f, 2.0f, NAN, 0.7f};
  EXPECT_EQ(SelectTopK(s, 2), (std::vector<int32_t>{1, 2}));
  EXPECT_EQ(SelectTopK(s, 4), (std::vector<int32_t>{1, 2, 4, 6}));
  EXPECT_EQ(SelectTopK(s, 7).size(), 7u);
  EXPECT_EQ(SelectTopK(s, 6), (std::vector<int32_t>{0, 1, 2, 3, 4, 6})) << "NaN ranks last";
}

TEST(PyramidKeep, AveragesToUniformBudget) {
  const int n = 4096, layers = 32;
  for (double r : {0.25, 0.5, 0.75, 0.9}) {
    double sum = 0;
    int prev = n + 1;
    for (int l = 0; l < layers; ++l) {
      const int k = PyramidKeep(n, r, l, layers, 64, 20);
      EXPECT_LE(k, prev) << "lower layers keep more";
      prev = k;
      sum += k;
    }
    EXPECT_NEAR(sum / layers, n * (1 - r), 1.0) << "ratio " << r;
  }
  EXPECT_EQ(PyramidKeep(100, 0.5, 0, 4, 64, 20), KeepCount(100, 0.5)) << "short input falls back";
}

TEST(SelectForLayer, AdaptiveKeepsTotalAndFloor) {
  HeadScores s(3);
  for (int h = 0; h < 3; ++h) {
    s[h].resize(100);
    for (int j = 0; j < 100; ++j) s[h][j] = h == 0 ? 10.0f + j : 0.001f * j;  // head 0 dominates
  }
  BudgetOptions b;
  b.kind = BudgetKind::kAdaptive;
  const auto kept = SelectForLayer(s, 0.5, b, /*comparable=*/true, 0, 1);
  size_t total = 0;
  for (const auto& k : kept) {
    total += k.size();
    EXPECT_GE(k.size(), 10u) << "floor alpha * keep = 0.2 * 50";
    EXPECT_TRUE(std::is_sorted(k.begin(), k.end()));
  }
  EXPECT_EQ(total, 150u);
  EXPECT_EQ(kept[0].size(), 100u) << "the dominant head takes the shared budget";
}

// Layers x heads x n scores, all distinct (a shuffled ramp), so the expected set has no ties.
std::vector<HeadScores> ShuffledScores(int layers, int heads, int n, unsigned seed) {
  std::vector<float> ramp(static_cast<size_t>(layers * heads * n));
  std::iota(ramp.begin(), ramp.end(), 0.0f);
  std::mt19937 rng(seed);
  std::shuffle(ramp.begin(), ramp.end(), rng);
  std::vector<HeadScores> out(static_cast<size_t>(layers), HeadScores(heads));
  size_t next = 0;
  for (auto& layer : out)
    for (auto& head : layer)
      for (int i = 0; i < n; ++i) head.push_back(ramp[next++] - 50.0f);
  return out;
}

TEST(SelectAcrossLayers, KeepsTheTopEntriesOverLayersWithTheSafeguard) {
  const int layers = 3, heads = 2, n = 20;
  const double ratio = 0.75;  // uniform share 5 per head, safeguard floor(0.2 * 5) = 1
  const auto scores = ShuffledScores(layers, heads, n, 7);
  const std::vector<double> ratios(layers, ratio);
  BudgetOptions b;
  b.kind = BudgetKind::kGlobal;
  const auto kept = SelectAcrossLayers(scores, ratios, b);
  // Reference: every head's best entry, then the best of the rest over all layers.
  struct Item {
    float s;
    int l, h, i;
  };
  std::vector<Item> rest;
  std::set<std::tuple<int, int, int>> expected;
  for (int l = 0; l < layers; ++l)
    for (int h = 0; h < heads; ++h) {
      const auto& s = scores[l][h];
      const int best = static_cast<int>(std::max_element(s.begin(), s.end()) - s.begin());
      expected.insert({l, h, best});
      for (int i = 0; i < n; ++i)
        if (i != best) rest.push_back({s[i], l, h, i});
    }
  std::sort(rest.begin(), rest.end(), [](const Item& a, const Item& b) { return a.s > b.s; });
  const size_t uniform_total = static_cast<size_t>(layers * heads * KeepCount(n, ratio));
  for (size_t j = 0; expected.size() < uniform_total; ++j)
    expected.insert({rest[j].l, rest[j].h, rest[j].i});
  std::set<std::tuple<int, int, int>> got;
  ASSERT_EQ(kept.size(), static_cast<size_t>(layers));
  for (int l = 0; l < layers; ++l) {
    ASSERT_EQ(kept[l].size(), static_cast<size_t>(heads));
    for (int h = 0; h < heads; ++h) {
      EXPECT_TRUE(std::is_sorted(kept[l][h].begin(), kept[l][h].end()));
      EXPECT_GE(kept[l][h].size(), 1u) << "safeguard";
      for (int32_t i : kept[l][h]) got.insert({l, h, i});
    }
  }
  EXPECT_EQ(got.size(), uniform_total) << "the same total as uniform";
  EXPECT_EQ(got, expected);
  // Ratio 0 keeps everything.
  const auto all = SelectAcrossLayers(scores, std::vector<double>(layers, 0.0), b);
  for (int l = 0; l < layers; ++l)
    for (int h = 0; h < heads; ++h) EXPECT_EQ(all[l][h].size(), static_cast<size_t>(n));
}

TEST(SelectAcrossLayers, BudgetMovesToTheLayerWithLargerScores) {
  // Layer 0's scores are far below layer 1's: layer 0 keeps only its safeguard (floor(0.2 * 10)
  // = 2 per head), layer 1 gets the rest of the 2 x 2 x 10 = 40 kept entries.
  std::vector<HeadScores> s(2, HeadScores(2, std::vector<float>(20)));
  for (int h = 0; h < 2; ++h)
    for (int i = 0; i < 20; ++i) {
      s[0][h][i] = -100.0f + static_cast<float>(i);
      s[1][h][i] = static_cast<float>(i);
    }
  BudgetOptions b;
  b.kind = BudgetKind::kGlobal;
  const auto kept = SelectAcrossLayers(s, std::vector<double>{0.5, 0.5}, b);
  EXPECT_EQ(kept[0][0], (std::vector<int32_t>{18, 19}));
  EXPECT_EQ(kept[0][1], (std::vector<int32_t>{18, 19}));
  EXPECT_EQ(kept[1][0].size(), 18u);
  EXPECT_EQ(kept[1][1].size(), 18u);
  EXPECT_EQ(kept[1][0].front(), 2) << "the 18 largest of layer 1";
  // One layer alone (SelectForLayer with kGlobal) pools its heads on raw scores.
  const auto one = SelectForLayer(s[1], 0.5, b, /*comparable=*/false, 1, 2);
  EXPECT_EQ(one[0].size() + one[1].size(), 20u);
}

TEST(SelectSharedPositions, BestQuantileOverHeadsThenMeanKeepsOneSetEverywhere) {
  // n = 5 rows, a row's quantile in a head is its ascending rank / 4. Row 0 is top in one head
  // and last in the others; row 1 is second in every head. Rows 0, 2, 3 and 4 are each top
  // somewhere (best quantile 1) and row 1 is not (0.75), so row 1 goes last although its
  // summed quantile (3) is the largest: the set keeps what some head ranks first. The sums
  // order the rest: row 2 (.5 + 1 + .25 + .5 = 2.25), row 3 (2), row 4 (1.75), row 0 (1).
  std::vector<HeadScores> s(2, HeadScores(2));
  s[0][0] = {4, 3, 2, 1, 0};
  s[0][1] = {0, 3, 4, 2, 1};
  s[1][0] = {0, 3, 1, 4, 2};
  s[1][1] = {0, 3, 2, 1, 4};
  const auto kept = SelectSharedPositions(s, std::vector<double>{0.6, 0.2});
  ASSERT_EQ(kept.size(), 2u);
  // Layer 0 keeps floor(5 * 0.4) = 2 rows, layer 1 floor(5 * 0.8) = 4, the same in each head.
  EXPECT_EQ(kept[0][0], (std::vector<int32_t>{2, 3}));
  EXPECT_EQ(kept[0][1], kept[0][0]);
  EXPECT_EQ(kept[1][0], (std::vector<int32_t>{0, 2, 3, 4}));
  EXPECT_EQ(kept[1][1], kept[1][0]);
}

TEST(PressSpec, SharedBudgetOverAnyScorer) {
  auto p = MakePress(*ParsePressSpec("primekv:budget=shared"));
  ASSERT_TRUE(p.ok()) << p.message();
  EXPECT_EQ(p->budget.kind, BudgetKind::kShared);
  auto k = MakePress(*ParsePressSpec("keydiff:budget=shared"));
  ASSERT_TRUE(k.ok()) << k.message();
  EXPECT_EQ(k->budget.kind, BudgetKind::kShared) << "ranks only: no common unit needed";
}

TEST(PressSpec, GlobalBudgetOnlyOverScoresComparableAcrossLayers) {
  auto p = MakePress(*ParsePressSpec("primekv:budget=global"));
  ASSERT_TRUE(p.ok()) << p.message();
  EXPECT_EQ(p->budget.kind, BudgetKind::kGlobal);
  EXPECT_EQ(p->name, "primekv:budget=global");
  auto d = MakePress(*ParsePressSpec("primekv"));
  ASSERT_TRUE(d.ok());
  EXPECT_EQ(d->budget.kind, BudgetKind::kUniform) << "the default is unchanged";
  EXPECT_FALSE(MakePress(*ParsePressSpec("primekv:budget=layer")).ok());
  EXPECT_FALSE(MakePress(*ParsePressSpec("primekv:budget=global,combine=rank")).ok());
  EXPECT_FALSE(MakePress(*ParsePressSpec("keydiff:budget=global")).ok());
}

TEST(PressSpec, ParsesNamesParamsAndWrappers) {
  auto a = ParsePressSpec("primekv:value=wo_centered, key=cosine");
  ASSERT_TRUE(a.ok());
  EXPECT_EQ(a->name, "primekv");
  EXPECT_EQ(a->params.at("key"), "cosine");
  auto b = ParsePressSpec("adakv:snapkv:window=32");
  ASSERT_TRUE(b.ok());
  EXPECT_EQ(b->Text(), "adakv:snapkv:window=32");
  EXPECT_FALSE(ParsePressSpec("primekv:key").ok());
  EXPECT_FALSE(MakePress(*ParsePressSpec("nonesuch")).ok());
  EXPECT_FALSE(MakePress(*ParsePressSpec("primekv:key=magic")).ok());
  EXPECT_FALSE(MakePress(*ParsePressSpec("knorm:window=3")).ok())
      << "unknown parameters are errors";
  EXPECT_FALSE(MakePress(*ParsePressSpec("adakv:oracle")).ok());
  for (const PressInfo& info : ListPresses()) {
    if (info.name.find('<') != std::string::npos) continue;
    auto p = MakePress(*ParsePressSpec(info.name));
    ASSERT_TRUE(p.ok()) << info.name << ": " << p.message();
    EXPECT_EQ(p->scorer == nullptr, info.name == "none");
  }
}

}  // namespace
}  // namespace primekv
