// AVX-512 kernels of the formats of kquants.h: the unpacking of kquants_x86.inc, then the
// kernels of kquants_simd.inc, 16 wide (one vector per group of 16). Target pragma and run-time
// choice as kernels_avx512.cc.
#include <cstdint>
#include <cstring>

#include "quant/kquants.h"

#if defined(__x86_64__)
#include <immintrin.h>

// clang-format off
#include "primekv/quant/simd/target_avx512_begin.inc"
#include "primekv/quant/simd/simd_avx512.inc"
// clang-format on

namespace primekv::quant::internal {
namespace {

#include "quant/kquants_simd.inc"
#include "quant/kquants_x86.inc"

}  // namespace
}  // namespace primekv::quant::internal

#include "quant/kquants_table.inc"
#include "primekv/quant/simd/target_end.inc"

namespace primekv::quant::internal {

// Outside the target region, like Avx512Kernels(). Quantisation stays scalar.
void AddAvx512BlockKernels(KernelTable& t) {
  // Q4_K's int8 dot stays the AVX2 one this table was copied from: unpacked in registers, it
  // measured faster than 512-bit versions (19.7 against 16.0 GB/s in cache, bm_quant
  // DotRowQ8K, Zen 5), which spend more on assembling two sub-blocks per vector.
  const DotQ8KFn q4_k_int8 = t.q4_k.dot_q8k;
  AddBlockKernels<simd::Avx512>(t);
  t.q4_k.dot_q8k = q4_k_int8;
}

}  // namespace primekv::quant::internal

#endif  // x86-64
