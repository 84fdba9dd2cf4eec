// The dense float helpers (GemmNN, GemmTN, Transpose) against a naive triple loop in double.
// Shapes straddle the 4 x 32 register block so that full blocks and both edge paths run, with
// leading dimensions wider than the matrices (the padding must stay untouched).
#include "primekv/quant/dense.h"

#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <random>
#include <utility>
#include <vector>

namespace primekv {
namespace {

constexpr float kPad = 12345.0f;  // marks elements outside a matrix

std::vector<float> Random(std::mt19937_64& rng, size_t n) {
  std::uniform_real_distribution<float> u(-1.0f, 1.0f);
  std::vector<float> v(n);
  for (float& f : v) f = u(rng);
  return v;
}

struct GemmCase {
  int m, n, k;
  float alpha, beta;
};

// C = alpha * op(A) * B + beta * C with op(A)[i][p] = A[i * lda + p] (NN) or A[p * lda + i] (TN),
// checked element-wise against a double-precision sum with a bound on float rounding:
// (k + 2) unit roundoffs of the magnitudes involved, doubled for slack.
void CheckGemm(const GemmCase& t, bool transposed_a) {
  SCOPED_TRACE(::testing::Message() << (transposed_a ? "TN" : "NN") << " m=" << t.m << " n=" << t.n
                                    << " k=" << t.k << " beta=" << t.beta);
  std::mt19937_64 rng(static_cast<uint64_t>(t.m * 10007 + t.n * 101 + t.k));
  const int lda = (transposed_a ? t.m : t.k) + 3, ldb = t.n + 5, ldc = t.n + 2;
  const int a_rows = transposed_a ? t.k : t.m;
  const std::vector<float> a = Random(rng, static_cast<size_t>(a_rows) * lda + 1);
  const std::vector<float> b = Random(rng, static_cast<size_t>(t.k) * ldb + 1);
  std::vector<float> c = Random(rng, static_cast<size_t>(t.m) * ldc);
  for (int i = 0; i < t.m; ++i) {
    for (int j = t.n; j < ldc; ++j) c[static_cast<size_t>(i) * ldc + j] = kPad;
    // beta = 0 must ignore what C held, even NaN.
    if (t.beta == 0.0f && t.n > 0) c[static_cast<size_t>(i) * ldc] = std::nanf("");
  }
  const std::vector<float> c0 = c;
  if (transposed_a) {
    dense::GemmTN(t.m, t.n, t.k, t.alpha, a.data(), lda, b.data(), ldb, t.beta, c.data(), ldc);
  } else {
    dense::GemmNN(t.m, t.n, t.k, t.alpha, a.data(), lda, b.data(), ldb, t.beta, c.data(), ldc);
  }
  constexpr double kUnit = std::numeric_limits<float>::epsilon() / 2;
  for (int i = 0; i < t.m; ++i) {
    for (int j = 0; j < ldc; ++j) {
      const size_t ij = static_cast<size_t>(i) * ldc + j;
      if (j >= t.n) {
        ASSERT_EQ(c[ij], kPad) << "padding at " << i << "," << j;
        continue;
      }
      double sum = 0.0, magnitude = 0.0;
      for (int p = 0; p < t.k; ++p) {
        const double aip = transposed_a ? a[static_cast<size_t>(p) * lda + i]
                                        : a[static_cast<size_t>(i) * lda + p];
        const double bpj = b[static_cast<size_t>(p) * ldb + j];
        sum += aip * bpj;
        magnitude += std::fabs(aip * bpj);
      }
      const double old = t.beta == 0.0f ? 0.0 : double{c0[ij]};
      const double want = t.alpha * sum + t.beta * old;
      const double bound =
          2.0 * (t.k + 2) * kUnit * (std::fabs(t.alpha) * magnitude + std::fabs(t.beta * old));
      ASSERT_NEAR(c[ij], want, bound + 1e-30) << "at " << i << "," << j;
    }
  }
}

const GemmCase kCases[] = {
    {4, 32, 16, 1.0f, 0.0f},    // one full block
    {8, 64, 37, 0.5f, 0.0f},    // several full blocks
    {9, 70, 23, 1.0f, 1.0f},    // full blocks with edge rows and edge columns, accumulate
    {3, 5, 11, -2.0f, 0.25f},   // edges only, general beta
    {5, 33, 1, 1.5f, 0.0f},     // k = 1
    {6, 40, 0, 1.0f, 0.5f},     // k = 0: C = beta * C
    {13, 96, 130, 0.1f, 1.0f},  // longer sums
};

TEST(DenseTest, GemmNNMatchesDoubleReference) {
  for (const GemmCase& t : kCases) CheckGemm(t, /*transposed_a=*/false);
}

TEST(DenseTest, GemmTNMatchesDoubleReference) {
  for (const GemmCase& t : kCases) CheckGemm(t, /*transposed_a=*/true);
}

TEST(DenseTest, TransposeMovesEveryElementAndNothingElse) {
  std::mt19937_64 rng(3);
  const std::pair<int, int> shapes[] = {{1, 1}, {3, 7}, {16, 33}, {40, 9}};
  for (auto [rows, cols] : shapes) {
    const int lds = cols + 2, ldd = rows + 4;
    const std::vector<float> src = Random(rng, static_cast<size_t>(rows) * lds);
    std::vector<float> dst(static_cast<size_t>(cols) * ldd, kPad);
    dense::Transpose(src.data(), rows, cols, lds, dst.data(), ldd);
    for (int c = 0; c < cols; ++c) {
      for (int r = 0; r < ldd; ++r) {
        const float got = dst[static_cast<size_t>(c) * ldd + r];
        const float want = r < rows ? src[static_cast<size_t>(r) * lds + c] : kPad;
        ASSERT_EQ(got, want) << rows << "x" << cols << " at " << c << "," << r;
      }
    }
  }
}

}  // namespace
}  // namespace primekv
