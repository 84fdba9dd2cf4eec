#include <gtest/gtest.h>

#include <cmath>
#include <numeric>

#include "primekv/press.h"

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
