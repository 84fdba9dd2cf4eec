// The mean-query map of PrimeKV's key=typical (primekv/press/mean_query.h) against what it must equal:
// where the cached keys and values determine the mean layer input, the map returns the true mean
// content query. Checked on hand-made matrices (both pseudo-inverse branches, biases, the part
// the cache cannot see, q/k norms) and end to end on random models, whose captured queries give
// the truth.
#include "primekv/press/mean_query.h"

#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <random>
#include <string>
#include <vector>

#include "common/random_models.h"
#include "primekv/util/thread_pool.h"

namespace primekv {
namespace {

Mat<float> Gaussian(int64_t rows, int64_t cols, std::mt19937_64& rng) {
  std::normal_distribution<float> normal(0.0f, 1.0f);
  Mat<float> m(rows, cols);
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t c = 0; c < cols; ++c) m(r, c) = normal(rng);
  return m;
}

// y = W x (+ b) in double, W [rows, cols].
std::vector<double> Apply(const Mat<float>& w, const std::vector<double>& x, int64_t first = 0,
                          int64_t rows = -1) {
  if (rows < 0) rows = w.rows();
  std::vector<double> y(static_cast<size_t>(rows), 0.0);
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t c = 0; c < w.cols(); ++c) y[r] += w(first + r, c) * x[c];
  return y;
}

double MaxAbsDiff(const std::vector<double>& a, const std::vector<double>& b) {
  double m = 0;
  for (size_t i = 0; i < a.size(); ++i) m = std::max(m, std::abs(a[i] - b[i]));
  return m;
}

double MaxAbs(const std::vector<double>& a) {
  double m = 0;
  for (double v : a) m = std::max(m, std::abs(v));
  return m;
}

// The mean over the group of W_q^(g) x.
std::vector<double> MeanOfGroup(const Mat<float>& wq, const std::vector<double>& x, int d) {
  const std::vector<double> all = Apply(wq, x);
  std::vector<double> mean(static_cast<size_t>(d), 0.0);
  const int group = static_cast<int>(wq.rows()) / d;
  for (int g = 0; g < group; ++g)
    for (int a = 0; a < d; ++a) mean[a] += all[static_cast<size_t>(g) * d + a] / group;
  return mean;
}

struct Case {
  Mat<float> wq, wk, wv;
  std::vector<double> xbar, cbar, vbar;
};

// Random projections of width D, and the cached means of 40 inputs x_j.
Case MakeCase(int d, int width, int group, uint64_t seed) {
  std::mt19937_64 rng(seed);
  Case c{Gaussian(int64_t{group} * d, width, rng),
         Gaussian(d, width, rng),
         Gaussian(d, width, rng),
         {},
         {},
         {}};
  const Mat<float> x = Gaussian(40, width, rng);
  c.xbar.assign(static_cast<size_t>(width), 0.0);
  for (int j = 0; j < 40; ++j)
    for (int i = 0; i < width; ++i) c.xbar[i] += x(j, i) / 40.0;
  c.cbar = Apply(c.wk, c.xbar);  // the mean of W_k x_j is W_k xbar
  c.vbar = Apply(c.wv, c.xbar);
  return c;
}

TEST(MeanQueryMap, FullColumnRankRecoversTheMeanQuery) {
  // 2d = 16 > D = 12: [W_k; W_v] determines xbar, branch (A^T A)^-1 A^T.
  const Case c = MakeCase(/*d=*/8, /*width=*/12, /*group=*/2, 1);
  const MeanQueryMap map =
      BuildMeanQueryMap(c.wq.view(), c.wk.view(), c.wv.view(), {}, {}, {}, {}, {}, 1e-5f);
  const std::vector<double> want = MeanOfGroup(c.wq, c.xbar, 8);
  EXPECT_LT(MaxAbsDiff(map.MeanQuery(c.cbar, c.vbar), want), 1e-4 * MaxAbs(want));
}

TEST(MeanQueryMap, QueriesReadingWhatTheCacheSeesAreRecovered) {
  // 2d = 16 < D = 40, branch A^T (A A^T)^-1: exact when W_q's rows lie in [W_k; W_v]'s span.
  Case c = MakeCase(8, 40, 4, 2);
  std::mt19937_64 rng(3);
  const Mat<float> mix = Gaussian(32, 16, rng);
  for (int r = 0; r < 32; ++r)
    for (int i = 0; i < 40; ++i) {
      double t = 0;
      for (int j = 0; j < 8; ++j) t += mix(r, j) * c.wk(j, i) + mix(r, 8 + j) * c.wv(j, i);
      c.wq(r, i) = static_cast<float>(t);
    }
  const MeanQueryMap map =
      BuildMeanQueryMap(c.wq.view(), c.wk.view(), c.wv.view(), {}, {}, {}, {}, {}, 1e-5f);
  const std::vector<double> want = MeanOfGroup(c.wq, c.xbar, 8);
  EXPECT_LT(MaxAbsDiff(map.MeanQuery(c.cbar, c.vbar), want), 1e-4 * MaxAbs(want));
}

