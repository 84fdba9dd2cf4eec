// The streaming kernel against a two-pass double reference, and design.md §1's exact
// perturbation identity for removed sets: o(-S) = o + D_S.
#include "primekv/attention/attention.h"

#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <numeric>
#include <random>
#include <vector>

namespace primekv {
namespace {

struct Case {
  int n_heads, n_kv_heads, head_dim, n_ctx, n_new, page;
  KvDType dtype;
};

std::vector<float> Random(size_t n, std::mt19937& rng, float scale = 1.0f) {
  std::normal_distribution<float> dist(0.0f, scale);
  std::vector<float> v(n);
  for (auto& x : v) x = dist(rng);
  return v;
}

TEST(AttendCached, MatchesReferenceAcrossShapes) {
  const Case cases[] = {
      {4, 4, 8, 0, 5, 4, KvDType::kF32},      {8, 2, 64, 100, 1, 32, KvDType::kF32},
      {8, 2, 64, 0, 77, 32, KvDType::kF32},   {4, 1, 128, 300, 40, 16, KvDType::kF16},
      {6, 3, 16, 31, 33, 8, KvDType::kF16},   {8, 2, 64, 5, 70, 32, KvDType::kQ8_0},
      {4, 1, 128, 40, 1, 16, KvDType::kQ8_0}, {2, 2, 64, 1000, 1, 32, KvDType::kF32},
  };
  ThreadPool pool(2);
  for (const Case& c : cases) {
    SCOPED_TRACE(::testing::Message()
                 << "heads " << c.n_heads << "/" << c.n_kv_heads << " d " << c.head_dim << " ctx "
                 << c.n_ctx << " new " << c.n_new << " page " << c.page);
    std::mt19937 rng(c.n_ctx * 31 + c.head_dim);
    const int kw = c.n_kv_heads * c.head_dim, qw = c.n_heads * c.head_dim;
    const int total = c.n_ctx + c.n_new;
    auto k = Random(static_cast<size_t>(total) * kw, rng),
         v = Random(static_cast<size_t>(total) * kw, rng);
    std::vector<int32_t> pos(total);
    std::iota(pos.begin(), pos.end(), 0);
    auto q = Random(static_cast<size_t>(c.n_new) * qw, rng);
    std::span<const int32_t> qpos(pos.data() + c.n_ctx, static_cast<size_t>(c.n_new));
    // The context in its own cache, ragged heads (a different pseudo-random subset of it dropped
    // from each), then the new rows; with `shared` they go to a share of the context's cache,
    // so a partly filled page another cache holds sits inside the share's page table.
    for (bool shared : {false, true}) {
      SCOPED_TRACE(shared ? "shared context" : "one cache");
      KvCache context(1, c.n_kv_heads, c.head_dim, {c.dtype, c.page, 0});
      if (c.n_ctx > 0) {
        ASSERT_TRUE(context
                        .Append(0, {k.data(), c.n_ctx, kw}, {v.data(), c.n_ctx, kw},
                                std::span<const int32_t>(pos.data(), static_cast<size_t>(c.n_ctx)))
                        .ok());
        for (int h = 0; h < c.n_kv_heads; ++h) {
          std::vector<int32_t> keep;
          for (int i = 0; i < c.n_ctx; ++i)
            if ((i * 7 + h * 3) % 5 != 0) keep.push_back(i);
          context.Retain(0, h, keep);
        }
      }
      KvCache cache = shared ? context.Share() : std::move(context);
      const size_t at = static_cast<size_t>(c.n_ctx) * kw;
      ASSERT_TRUE(
          cache.Append(0, {k.data() + at, c.n_new, kw}, {v.data() + at, c.n_new, kw}, qpos).ok());
      std::vector<float> fast(q.size()), ref(q.size());
      const AttnShape shape{c.n_heads, c.n_kv_heads, c.head_dim,
                            1.0f / std::sqrt(static_cast<float>(c.head_dim))};
      AttentionWorkspace ws;
      AttendCached(shape, {q.data(), c.n_new, qw}, qpos, cache, 0, {fast.data(), c.n_new, qw}, pool,
                   ws);
      AttendReference(shape, {q.data(), c.n_new, qw}, qpos, cache, 0, {ref.data(), c.n_new, qw});
      double max_err = 0, max_ref = 0;
      for (size_t i = 0; i < q.size(); ++i) {
        max_err = std::max(max_err, static_cast<double>(std::abs(fast[i] - ref[i])));
        max_ref = std::max(max_ref, static_cast<double>(std::abs(ref[i])));
      }
      EXPECT_LT(max_err, 1e-5 * std::max(1.0, max_ref));
    }
  }
}

// design.md §1: removing a set S from one head changes its output by exactly
// D_S = 1/(1 - A_S) * sum_{i in S} a_i (o - v_i).
TEST(AttendCached, RemovedSetPerturbationIdentity) {
  ThreadPool pool(2);
  for (int d : {64, 128}) {
    for (int n : {16, 257, 4096}) {
      SCOPED_TRACE(::testing::Message() << "d " << d << " n " << n);
      std::mt19937 rng(n + d);
      KvCache full(1, 1, d, {KvDType::kF32, 32, 0});
      auto k = Random(static_cast<size_t>(n) * d, rng, 0.5f),
           v = Random(static_cast<size_t>(n) * d, rng);
      std::vector<int32_t> pos(n);
      std::iota(pos.begin(), pos.end(), 0);
      ASSERT_TRUE(full.Append(0, {k.data(), n, d}, {v.data(), n, d}, pos).ok());
      auto q = Random(static_cast<size_t>(d), rng);
      const int32_t qpos = n;  // sees every entry
      const float scale = 1.0f / std::sqrt(static_cast<float>(d));
      // Exact attention weights a_j and output o in double.
      std::vector<double> a(n);
      double mx = -1e300, sum = 0;
      for (int j = 0; j < n; ++j) {
        double s = 0;
        for (int c = 0; c < d; ++c)
          s += static_cast<double>(q[c]) * k[static_cast<size_t>(j) * d + c];
        a[j] = s * scale;
        mx = std::max(mx, a[j]);
      }
      for (auto& x : a) sum += (x = std::exp(x - mx));
      for (auto& x : a) x /= sum;
      std::vector<double> o(d, 0.0);
      for (int j = 0; j < n; ++j)
        for (int c = 0; c < d; ++c) o[c] += a[j] * v[static_cast<size_t>(j) * d + c];
      // Remove every third entry.
      std::vector<int32_t> keep;
      double a_s = 0;
      std::vector<double> delta(d, 0.0);
      for (int j = 0; j < n; ++j) {
        if (j % 3 == 1) {
          a_s += a[j];
          for (int c = 0; c < d; ++c) delta[c] += a[j] * (o[c] - v[static_cast<size_t>(j) * d + c]);
        } else {
          keep.push_back(j);
        }
      }
      KvCache pruned = full.Clone();
      pruned.Retain(0, 0, keep);
      std::vector<float> out(d);
      AttentionWorkspace ws;
      const AttnShape shape{1, 1, d, scale};
      AttendCached(shape, {q.data(), 1, d}, std::span<const int32_t>(&qpos, 1), pruned, 0,
                   {out.data(), 1, d}, pool, ws);
      double err = 0, norm = 0;
      for (int c = 0; c < d; ++c) {
        const double expected = o[c] + delta[c] / (1.0 - a_s);
        err = std::max(err, std::abs(out[c] - expected));
        norm = std::max(norm, std::abs(expected));
      }
      EXPECT_LT(err, 1e-5 * std::max(norm, 1e-3)) << "A_S = " << a_s;
    }
  }
}

TEST(AttendCached, ScratchDoesNotGrowWithContext) {
  ThreadPool pool(2);
  const int d = 64, heads = 4, kvh = 2;
  const AttnShape shape{heads, kvh, d, 0.125f};
  size_t first = 0;
  for (int n : {256, 4096}) {
    std::mt19937 rng(n);
    KvCache cache(1, kvh, d, {KvDType::kF16, 32, 0});
    auto k = Random(static_cast<size_t>(n) * kvh * d, rng);
    std::vector<int32_t> pos(n);
    std::iota(pos.begin(), pos.end(), 0);
    ASSERT_TRUE(cache.Append(0, {k.data(), n, kvh * d}, {k.data(), n, kvh * d}, pos).ok());
    auto q = Random(static_cast<size_t>(n) * heads * d, rng);
    std::vector<float> out(q.size());
    AttentionWorkspace ws;
    AttendCached(shape, {q.data(), n, heads * d}, pos, cache, 0, {out.data(), n, heads * d}, pool,
                 ws);
    if (first == 0) first = ws.HighWaterBytes();
    EXPECT_EQ(ws.HighWaterBytes(), first) << "scratch must depend on tile sizes only";
  }
}

// A NaN or infinite query, or a product beyond float, has no softmax: AttendCached says so
// instead of weighing the row's scores as zero.
TEST(AttendCached, ReportsNonFiniteScores) {
  ThreadPool pool(2);
  const int d = 32, heads = 2, kvh = 1, n = 40;
  const AttnShape shape{heads, kvh, d, 1.0f / std::sqrt(static_cast<float>(d))};
  std::mt19937 rng(3);
  KvCache cache(1, kvh, d, {KvDType::kF32, 16, 0});
  auto k = Random(static_cast<size_t>(n) * kvh * d, rng);
  std::vector<int32_t> pos(n);
  std::iota(pos.begin(), pos.end(), 0);
  ASSERT_TRUE(cache.Append(0, {k.data(), n, kvh * d}, {k.data(), n, kvh * d}, pos).ok());
  std::vector<float> out(static_cast<size_t>(n) * heads * d);
  AttentionWorkspace ws;
  const auto attend = [&](std::vector<float>& q) {
    return AttendCached(shape, {q.data(), n, heads * d}, pos, cache, 0, {out.data(), n, heads * d},
                        pool, ws);
  };
  auto q = Random(out.size(), rng);
  EXPECT_TRUE(attend(q));
  for (float bad : {std::nanf(""), std::numeric_limits<float>::infinity()}) {
    // One element of the last token's second head: every score of that row is non-finite.
    auto broken = q;
    broken[static_cast<size_t>(n - 1) * heads * d + d + 3] = bad;
    EXPECT_FALSE(attend(broken)) << bad;
  }
  // Finite queries whose dot products with the keys overflow float.
  std::vector<float> huge(q.size(), 3e38f);
  EXPECT_FALSE(attend(huge));
}

}  // namespace
}  // namespace primekv
