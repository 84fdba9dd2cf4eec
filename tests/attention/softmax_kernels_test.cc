// The attention softmax kernels: ExpApprox against libm, and each ISA's table against the
// scalar twin. Tables this CPU cannot run are reported as skipped.
#include "primekv/attention/softmax_kernels.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <random>
#include <string>
#include <vector>

namespace primekv::attention_internal {
namespace {

TEST(ExpApprox, WithinThreeTenthsOfAMillionthOfLibm) {
  double worst = 0;
  for (float x = -86.0f; x <= 20.0f; x += 0.00137f) {
    const double want = std::exp(static_cast<double>(x));
    const double rel = std::fabs(ExpApprox(x) - want) / want;
    worst = std::max(worst, rel);
    ASSERT_LT(rel, 3e-7) << "x=" << x;
  }
  EXPECT_GT(worst, 0.0);  // it is an approximation: a zero error everywhere would be suspicious
  EXPECT_EQ(ExpApprox(0.0f), 1.0f);
  EXPECT_EQ(ExpApprox(-87.0f), 0.0f);
  EXPECT_EQ(ExpApprox(-INFINITY), 0.0f);
}

TEST(SoftmaxKernels, EveryTableMatchesScalar) {
  std::mt19937 rng(5);
  std::normal_distribution<float> dist(0.0f, 4.0f);
  std::vector<std::string> skipped;
  const SoftmaxKernels& ref = ScalarSoftmax();
  for (const SoftmaxKernels* k : {Avx2Softmax(), Avx512Softmax()}) {
    if (k == nullptr) continue;
    if (!CpuRunsSoftmax(*k)) {
      skipped.push_back(k->isa);
      continue;
    }
    for (int n : {1, 7, 8, 15, 16, 17, 32, 33, 100}) {
      std::vector<float> s(n);
      for (auto& v : s) v = dist(rng);
      const std::string what = std::string(k->isa) + " n=" + std::to_string(n);
      EXPECT_EQ(k->row_max(s.data(), n, -INFINITY), ref.row_max(s.data(), n, -INFINITY)) << what;
      EXPECT_EQ(k->row_max(s.data(), n, 100.0f), 100.0f) << what;
      const float m = ref.row_max(s.data(), n, -INFINITY);
      std::vector<float> a = s, b = s;
      const float sa = k->exp_sum(a.data(), n, m);
      const float sb = ref.exp_sum(b.data(), n, m);
      for (int j = 0; j < n; ++j) {
        ASSERT_NEAR(a[j], b[j], 3e-7f * b[j] + 1e-38f) << what << " j=" << j;
        const float x = s[j] - m;  // the kernels subtract in float too
        ASSERT_NEAR(a[j], std::exp(static_cast<double>(x)), 4e-7 * a[j]) << what;
      }
      EXPECT_NEAR(sa, sb, 2e-6f * sb) << what;
      std::vector<float> c = s, e = s;
      k->scale(c.data(), n, 0.37f);
      ref.scale(e.data(), n, 0.37f);
      EXPECT_EQ(c, e) << what;
    }
  }
  // Scores against the double sum (the scalar twin included).
  std::vector<const SoftmaxKernels*> all = {&ScalarSoftmax()};
  for (const SoftmaxKernels* k : {Avx2Softmax(), Avx512Softmax()})
    if (k != nullptr && CpuRunsSoftmax(*k)) all.push_back(k);
  for (const SoftmaxKernels* k : all) {
    for (int d : {64, 128, 40}) {
      for (int rows : {1, 4, 8}) {
        for (int count : {1, 15, 16, 17, 32}) {
          std::vector<float> q(rows * d), kk(count * d);
          for (auto& v : q) v = dist(rng);
          for (auto& v : kk) v = dist(rng);
          const int lds = count + 3;
          std::vector<float> s(rows * lds, -7.0f);
          k->scores(q.data(), rows, kk.data(), count, d, 0.125f, s.data(), lds);
          for (int r = 0; r < rows; ++r) {
            for (int j = 0; j < lds; ++j) {
              const std::string what = std::string(k->isa) + " d=" + std::to_string(d) +
                                       " rows=" + std::to_string(rows) +
                                       " count=" + std::to_string(count) +
                                       " r=" + std::to_string(r) + " j=" + std::to_string(j);
              if (j >= count) {
                ASSERT_EQ(s[r * lds + j], -7.0f) << what << ": wrote past count";
                continue;
              }
              double exact = 0, mag = 0;
              for (int c = 0; c < d; ++c) {
                exact += double{q[r * d + c]} * kk[j * d + c];
                mag += std::fabs(double{q[r * d + c]} * kk[j * d + c]);
              }
              ASSERT_NEAR(s[r * lds + j], 0.125 * exact, 0.125 * (d + 2) * 1.2e-7 * mag) << what;
            }
          }
        }
      }
    }
  }
  if (!skipped.empty()) {
    std::string names;
    for (const auto& n : skipped) names += n + " ";
    GTEST_SKIP() << "not run on this CPU: " << names;
  }
}

}  // namespace
}  // namespace primekv::attention_internal
