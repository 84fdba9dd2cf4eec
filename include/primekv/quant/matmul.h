// Matrix products against GGUF weights.
#pragma once

#include <cstdint>
#include <span>

#include "primekv/util/tensor.h"
#include "primekv/util/thread_pool.h"

namespace primekv {

// y = x * W^T: x is [n, w.cols], y is [n, w.rows]. Q8_0 and Q4_0 weights are multiplied on
// integer dot products with x quantised to 8-bit blocks (as llama.cpp does; the rounding adds
// at most sum_k |w_k| * max|x|_block / 254 to each output). Other types: for small n a
// bandwidth-bound product over the encoded rows, for larger n a GEMM over dequantised panels.
void MatMul(const WeightView& w, MatView<const float> x, MatView<float> y, ThreadPool& pool);

// y[i] = x * W[i]^T for weights that share their input (q/k/v, gate/up): the same bits as MatMul
// on each. Where all of them take the integer path, x is quantised once and their rows share one
// ParallelFor, so a decode step waits at fewer barriers.
void MatMulSameInput(std::span<const WeightView* const> w, MatView<const float> x,
                     std::span<const MatView<float>> y, ThreadPool& pool);

// Gathers one row (e.g. a token embedding) as floats.
void GetRow(const WeightView& w, int64_t row, float* out);

}  // namespace primekv
