// AVX2 + FMA kernels of the formats of kquants.h: SIMD unpacking (kquants_x86.inc), then the
// kernels of kquants_simd.inc, 8 wide, on the unpacked form, and the packed-form int8 dots of
// Q4_K and Q6_K (kquants_int8_x86.inc). Target
// pragma and run-time choice as kernels_avx2.cc.
#include <cmath>
#include <cstdint>
#include <cstring>

#include "quant/kquants.h"

#if defined(__x86_64__)
#include <immintrin.h>

// clang-format off
#include "primekv/quant/simd/target_avx2_begin.inc"
#include "primekv/quant/simd/simd_avx2.inc"
// clang-format on

namespace primekv::quant::internal {
namespace {

// clang-format off
#include "quant/kquants_simd.inc"
#include "quant/kquants_x86.inc"
#include "quant/kquants_int8_x86.inc"
// clang-format on

}  // namespace
}  // namespace primekv::quant::internal

// clang-format off
#include "quant/kquants_table.inc"
#include "primekv/quant/simd/target_end.inc"
// clang-format on

namespace primekv::quant::internal {

// Outside the target region, like Avx2Kernels(). The weights' quantisation stays scalar.
void AddAvx2BlockKernels(KernelTable& t) {
  AddBlockKernels<simd::Avx2>(t);
  t.q4_k.dot_q8k = DotQ8KOne<K4Avx2<false>>;
  t.q4_k.dot_q8k_rows = DotQ8KRows<K4Avx2<false>>;
  t.q5_k.dot_q8k = DotQ8KOne<K4Avx2<true>>;
  t.q5_k.dot_q8k_rows = DotQ8KRows<K4Avx2<true>>;
  t.q6_k.dot_q8k = DotQ8KOne<K6Avx2>;
  t.q6_k.dot_q8k_rows = DotQ8KRows<K6Avx2>;
  t.iq4_xs.dot_q8k = DotQ8KOne<Iq4XsAvx2>;
  t.iq4_xs.dot_q8k_rows = DotQ8KRows<Iq4XsAvx2>;
  t.quantize_q8k = QuantizeQ8KAvx2;
}

// For the kernel tests: this table's unpacker of `type`'s quants.
QuantsFn Avx2Quants(GgmlType type) {
  KernelTable unused;
  QuantsFn found = nullptr;
  ForEachBlockFormat(unused, [&]<QuantsFn kQ, KBlock, GgmlType kT, UnpackFn>(TypeKernels&) {
    if (kT == type) found = kQ;
  });
  return found;
}

}  // namespace primekv::quant::internal

#endif  // x86-64
