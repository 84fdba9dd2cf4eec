// Bootstrap intervals and paired comparisons (src/eval/stats.cc). The expected intervals come
// from an independent numpy replica of the documented procedure (SplitMix64 draws, index =
// draw mod n, numpy.quantile); the means are worked by hand in the comments.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>

#include "primekv/eval/eval_stats.h"

namespace primekv {
namespace {

TEST(StratifiedBootstrap, MatchesNumpyReplica) {
  // Means: (3/5 + 1.75/3) / 2 = (0.6 + 0.58333) / 2 = 0.591667.
  const BootstrapInterval b = StratifiedBootstrap({{0, 1, 1, 0, 1}, {0.5, 0.25, 1}}, 200, 7);
  EXPECT_NEAR(b.mean, 0.5916666666666667, 1e-12);
  EXPECT_NEAR(b.lo, 0.30833333333333335, 1e-12);
  EXPECT_NEAR(b.hi, 0.8343750000000002, 1e-12);
  EXPECT_EQ(b.n, 8);
  // One stratum, 90% level: mean (0.1 + 0.9 + 0.4 + 0.7) / 4 = 0.525.
  const BootstrapInterval c = StratifiedBootstrap({{0.1, 0.9, 0.4, 0.7}}, 50, 123, 0.9);
  EXPECT_NEAR(c.mean, 0.525, 1e-12);
  EXPECT_NEAR(c.lo, 0.325, 1e-12);
  EXPECT_NEAR(c.hi, 0.775, 1e-12);
}

TEST(StratifiedBootstrap, AgreesWithNormalApproximationForLargeN) {
  // 400 alternating 0/1: mean 0.5, standard error 0.5 / 20 = 0.025, so about 0.5 +- 0.049.
  std::vector<double> x;
  for (int i = 0; i < 400; ++i) x.push_back(i % 2);
  const BootstrapInterval b = StratifiedBootstrap({x});
  EXPECT_NEAR(b.lo, 0.451, 0.006);
  EXPECT_NEAR(b.hi, 0.549, 0.006);
  EXPECT_NEAR(b.lo, 0.45, 1e-12);  // numpy replica, default seed
  EXPECT_NEAR(b.hi, 0.5475, 1e-12);
}

TEST(StratifiedBootstrap, DegenerateInputs) {
  const BootstrapInterval c = StratifiedBootstrap({{0.3, 0.3, 0.3}, {}});
  EXPECT_DOUBLE_EQ(c.mean, 0.3);
  EXPECT_DOUBLE_EQ(c.lo, 0.3);
  EXPECT_DOUBLE_EQ(c.hi, 0.3);
  EXPECT_EQ(c.n, 3);
  const BootstrapInterval e = StratifiedBootstrap({});
  EXPECT_EQ(e.n, 0);
  EXPECT_EQ(e.mean, 0);
}

TEST(PairedComparison, PairsSamplesAndAveragesTurns) {
  const auto dir = std::filesystem::temp_directory_path() / "primekv_stats_test";
  std::filesystem::create_directories(dir);
  const auto file = dir / "results.jsonl";
  {
    std::ofstream out(file);
    auto line = [&](const char* task, const char* id, const char* press, double ratio, int turn,
                    double score) {
      out << "{\"task\":\"" << task << "\",\"id\":\"" << id << "\",\"press\":\"" << press
          << "\",\"ratio\":" << ratio << ",\"turn\":" << turn << ",\"score\":" << score << "}\n";
    };
    // Task t1: two samples; sample b has two turns (mean 0.5 for x at 0.5).
    line("t1", "a", "none", 0, 0, 1);
    line("t1", "b", "none", 0, 0, 1);
    line("t1", "b", "none", 0, 1, 1);
    line("t1", "a", "x", 0.5, 0, 1);
    line("t1", "b", "x", 0.5, 0, 0);
    line("t1", "b", "x", 0.5, 1, 1);
    line("t1", "a", "y", 0.5, 0, 0);
    line("t1", "b", "y", 0.5, 0, 1);
    line("t1", "b", "y", 0.5, 1, 1);
    line("t1", "c", "y", 0.5, 0, 1);  // no x partner: not paired
    out << "{broken line\n";
  }
  auto s = LoadSampleScores(file);
  ASSERT_TRUE(s.ok()) << s.message();
  EXPECT_DOUBLE_EQ(s->scores.at("t1").at("x").at(0.5).at("b"), 0.5);
  EXPECT_EQ(s->scores.at("t1").at("y").at(0.5).size(), 3u);
  // y - x on {a, b}: (0 - 1) and (1 - 0.5): mean -0.25 -> "-25.0".
  auto md = PairedComparison(*s, "x", "y");
  ASSERT_TRUE(md.ok()) << md.message();
  EXPECT_NE(md->find("| 0.5 | 2 | 75.0 | 50.0 | -25.0 ["), std::string::npos) << *md;
  // none pairs at ratio 0 with x at 0.5: x - none = (0, -0.5), mean -0.25.
  auto mn = PairedComparison(*s, "none", "x");
  ASSERT_TRUE(mn.ok()) << mn.message();
  EXPECT_NE(mn->find("| 0.5 | 2 | 100.0 | 75.0 | -25.0 ["), std::string::npos) << *mn;
  EXPECT_FALSE(PairedComparison(*s, "x", "missing").ok());
  const std::string table = IntervalTable(*s);
  EXPECT_NE(table.find("| y | | | 66.7 ["), std::string::npos) << table;
  std::filesystem::remove_all(dir);
}

}  // namespace
}  // namespace primekv
