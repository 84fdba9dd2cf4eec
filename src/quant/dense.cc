#include "primekv/quant/dense.h"

#include <algorithm>
#include <cmath>

// Runtime ISA dispatch through GCC function multi-versioning where it exists.
#if defined(__x86_64__) && !defined(__clang__)
#define PRIMEKV_TARGET_CLONES __attribute__((target_clones("avx512f", "avx2", "default")))
#else
#define PRIMEKV_TARGET_CLONES
#endif

namespace primekv::dense {

namespace {

constexpr int kRows = 4;   // rows of C per register block
constexpr int kCols = 32;  // columns of C per register block (two AVX-512 vectors)

// C[i0:i0+4, j0:j0+32] over all of k: the 4 x 32 accumulators stay in registers, each step
// loads one 32-wide row of B and broadcasts four elements of A. a_row/a_col are A's strides
// along i and along p (NN: lda, 1; TN: 1, lda).
PRIMEKV_TARGET_CLONES void Block(int k, float alpha, const float* a, long a_row, long a_col,
                                 const float* b, int ldb, float beta, float* c, int ldc) {
  float acc[kRows][kCols] = {};
  for (int p = 0; p < k; ++p) {
    const float* bp = b + static_cast<long>(p) * ldb;
    for (int r = 0; r < kRows; ++r) {
      const float s = a[r * a_row + p * a_col];
      for (int j = 0; j < kCols; ++j) acc[r][j] += s * bp[j];
    }
  }
  for (int r = 0; r < kRows; ++r) {
    float* cr = c + static_cast<long>(r) * ldc;
    if (beta == 0.0f) {
      for (int j = 0; j < kCols; ++j) cr[j] = alpha * acc[r][j];
    } else {
      for (int j = 0; j < kCols; ++j) cr[j] = alpha * acc[r][j] + beta * cr[j];
    }
  }
}

// Any leftover rows/columns, one element row at a time.
PRIMEKV_TARGET_CLONES void Edge(int rows, int cols, int k, float alpha, const float* a, long a_row,
                                long a_col, const float* b, int ldb, float beta, float* c,
                                int ldc) {
  for (int r = 0; r < rows; ++r) {
    float* cr = c + static_cast<long>(r) * ldc;
    if (beta == 0.0f) {
      for (int j = 0; j < cols; ++j) cr[j] = 0.0f;
    } else if (beta != 1.0f) {
      for (int j = 0; j < cols; ++j) cr[j] *= beta;
    }
    for (int p = 0; p < k; ++p) {
      const float s = alpha * a[r * a_row + p * a_col];
      const float* bp = b + static_cast<long>(p) * ldb;
      for (int j = 0; j < cols; ++j) cr[j] += s * bp[j];
    }
  }
}

void Gemm(int m, int n, int k, float alpha, const float* a, long a_row, long a_col, const float* b,
          int ldb, float beta, float* c, int ldc) {
  const int m_full = m / kRows * kRows;
  const int n_full = n / kCols * kCols;
  for (int i = 0; i < m_full; i += kRows) {
    for (int j = 0; j < n_full; j += kCols) {
      Block(k, alpha, a + i * a_row, a_row, a_col, b + j, ldb, beta,
            c + static_cast<long>(i) * ldc + j, ldc);
    }
    if (n_full < n) {
      Edge(kRows, n - n_full, k, alpha, a + i * a_row, a_row, a_col, b + n_full, ldb, beta,
           c + static_cast<long>(i) * ldc + n_full, ldc);
    }
  }
  if (m_full < m) {
    Edge(m - m_full, n, k, alpha, a + m_full * a_row, a_row, a_col, b, ldb, beta,
         c + static_cast<long>(m_full) * ldc, ldc);
  }
}

}  // namespace

void GemmNN(int m, int n, int k, float alpha, const float* a, int lda, const float* b, int ldb,
            float beta, float* c, int ldc) {
  Gemm(m, n, k, alpha, a, lda, 1, b, ldb, beta, c, ldc);
}

void GemmTN(int m, int n, int k, float alpha, const float* a, int lda, const float* b, int ldb,
            float beta, float* c, int ldc) {
  Gemm(m, n, k, alpha, a, 1, lda, b, ldb, beta, c, ldc);
}

void Transpose(const float* src, int rows, int cols, int lds, float* dst, int ldd) {
  for (int r = 0; r < rows; ++r)
    for (int c = 0; c < cols; ++c)
      dst[static_cast<long>(c) * ldd + r] = src[static_cast<long>(r) * lds + c];
}

Mat<double> ProductTNDouble(MatView<const float> x, MatView<const float> y, int block_rows) {
  const int m = static_cast<int>(x.cols), n = static_cast<int>(y.cols);
  Mat<double> c(m, n);
  Mat<float> part(m, n);
  for (int64_t r0 = 0; r0 < x.rows; r0 += block_rows) {
    const int rows = static_cast<int>(std::min<int64_t>(block_rows, x.rows - r0));
    GemmTN(m, n, rows, 1.0f, x.Row(r0), static_cast<int>(x.stride), y.Row(r0),
           static_cast<int>(y.stride), 0.0f, part.data(), n);
    for (int a = 0; a < m; ++a)
      for (int b = 0; b < n; ++b) c(a, b) += part(a, b);
  }
  return c;
}

void CholeskyLower(Mat<double>& g, double floor) {
  const int s = static_cast<int>(g.rows());
  for (int j = 0; j < s; ++j) {
    double v = g(j, j);
    for (int k = 0; k < j; ++k) v -= g(j, k) * g(j, k);
    const double ljj = std::sqrt(std::max(v, floor));
    g(j, j) = ljj;
    for (int i = j + 1; i < s; ++i) {
      double t = g(i, j);
      for (int k = 0; k < j; ++k) t -= g(i, k) * g(j, k);
      g(i, j) = t / ljj;
    }
  }
}

}  // namespace primekv::dense
