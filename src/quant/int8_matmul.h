// Internal: the integer-dot path of MatMul (quant/int8_gemm.h), called from matmul.cc.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "primekv/util/tensor.h"
#include "primekv/util/thread_pool.h"
#include "quant/int8_gemm.h"

namespace primekv::internal {

// Quantises every row of x (x.cols a multiple of 32) into the given buffers, growing them as
// needed, and describes the result in `out`.
void QuantizeActivations(MatView<const float> x, const quant::internal::Int8Kernels& kernels,
                         std::vector<int8_t>& q, std::vector<float>& d, std::vector<int32_t>& sum,
                         quant::internal::Q8Rows& out, ThreadPool& pool);

// y = x * W^T through `kernels`; false (nothing written) when W's type has no integer path there.
bool MatMulInt8(const WeightView& w, MatView<const float> x, MatView<float> y, ThreadPool& pool,
                const quant::internal::Int8Kernels& kernels);

// y[i] = x * W[i]^T for up to four weights over the same x: x is quantised once and every
// weight's row tiles go through one ParallelFor. Each output has the bits of MatMulInt8 on its
// weight alone. False (nothing written) when a weight has no integer path there.
bool MatMulInt8SameInput(std::span<const WeightView* const> w, MatView<const float> x,
                         std::span<const MatView<float>> y, ThreadPool& pool,
                         const quant::internal::Int8Kernels& kernels);

}  // namespace primekv::internal
