// The attention softmax kernels: ExpApprox against libm, and each ISA's table against the
// scalar twin. Tables this CPU cannot run are reported as skipped.
#include "primekv/attention/softmax_kernels.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <random>
#include <string>
#include <vector>

#include "primekv/quant/quant.h"

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

// The decode kernels over an f16 page (scores and P V), against double sums over the same halves
// widened exactly: every table that has them (the scalar twin included), every tail of rows,
// keys and columns, nothing written outside the output.
TEST(SoftmaxKernels, F16DecodeKernelsMatchDoubleSums) {
  std::mt19937 rng(11);
  std::normal_distribution<float> dist(0.0f, 2.0f);
  std::vector<const SoftmaxKernels*> all = {&ScalarSoftmax()};
  for (const SoftmaxKernels* k : {Avx2Softmax(), Avx512Softmax()})
    if (k != nullptr && CpuRunsSoftmax(*k) && k->scores_f16 != nullptr) all.push_back(k);
  ASSERT_NE(ScalarSoftmax().scores_f16, nullptr);
  for (const SoftmaxKernels* k : all) {
    for (int d : {64, 128, 96, 48, 40}) {
      for (int rows : {1, 3, 4, 5, 8}) {
        for (int count : {1, 3, 4, 5, 16, 17, 63}) {
          const std::string what = std::string(k->isa) + " d=" + std::to_string(d) +
                                   " rows=" + std::to_string(rows) +
                                   " count=" + std::to_string(count);
          std::vector<float> q(rows * d);
          for (auto& v : q) v = dist(rng);
          std::vector<uint16_t> kh(count * d), vh(count * d);
          for (auto& h : kh) h = quant::F32ToF16(dist(rng));
          for (auto& h : vh) h = quant::F32ToF16(dist(rng));
          const int lds = count + 3;
          std::vector<float> s(rows * lds, -7.0f);
          k->scores_f16(q.data(), rows, kh.data(), count, d, 0.125f, s.data(), lds);
          for (int r = 0; r < rows; ++r) {
            for (int j = 0; j < lds; ++j) {
              if (j >= count) {
                ASSERT_EQ(s[r * lds + j], -7.0f) << what << ": wrote past count";
                continue;
              }
              double exact = 0, mag = 0;
              for (int c = 0; c < d; ++c) {
                const double x = double{q[r * d + c]} * quant::F16ToF32(kh[j * d + c]);
                exact += x;
                mag += std::fabs(x);
              }
              ASSERT_NEAR(s[r * lds + j], 0.125 * exact, 0.125 * (d + 2) * 1.2e-7 * mag)
                  << what << " r=" << r << " j=" << j;
            }
          }
          // acc += P V, with P the scores' layout (ldp = lds) and a non-zero accumulator.
          std::vector<float> p(rows * lds), acc(rows * d + 5, 0.0f);
          for (auto& v : p) v = std::fabs(dist(rng));
          for (int i = 0; i < rows * d; ++i) acc[i] = dist(rng);
          const std::vector<float> start = acc;
          for (int i = rows * d; i < rows * d + 5; ++i) acc[i] = -9.0f;
          k->pv_f16(p.data(), rows, lds, vh.data(), count, d, acc.data());
          for (int i = rows * d; i < rows * d + 5; ++i)
            ASSERT_EQ(acc[i], -9.0f) << what << ": wrote past the accumulator";
          for (int r = 0; r < rows; ++r) {
            for (int c = 0; c < d; ++c) {
              double exact = start[r * d + c], mag = std::fabs(exact);
              for (int j = 0; j < count; ++j) {
                const double x = double{p[r * lds + j]} * quant::F16ToF32(vh[j * d + c]);
                exact += x;
                mag += std::fabs(x);
              }
              ASSERT_NEAR(acc[r * d + c], exact, (count + 2) * 1.2e-7 * mag)
                  << what << " r=" << r << " c=" << c;
            }
          }
        }
      }
    }
  }
  if (all.size() == 1) GTEST_SKIP() << "only the scalar twin runs on this CPU";
}

}  // namespace
}  // namespace primekv::attention_internal
