#include "primekv/dense.h"

#include <algorithm>

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

}  // namespace primekv::dense