TEST(MeanQueryMap, WhatTheCacheCannotSeeAddsNothing) {
  // W_q reads only directions orthogonal to every row of W_k and W_v: the minimum-norm input
  // the cache determines has no such component, so the mean query is zero (not a guess).
  Case c = MakeCase(4, 20, 2, 4);
  // Gram-Schmidt: an orthonormal basis of the 8 rows of [W_k; W_v], then the query rows with
  // their components along it removed.
  std::vector<std::vector<double>> basis;
  const auto without_basis = [&](const float* row) {
    std::vector<double> v(row, row + 20);
    for (const auto& b : basis) {
      double t = 0;
      for (int i = 0; i < 20; ++i) t += v[i] * b[i];
      for (int i = 0; i < 20; ++i) v[i] -= t * b[i];
    }
    return v;
  };
  for (const Mat<float>* w : {&c.wk, &c.wv})
    for (int r = 0; r < 4; ++r) {
      std::vector<double> v = without_basis(w->Row(r));
      double n = 0;
      for (double x : v) n += x * x;
      for (double& x : v) x /= std::sqrt(n);
      basis.push_back(v);
    }
  for (int r = 0; r < 8; ++r) {
    const std::vector<double> v = without_basis(c.wq.Row(r));
    for (int i = 0; i < 20; ++i) c.wq(r, i) = static_cast<float>(v[i]);
  }
  const MeanQueryMap map =
      BuildMeanQueryMap(c.wq.view(), c.wk.view(), c.wv.view(), {}, {}, {}, {}, {}, 1e-5f);
  const std::vector<double> full = MeanOfGroup(c.wq, c.xbar, 4);
  ASSERT_GT(MaxAbs(full), 0.1);  // the true mean query is far from zero
  EXPECT_LT(MaxAbs(map.MeanQuery(c.cbar, c.vbar)), 1e-4 * MaxAbs(full));
}

TEST(MeanQueryMap, BiasesAreTakenOffTheMeansAndAddedToTheQuery) {
  const Case c = MakeCase(8, 12, 2, 5);
  std::mt19937_64 rng(6);
  const Mat<float> b = Gaussian(1, 32, rng);
  const std::span<const float> bq(b.Row(0), 16), bk(b.Row(0) + 16, 8), bv(b.Row(0) + 24, 8);
  std::vector<double> cbar = c.cbar, vbar = c.vbar;
  for (int a = 0; a < 8; ++a) {
    cbar[a] += bk[a];
    vbar[a] += bv[a];
  }
  const MeanQueryMap map =
      BuildMeanQueryMap(c.wq.view(), c.wk.view(), c.wv.view(), bq, bk, bv, {}, {}, 1e-5f);
  std::vector<double> want = MeanOfGroup(c.wq, c.xbar, 8);
  for (int a = 0; a < 8; ++a) want[a] += (bq[a] + bq[8 + a]) / 2.0;
  EXPECT_LT(MaxAbsDiff(map.MeanQuery(cbar, vbar), want), 1e-4 * MaxAbs(want));
}

TEST(MeanQueryMap, QkNormOfOneTokenGivesItsNormedQuery) {
  // Per-head q/k norms: with one cached token of input x and W_k of full column rank, the map
  // sees k = g_k * W_k x / rms(W_k x) and must return the group's mean of g_q * W_q x / rms.
  const int d = 8, width = 6, group = 2;
  std::mt19937_64 rng(7);
  const Mat<float> wq = Gaussian(group * d, width, rng), wk = Gaussian(d, width, rng);
  const Mat<float> gains = Gaussian(2, d, rng), x = Gaussian(1, width, rng);
  std::vector<float> gk(d), gq(d);
  for (int a = 0; a < d; ++a) {
    gk[a] = 1.0f + 0.3f * gains(0, a);
    gq[a] = 1.0f + 0.3f * gains(1, a);
  }
  const std::vector<double> xv(x.Row(0), x.Row(0) + width);
  const float eps = 1e-6f;
  const auto normed = [&](std::vector<double> y, const std::vector<float>& g) {
    double ss = 0;
    for (double t : y) ss += t * t;
    const double s = 1.0 / std::sqrt(ss / y.size() + eps);
    for (size_t a = 0; a < y.size(); ++a) y[a] *= s * g[a];
    return y;
  };
  const std::vector<double> key = normed(Apply(wk, xv), gk);
  std::vector<double> want(d, 0.0);
  for (int g = 0; g < group; ++g) {
    const std::vector<double> q = normed(Apply(wq, xv, int64_t{g} * d, d), gq);
    for (int a = 0; a < d; ++a) want[a] += q[a] / group;
  }
  const MeanQueryMap map = BuildMeanQueryMap(wq.view(), wk.view(), {}, {}, {}, {}, gk, gq, eps);
  EXPECT_EQ(map.in_dim, d);
  EXPECT_LT(MaxAbsDiff(map.MeanQuery(key, {}), want), 1e-4 * MaxAbs(want));
}

