// The AVX-512 VNNI table: the AVX-512 table with the int8-activation dot products of the
// 256-element formats done by vpdpbusd (one instruction for maddubs + madd). A separate file so
// that nothing else is compiled with the VNNI target.
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

#include "quant/kquants_simd.inc"
#include "quant/kquants_x86.inc"

// The AVX-512 policy with vpdpbusd for the four-product sums.
struct Avx512Vnni : simd::Avx512 {
  static I SumsOf4(I u, I s) { return _mm512_dpbusd_epi32(_mm512_setzero_si512(), u, s); }
};

}  // namespace
}  // namespace primekv::quant::internal

#pragma GCC diagnostic pop
#include "quant/kquants_table.inc"
#include "primekv/quant/simd/target_end.inc"

namespace primekv::quant::internal {

// Outside the target region, like Avx512Kernels().
const KernelTable* Avx512VnniKernels() {
  static const KernelTable table = [] {
    KernelTable t = *Avx512Kernels();
    t.isa = Isa::kAvx512Vnni;
    // Q4_K keeps the AVX2 register-unpacked int8 dot (see AddAvx512BlockKernels).
    ForEachBlockFormat(t, []<QuantsFn kQ, KBlock kL, GgmlType kT, UnpackFn kS>(TypeKernels& k) {
      if constexpr (kL.elements == kSuperBlock && kT != GgmlType::kQ4_K) {
        k.dot_q8k = DotQ8K<Avx512Vnni, kQ, kT, kS>;
      }
    });
    return t;
  }();
  return &table;
}

}  // namespace primekv::quant::internal

#endif  // x86-64
