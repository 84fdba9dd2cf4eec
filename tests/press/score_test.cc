// PrimeKV's default score and CurDKV on hand-worked inputs (the full comparison against the
// numpy twins on random fixtures is tests/reference/check_presses.py).
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <numbers>

#include "primekv/press/press.h"
#include "primekv/press/tensor_scores.h"

namespace primekv {
namespace {

// RoPE as a scorer sees it: one inverse frequency per rotary pair, and the next position.
struct Rope {
  std::vector<float> inv_freq;
  int32_t next_position = 0;
};

HeadScores ScoreWith(const std::string& spec, const HeadEntries& e, int d,
                     const std::vector<float>& gram, const Rope& rope = {}) {
  auto parsed = ParsePressSpec(spec);
  EXPECT_TRUE(parsed.ok());
  auto press = MakePress(*parsed);
  EXPECT_TRUE(press.ok()) << press.message();
  std::vector<HeadEntries> heads{e};
  ModelConfig config;
  config.n_layers = 1;
  config.n_heads = 1;
  config.n_kv_heads = 1;
  config.head_dim = d;
  LayerInput in(config);
  in.heads = heads;
  in.output_gram = gram;
  in.rope_inv_freq = rope.inv_freq;
  in.next_position = rope.next_position;
  HeadScores out(1, std::vector<float>(static_cast<size_t>(e.size()), 0.0f));
  press->scorer->Score(in, out);
  return out;
}

TEST(PrimeKvScore, DefaultIsCenteredNextQueryLogAttentionPlusLogValue) {
  // Keys kbar + (+-e1, +-e2) with kbar = (1, 1), at positions 0, 2, 5, 7 (one rotary pair,
  // theta = pi/4); the next query is at 8. The default's query is the deviation d_i = k_i - kbar
  // turned by (8 - pos_i) theta = 2 pi, 3 pi/2, 3 pi/4, pi/4:
  // r_i = |d_i|^2 cos((8 - pos_i) theta) / sqrt(2) = 1/sqrt(2), 0, -1/2, 1/2.
  // Values (1,0), (0,1), 0, 0 with vbar = (1/4, 1/4) and M = diag(4, 1):
  // c = sqrt(4*0.5625 + 0.0625), sqrt(4*0.0625 + 0.5625), sqrt(4*0.0625 + 0.0625) (twice).
  HeadEntries e;
  e.keys = {2, 1, 0, 1, 1, 2, 1, 0};
  e.values = {1, 0, 0, 1, 0, 0, 0, 0};
  e.positions = {0, 2, 5, 7};
  const std::vector<float> gram{4, 0, 0, 1};
  const Rope rope{{static_cast<float>(std::numbers::pi / 4)}, 8};
  const double c[] = {std::sqrt(2.3125), std::sqrt(0.8125), std::sqrt(0.3125), std::sqrt(0.3125)};
  const double h = 1 / std::sqrt(2.0);
  // The default and its variants of the query, each with the key side r it gives here:
  // key=self: q_i = k_i, r_i = k_i.d_i / sqrt(2) = sqrt(2), 0, sqrt(2), 0;
  // key=centered: q_i = d_i, r_i = |d_i|^2 / sqrt(2) = 1/sqrt(2) for all;
  // key=next: q_i = R(8 - pos_i) k_i, r_i = q_i.d_i / sqrt(2) = sqrt(2), -1/sqrt(2), -1/2, -1/2.
  // Each keeps another pair of the four, so the default's values tell it from every variant.
  const struct {
    const char* spec;
    double r[4];
    std::vector<int32_t> top2;
  } cases[] = {
      {"primekv", {h, 0, -0.5, 0.5}, {0, 3}},
      {"primekv:key=self", {2 * h, 0, 2 * h, 0}, {0, 2}},
      {"primekv:key=centered", {h, h, h, h}, {0, 1}},
      {"primekv:key=next", {2 * h, -h, -0.5, -0.5}, {0, 1}},
  };
  for (const auto& k : cases) {
    const auto s = ScoreWith(k.spec, e, 2, gram, rope);
    for (int i = 0; i < 4; ++i) EXPECT_NEAR(s[0][i], k.r[i] + std::log(c[i]), 1e-6) << k.spec << i;
    EXPECT_EQ(SelectTopK(s[0], 2), k.top2) << k.spec;
  }
  // The first reconstruction, leverage x value: Gram of centred keys 2 I (+ jitter), r = 1/2.
  const auto old = ScoreWith("primekv:key=leverage,combine=product", e, 2, gram, rope);
  for (int i = 0; i < 4; ++i) EXPECT_NEAR(old[0][i], 0.5 / (1 + 1e-6) * c[i], 1e-6) << i;
}

TEST(PrimeKvScore, SelfKeyPrefersLargeKeysAwayFromTheMean) {
  // Three equal keys (1, 0) and a longer orthogonal one (0, 2): kbar = (3/4, 1/2).
  HeadEntries e;
  e.keys = {1, 0, 1, 0, 1, 0, 0, 2};
  e.values.assign(8, 0);
  e.positions = {0, 1, 2, 3};
  const auto s = ScoreWith("primekv:key=self,value=none", e, 2, {});
  // r_i = k_i . (k_i - kbar) / sqrt(2), kbar = (0.75, 0.5)
  EXPECT_NEAR(s[0][0], 0.25 / std::sqrt(2.0), 1e-6);
  EXPECT_NEAR(s[0][3], 2 * 1.5 / std::sqrt(2.0), 1e-6);
}

TEST(CurDkvScore, LocalLeverageProductWithSinks) {
  // 20 one-dimensional rows: windows [0, 16) and [16, 20). |k|^2 = 1 except row 5 (4) and row
  // 17 (3); |v|^2 = 1 except row 6 (2). Window sums: k 19 and 6, v 17 and 4.
  HeadEntries e;
  e.keys.assign(20, 1.0f);
  e.values.assign(20, 1.0f);
  e.keys[5] = 2.0f;
  e.keys[17] = std::sqrt(3.0f);
  e.values[6] = std::sqrt(2.0f);
  for (int i = 0; i < 20; ++i) e.positions.push_back(i);
  std::vector<double> p(20);
  for (int i = 0; i < 20; ++i) p[i] = i < 16 ? 1.0 / 19 / 17 : 1.0 / 6 / 4;
  p[5] = 4.0 / 19 / 17;
  p[6] = 2.0 / 19 / 17;
  p[17] = 3.0 / 6 / 4;
  double sum = 0, mx = 0;
  for (double x : p) sum += x;
  for (double& x : p) mx = std::max(mx, x /= sum);
  const auto s = ScoreWith("curdkv", e, 1, {});
  for (int i = 0; i < 20; ++i) EXPECT_NEAR(s[0][i], i < 4 ? mx + 1 : p[i], 1e-6) << i;
  // Sinks, then row 17 (3/24), then the window-1 rows at 1/24 (tie: lower row) before row 5.
  EXPECT_EQ(SelectTopK(s[0], 6), (std::vector<int32_t>{0, 1, 2, 3, 16, 17}));
}

// Issue 55 item 7: a NaN or infinite key or value is refused by every scorer, naming the tensor
// (keydiff, primekv and oracle returned NaN scores and still kept entries; expected_attention,
// lagkv, curdkv and streamingllm returned finite scores that hid it).
TEST(ScoreLayerTensors, RefusesNonFiniteKeysAndValuesNamingTheTensor) {
  constexpr int n = 8, d = 4;
  const float nan = std::numeric_limits<float>::quiet_NaN();
  const float inf = std::numeric_limits<float>::infinity();
  std::vector<float> keys(n * d, 0.5f), values(n * d, 0.25f), future(2 * d, 0.1f);
  std::vector<int32_t> positions(n);
  for (int i = 0; i < n; ++i) positions[static_cast<size_t>(i)] = i;
  const auto score = [&](const std::string& spec) {
    LayerTensors t;
    t.config.n_layers = 1;
    t.config.n_heads = 1;
    t.config.n_kv_heads = 1;
    t.config.head_dim = d;
    t.config.rope_base = 10000.0f;
    t.n = n;
    t.next_position = n;
    t.keys = keys;
    t.values = values;
    t.positions = positions;
    t.future_queries = future;
    auto press = MakePress(ParsePressSpec(spec).value());
    EXPECT_TRUE(press.ok()) << press.message();
    return ScoreLayerTensors(*press, t);
  };
  for (const char* spec : {"keydiff", "primekv", "oracle", "expected_attention", "lagkv", "curdkv",
                           "streamingllm", "knorm"}) {
    keys[5] = nan;
    auto s = score(spec);
    ASSERT_FALSE(s.ok()) << spec;
    EXPECT_EQ(s.message(), "keys[5] is NaN; keys must be finite") << spec;
    keys[5] = 0.5f;
    values[9] = -inf;
    s = score(spec);
    ASSERT_FALSE(s.ok()) << spec;
    EXPECT_EQ(s.message(), "values[9] is -inf; values must be finite") << spec;
    values[9] = 0.25f;
    future[3] = inf;
    s = score(spec);
    ASSERT_FALSE(s.ok()) << spec;
    EXPECT_EQ(s.message(), "future_queries[3] is +inf; future_queries must be finite") << spec;
    future[3] = 0.1f;
  }
  // Finite inputs still score.
  EXPECT_TRUE(score("keydiff").ok());
}

}  // namespace
}  // namespace primekv