// End to end: MeanQueryMapOf on random models whose [W_k; W_v] per KV head is square
// (2 head_dim = d_model), against the mean of the queries the forward pass really formed.
class QueryTap : public ForwardTap {
 public:
  std::vector<std::vector<float>> q;  // per layer, [n, n_heads * d] post-RoPE
  void OnQueries(int layer, std::span<const int32_t>, MatView<const float> x) override {
    if (static_cast<int>(q.size()) <= layer) q.resize(static_cast<size_t>(layer) + 1);
    q[static_cast<size_t>(layer)].assign(x.data, x.data + x.rows * x.stride);
  }
};

void CheckModel(Arch arch, int tokens) {
  RandomModelSpec s = SmallGqaSpec(/*seed=*/1);  // 4 query heads, 2 KV heads of 16
  s.arch = arch;
  s.d_model = 2 * s.head_dim;                        // [W_k; W_v] of a head is square
  if (arch == Arch::kQwen3) s.d_model = s.head_dim;  // keys alone determine the input
  const Model m = WriteAndLoad(s, std::filesystem::temp_directory_path() /
                                      ("primekv_mean_query_" + std::string(ArchName(arch))));
  const ModelConfig& c = m.config();
  std::vector<Token> ids;
  for (int i = 0; i < tokens; ++i) ids.push_back(static_cast<Token>(1 + (i * 37) % 290));
  KvCache cache = m.NewCache({.dtype = KvDType::kF32});
  ThreadPool pool(1);
  ForwardWorkspace ws;
  std::vector<float> logits(static_cast<size_t>(c.vocab_size));
  QueryTap tap;
  ASSERT_TRUE(
      m.Forward(ids, cache, {}, MatView<float>(logits.data(), 1, c.vocab_size), pool, ws, &tap)
          .ok());
  const int d = c.head_dim;
  std::vector<int32_t> back(static_cast<size_t>(tokens));
  for (int i = 0; i < tokens; ++i) back[i] = -i;
  for (int layer = 0; layer < c.n_layers; ++layer) {
    std::vector<float> q = tap.q[static_cast<size_t>(layer)];
    m.ApplyRope(MatView<float>(q.data(), tokens, c.q_width()), c.n_heads, back);
    for (int h = 0; h < c.n_kv_heads; ++h) {
      std::vector<float> keys, values;
      std::vector<int32_t> pos;
      cache.ReadHead(layer, h, &keys, &values, &pos);
      m.ApplyRope(MatView<float>(keys.data(), tokens, d), 1, back);
      std::vector<double> cbar(d, 0.0), vbar(d, 0.0), want(d, 0.0);
      for (int i = 0; i < tokens; ++i)
        for (int a = 0; a < d; ++a) {
          cbar[a] += keys[static_cast<size_t>(i) * d + a] / tokens;
          vbar[a] += values[static_cast<size_t>(i) * d + a] / tokens;
          for (int g = 0; g < c.group(); ++g)
            want[a] += q[static_cast<size_t>(i) * c.q_width() + (h * c.group() + g) * d + a] /
                       (tokens * c.group());
        }
      const std::vector<double> got = MeanQueryMapOf(m, layer, h).MeanQuery(cbar, vbar);
      EXPECT_LT(MaxAbsDiff(got, want), 2e-3 * MaxAbs(want))
          << ArchName(arch) << " layer " << layer << " head " << h;
    }
  }
}

TEST(MeanQueryMap, ModelLlamaMatchesItsQueries) { CheckModel(Arch::kLlama, 24); }
TEST(MeanQueryMap, ModelQwen2WithBiasesMatchesItsQueries) { CheckModel(Arch::kQwen2, 24); }
TEST(MeanQueryMap, ModelQwen3OneTokenMatchesItsNormedQuery) { CheckModel(Arch::kQwen3, 1); }

}  // namespace
}  // namespace primekv
