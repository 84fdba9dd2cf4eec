// AVX-512 kernels of the formats of kquants.h: the unpacking of kquants_x86.inc, then the
// kernels of kquants_simd.inc, 16 wide (one vector per group of 16); the int8 dots of Q4_K, Q5_K
// and Q6_K on the packed blocks (kquants_int8_x86.inc). Target pragma and run-time
// choice as kernels_avx512.cc.
#include <cmath>
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

// clang-format off
#include "quant/kquants_simd.inc"
#include "quant/kquants_x86.inc"
#define PRIMEKV_KQUANTS_512
#include "quant/kquants_int8_x86.inc"
// clang-format on
#undef PRIMEKV_KQUANTS_512

}  // namespace
}  // namespace primekv::quant::internal

// clang-format off
#include "quant/kquants_table.inc"
#include "primekv/quant/simd/target_end.inc"
// clang-format on

namespace primekv::quant::internal {

// Outside the target region, like Avx512Kernels(). The weights' quantisation stays scalar.
void AddAvx512BlockKernels(KernelTable& t) {
  AddBlockKernels<simd::Avx512>(t);
  t.q4_k.dot_q8k = DotQ8KOne<K4Avx512<false, false>>;
  t.q4_k.dot_q8k_rows = DotQ8KRows<K4Avx512<false, false>>;
  t.q5_k.dot_q8k = DotQ8KOne<K4Avx512<false, true>>;
  t.q5_k.dot_q8k_rows = DotQ8KRows<K4Avx512<false, true>>;
  t.q6_k.dot_q8k = DotQ8KOne<K6Avx512<false>>;
  t.q6_k.dot_q8k_rows = DotQ8KRows<K6Avx512<false>>;
  t.iq4_xs.dot_q8k = DotQ8KOne<Iq4XsAvx512<false>>;
  t.iq4_xs.dot_q8k_rows = DotQ8KRows<Iq4XsAvx512<false>>;
  t.quantize_q8k = QuantizeQ8KAvx512;
}

}  // namespace primekv::quant::internal

#endif  // x86-64
