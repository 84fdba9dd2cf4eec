// AVX2 + FMA kernels of the formats of kquants.h: SIMD unpacking (kquants_x86.inc), then the
// kernels of kquants_simd.inc, 8 wide, on the unpacked form, and Q4_K's own int8 dot. Target
// pragma and run-time choice as kernels_avx2.cc.
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

#include "quant/kquants_simd.inc"
#include "quant/kquants_x86.inc"

// Q4_K with int8 activations, unpacked in registers: each 32 bytes of quants are the low
// nibbles of one 32-element sub-block and the high nibbles of the next, each with one scale, so
// no unpacked copy is written and no per-group scale vector is needed.
float DotQ8KQ4K(const void* row, const Q8KBlock* x, int64_t n) {
  const auto* p = static_cast<const uint8_t*>(row);
  const __m256i ones = _mm256_set1_epi16(1);
  const __m256i nibble = _mm256_set1_epi8(0x0F);
  Unpacked u;
  __m256 acc = _mm256_setzero_ps();
  for (int64_t b = 0; b < n / kSuperBlock; ++b, p += kQ4_K.bytes, ++x) {
    ScalesK4Simd(p, u);
    __m256 block = _mm256_setzero_ps();
    for (int c = 0; c < 4; ++c) {
      const __m256i v = Load256(p + 16 + 32 * c);
      const __m256i lo = _mm256_and_si256(v, nibble);
      const __m256i hi = _mm256_and_si256(_mm256_srli_epi16(v, 4), nibble);
      const __m256i x_lo = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(x->qs + 64 * c));
      const __m256i x_hi =
          _mm256_loadu_si256(reinterpret_cast<const __m256i*>(x->qs + 64 * c + 32));
      const __m256i s_lo = _mm256_madd_epi16(_mm256_maddubs_epi16(lo, x_lo), ones);
      const __m256i s_hi = _mm256_madd_epi16(_mm256_maddubs_epi16(hi, x_hi), ones);
      block = _mm256_fmadd_ps(_mm256_cvtepi32_ps(s_lo), _mm256_set1_ps(u.scale[4 * c]), block);
      block = _mm256_fmadd_ps(_mm256_cvtepi32_ps(s_hi), _mm256_set1_ps(u.scale[4 * c + 2]), block);
    }
    const __m128i bsums_lo = _mm_loadu_si128(reinterpret_cast<const __m128i*>(x->bsums));
    const __m128i bsums_hi = _mm_loadu_si128(reinterpret_cast<const __m128i*>(x->bsums + 8));
    block = _mm256_fnmadd_ps(_mm256_load_ps(u.min),
                             _mm256_cvtepi32_ps(_mm256_cvtepi16_epi32(bsums_lo)), block);
    block = _mm256_fnmadd_ps(_mm256_load_ps(u.min + 8),
                             _mm256_cvtepi32_ps(_mm256_cvtepi16_epi32(bsums_hi)), block);
    acc = _mm256_fmadd_ps(block, _mm256_set1_ps(x->d), acc);
  }
  return simd::Avx2::ReduceAdd(acc);
}

}  // namespace
}  // namespace primekv::quant::internal

#include "quant/kquants_table.inc"
#include "primekv/quant/simd/target_end.inc"

namespace primekv::quant::internal {

// Outside the target region, like Avx2Kernels(). Quantisation stays scalar.
void AddAvx2BlockKernels(KernelTable& t) {
  AddBlockKernels<simd::Avx2>(t);
  t.q4_k.dot_q8k = DotQ8KQ4K;
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
