// Matrix products against GGUF weights.
#pragma once

#include <cstdint>

#include "primekv/tensor.h"
#include "primekv/thread_pool.h"

namespace primekv {

// y = x * W^T: x is [n, w.cols], y is [n, w.rows]. For n == 1 this is a bandwidth-bound
// matrix-vector product over the encoded rows; for larger n the weights are dequantised in
// row panels and multiplied with a GEMM.
void MatMul(const WeightView& w, MatView<const float> x, MatView<float> y, ThreadPool& pool);

// Gathers one row (e.g. a token embedding) as floats.
void GetRow(const WeightView& w, int64_t row, float* out);

}  // namespace primekv
