// The AVX-512 VNNI table: the AVX-512 table with the int8-activation dot products of the
// 256-element formats done by vpdpbusd (one instruction for maddubs + madd), and those of Q4_K,
// Q5_K and Q6_K by vpdpwssd on the packed blocks (kquants_int8_x86.inc). A separate file so that
// nothing else is compiled with the VNNI target.
#include <cmath>
#include <cstdint>
#include <cstring>

#include "quant/kquants.h"

#if defined(__x86_64__)
#include <immintrin.h>

// clang-format off
#include "primekv/quant/simd/target_avx512vnni_begin.inc"
#include "primekv/quant/simd/simd_avx512.inc"
// clang-format on

// Only the 256-element formats' unpackers of the shared file are used here.
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wunused-function"

namespace primekv::quant::internal {
namespace {

// clang-format off
#include "quant/kquants_simd.inc"
#include "quant/kquants_x86.inc"
#define PRIMEKV_KQUANTS_512
#include "quant/kquants_int8_x86.inc"
// clang-format on
#undef PRIMEKV_KQUANTS_512

// The AVX-512 policy with vpdpbusd for the four-product sums.
struct Avx512Vnni : simd::Avx512 {
  static I SumsOf4(I u, I s) { return _mm512_dpbusd_epi32(_mm512_setzero_si512(), u, s); }
};

}  // namespace
}  // namespace primekv::quant::internal

#pragma GCC diagnostic pop
// clang-format off
#include "quant/kquants_table.inc"
#include "primekv/quant/simd/target_end.inc"
// clang-format on

namespace primekv::quant::internal {

// Outside the target region, like Avx512Kernels().
const KernelTable* Avx512VnniKernels() {
  static const KernelTable table = [] {
    KernelTable t = *Avx512Kernels();
    t.isa = Isa::kAvx512Vnni;
    ForEachBlockFormat(t, []<QuantsFn kQ, KBlock kL, GgmlType kT, UnpackFn kS>(TypeKernels& k) {
      if constexpr (kL.elements == kSuperBlock) {
        k.dot_q8k = DotQ8K<Avx512Vnni, kQ, kT, kS>;
        k.dot_q8k_rows = nullptr;  // only beside a dot_q8k of the same arithmetic
      }
    });
    t.q4_k.dot_q8k = DotQ8KOne<K4Avx512<true, false>>;
    t.q4_k.dot_q8k_rows = DotQ8KRows<K4Avx512<true, false>>;
    t.q5_k.dot_q8k = DotQ8KOne<K4Avx512<true, true>>;
    t.q5_k.dot_q8k_rows = DotQ8KRows<K4Avx512<true, true>>;
    t.q6_k.dot_q8k = DotQ8KOne<K6Avx512<true>>;
    t.q6_k.dot_q8k_rows = DotQ8KRows<K6Avx512<true>>;
    t.iq4_xs.dot_q8k = DotQ8KOne<Iq4XsAvx512<true>>;
    t.iq4_xs.dot_q8k_rows = DotQ8KRows<Iq4XsAvx512<true>>;
    return t;
  }();
  return &table;
}

}  // namespace primekv::quant::internal

#endif  // x86-64
