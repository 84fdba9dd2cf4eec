// Internal: the tuning knobs of MatMul, exposed so the benchmark can sweep them.
#pragma once

#include <cstdint>

#include "primekv/util/tensor.h"
#include "primekv/util/thread_pool.h"
#include "quant/int8_gemm.h"
#include "quant/kernels.h"

namespace primekv::internal {

// Defaults measured with bench/bm_quant.cc (BM_SmallBatch, BM_GemmTiling) on the 2-core machines:
// dots win below n = 6 and the GEMM from n = 8 (about even at 6); panel sizes from 48 x 256 to
// 192 x 2048 were within noise of each other.
struct MatMulTiling {
  int64_t small_batch = 6;    // n below this: one dot per (token, row), no GEMM
  int64_t panel_rows = 96;    // most weight rows per panel (one task; rounded to whole tiles)
  int64_t panel_cols = 512;   // columns (K) per dequantised chunk; bounds the per-thread scratch
  int64_t token_block = 512;  // tokens packed at a time; bounds the per-thread accumulators
  bool use_blas = false;      // cblas_sgemm per panel instead of the built-in kernel (for A/B)
  const quant::internal::KernelTable* kernels = nullptr;  // null: the best for this CPU
  // Small n with a 256-element block format: round the activations to 8 bits once per call and
  // use integer dot products (as llama.cpp does); false: float dots (for A/B and tests).
  bool int8_activations = true;
  // Integer dot products on 8-bit activations for the weight types this table covers
  // (quant/int8_gemm.h); null: float kernels only. MatMul passes the best for this CPU.
  const quant::internal::Int8Kernels* int8 = nullptr;
};

void MatMulTiled(const WeightView& w, MatView<const float> x, MatView<float> y, ThreadPool& pool,
                 const MatMulTiling& tiling);

}  // namespace primekv::internal
