#include "primekv/dense.h"

// Runtime ISA dispatch through GCC function multi-versioning where it exists.
#if defined(__x86_64__) && !defined(__clang__)
#define PRIMEKV_TARGET_CLONES __attribute__((target_clones("avx512f", "avx2", "default")))
#else
#define PRIMEKV_TARGET_CLONES
#endif

namespace primekv::dense {

namespace {

// One row of C: c[j] = beta * c[j], then += alpha * a_p * b_p[j] over p.
PRIMEKV_TARGET_CLONES void RowUpdate(
    int n, int k, float alpha, const float* a, int a_step, const float* b, int ldb, float beta, float* c) {
  if (beta == 0.0f) {
    for (int j = 0; j < n; ++j) c[j] = 0.0f;
  } else if (beta != 1.0f) {
    for (int j = 0; j < n; ++j) c[j] *= beta;
  }
  for (int p = 0; p < k; ++p) {
    const float s = alpha * a[static_cast<long>(p) * a_step];
    const float* bp = b + static_cast<long>(p) * ldb;
    for (int j = 0; j < n; ++j) c[j] += s * bp[j];
  }
}

}  // namespace

void GemmNN(int m, int n, int k, float alpha, const float* a, int lda, const float* b, int ldb,
            float beta, float* c, int ldc) {
  for (int i = 0; i < m; ++i) {
    RowUpdate(n, k, alpha, a + static_cast<long>(i) * lda, 1, b, ldb, beta, c + static_cast<long>(i) * ldc);
  }
}

void GemmTN(int m, int n, int k, float alpha, const float* a, int lda, const float* b, int ldb,
            float beta, float* c, int ldc) {
  for (int i = 0; i < m; ++i) {
    RowUpdate(n, k, alpha, a + i, lda, b, ldb, beta, c + static_cast<long>(i) * ldc);
  }
}

void Transpose(const float* src, int rows, int cols, int lds, float* dst, int ldd) {
  for (int r = 0; r < rows; ++r)
    for (int c = 0; c < cols; ++c) dst[static_cast<long>(c) * ldd + r] = src[static_cast<long>(r) * lds + c];
}

}  // namespace primekv::dense
