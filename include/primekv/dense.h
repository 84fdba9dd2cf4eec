// Small single-threaded float matrix products for kernels that tile their own work (attention
// tiles, press scoring). Row-major; each inner loop runs over contiguous output columns so it
// vectorises without reassociating sums, and the ISA is chosen at run time.
#pragma once

namespace primekv::dense {

// C[m, n] = alpha * A[m, k] * B[k, n] + beta * C
void GemmNN(int m, int n, int k, float alpha, const float* a, int lda, const float* b, int ldb,
            float beta, float* c, int ldc);
// C[m, n] = alpha * A[k, m]^T * B[k, n] + beta * C
void GemmTN(int m, int n, int k, float alpha, const float* a, int lda, const float* b, int ldb,
            float beta, float* c, int ldc);
// dst[cols, rows] = src[rows, cols]^T
void Transpose(const float* src, int rows, int cols, int lds, float* dst, int ldd);

}  // namespace primekv::dense
