// Small single-threaded float matrix products for kernels that tile their own work (attention
// tiles, press scoring). Row-major; each inner loop runs over contiguous output columns so it
// vectorises without reassociating sums, and the ISA is chosen at run time.
#pragma once

#include "primekv/util/mat.h"

namespace primekv::dense {

// C[m, n] = alpha * A[m, k] * B[k, n] + beta * C
void GemmNN(int m, int n, int k, float alpha, const float* a, int lda, const float* b, int ldb,
            float beta, float* c, int ldc);
// C[m, n] = alpha * A[k, m]^T * B[k, n] + beta * C
void GemmTN(int m, int n, int k, float alpha, const float* a, int lda, const float* b, int ldb,
            float beta, float* c, int ldc);
// dst[cols, rows] = src[rows, cols]^T
void Transpose(const float* src, int rows, int cols, int lds, float* dst, int ldd);

// X^T Y [m, n] in double for X [k, m], Y [k, n]: float products of `block_rows` rows at a time,
// summed in double (Gram matrices of keys and of weight rows).
Mat<double> ProductTNDouble(MatView<const float> x, MatView<const float> y, int block_rows);
// Lower Cholesky factor of a symmetric g, in place (the upper triangle is left as it was); each
// pivot is floored at `floor`, so rank-deficient matrices still factor.
void CholeskyLower(Mat<double>& g, double floor);

}  // namespace primekv::dense
