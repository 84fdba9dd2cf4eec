// AVX-512 kernels of the formats of kquants.h: the unpacking of kquants_x86.inc, then 16-wide
// float arithmetic, one vector per group of 16. Target pragma and run-time choice as
// kernels_avx512.cc.
#include <cstdint>
#include <cstring>

#include "quant/kquants.h"

#if defined(__x86_64__)
#include <immintrin.h>

#if defined(__clang__)
#pragma clang attribute push(__attribute__((target("avx512f,avx512bw,avx512vl,avx2,fma,f16c"))), \
                             apply_to = function)
#else
#pragma GCC push_options
#pragma GCC target("avx512f,avx512bw,avx512vl,avx2,fma,f16c")
#endif
// GCC 12's AVX-512 headers trip -Wmaybe-uninitialized (GCC bug 105593), as in kernels_avx512.cc.
#if !defined(__clang__)
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#endif

namespace primekv::quant::internal {
namespace {

#include "quant/kquants_x86.inc"

constexpr bool kUseVnni = false;

__m512 GroupQuants(const Unpacked& u, int g) {
  const __m128i q = _mm_load_si128(reinterpret_cast<const __m128i*>(u.q + 16 * g));
  return _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(q));
}

template <QuantsFn kQuants, KBlock kLayout, GgmlType kType, UnpackFn kScales>
float Dot(const void* row, const float* x, int64_t n) {
  // A SIMD scale decoder where the format has one, else the scalar one (through a pointer).
  const UnpackFn scales = kScales != nullptr ? kScales : ScalarScales(kType);
  const auto* p = static_cast<const uint8_t*>(row);
  Unpacked u;
  __m512 a0 = _mm512_setzero_ps(), a1 = _mm512_setzero_ps();
  for (int64_t b = 0; b < n / kLayout.elements; ++b, p += kLayout.bytes, x += kLayout.elements) {
    kQuants(p, u.q);
    scales(p, u);
    for (int g = 0; g < kLayout.elements / kGroup16; g += 2) {
      // Two groups per step into two accumulators, so consecutive FMAs do not wait on each other.
      const __m512 w0 =
          _mm512_fmsub_ps(GroupQuants(u, g), _mm512_set1_ps(u.scale[g]), _mm512_set1_ps(u.min[g]));
      const __m512 w1 = _mm512_fmsub_ps(GroupQuants(u, g + 1), _mm512_set1_ps(u.scale[g + 1]),
                                        _mm512_set1_ps(u.min[g + 1]));
      a0 = _mm512_fmadd_ps(w0, _mm512_loadu_ps(x + 16 * g), a0);
      a1 = _mm512_fmadd_ps(w1, _mm512_loadu_ps(x + 16 * g + 16), a1);
    }
  }
  return _mm512_reduce_add_ps(_mm512_add_ps(a0, a1));
}

// A multiply, then a subtract, as ggml's reference (this file is built with -ffp-contract=off).
template <QuantsFn kQuants, KBlock kLayout, GgmlType kType, UnpackFn kScales>
void Dequantize(const void* src, float* dst, int64_t n) {
  // A SIMD scale decoder where the format has one, else the scalar one (through a pointer).
  const UnpackFn scales = kScales != nullptr ? kScales : ScalarScales(kType);
  const auto* p = static_cast<const uint8_t*>(src);
  Unpacked u;
  for (int64_t b = 0; b < n / kLayout.elements; ++b, p += kLayout.bytes, dst += kLayout.elements) {
    kQuants(p, u.q);
    scales(p, u);
    for (int g = 0; g < kLayout.elements / kGroup16; ++g) {
      const __m512 w = _mm512_sub_ps(_mm512_mul_ps(_mm512_set1_ps(u.scale[g]), GroupQuants(u, g)),
                                     _mm512_set1_ps(u.min[g]));
      _mm512_storeu_ps(dst + 16 * g, w);
    }
  }
}

#include "quant/kquants_q8k_avx512.inc"

}  // namespace
}  // namespace primekv::quant::internal

#if !defined(__clang__)
#pragma GCC diagnostic pop
#endif
#if defined(__clang__)
#pragma clang attribute pop
#else
#pragma GCC pop_options
#endif

namespace primekv::quant::internal {
namespace {

template <QuantsFn kQuants, KBlock kLayout, GgmlType kType, UnpackFn kScales = nullptr>
void Set(TypeKernels& k) {
  k.dot = Dot<kQuants, kLayout, kType, kScales>;
  k.dequantize = Dequantize<kQuants, kLayout, kType, kScales>;
  if constexpr (kLayout.elements == kSuperBlock) k.dot_q8k = DotQ8K<kQuants, kType, kScales>;
}

}  // namespace

// Outside the target region, like Avx512Kernels(). Quantisation stays scalar.
void AddAvx512BlockKernels(KernelTable& t) {
  Set<QuantsQ4_1, kQ4_1, GgmlType::kQ4_1, ScalesQ4_1Simd>(t.q4_1);
  Set<QuantsQ5_0, kQ5_0, GgmlType::kQ5_0, ScalesD0Simd>(t.q5_0);
  Set<QuantsQ5_1, kQ5_1, GgmlType::kQ5_1, ScalesQ4_1Simd>(t.q5_1);
  Set<QuantsIq4Nl, kIq4Nl, GgmlType::kIQ4_NL, ScalesD0Simd>(t.iq4_nl);
  Set<QuantsQ2_K, kQ2_K, GgmlType::kQ2_K, ScalesQ2_KSimd>(t.q2_k);
  Set<QuantsQ3_K, kQ3_K, GgmlType::kQ3_K, ScalesQ3_KSimd>(t.q3_k);
  // Q4_K's int8 dot stays the AVX2 one this table was copied from: unpacked in registers, it
  // measured faster than 512-bit versions (19.7 against 16.0 GB/s in cache, bm_quant
  // DotRowQ8K, Zen 5), which spend more on assembling two sub-blocks per vector.
  const DotQ8KFn q4_k_int8 = t.q4_k.dot_q8k;
  Set<QuantsQ4_K, kQ4_K, GgmlType::kQ4_K, ScalesK4Simd>(t.q4_k);
  t.q4_k.dot_q8k = q4_k_int8;
  Set<QuantsQ5_K, kQ5_K, GgmlType::kQ5_K, ScalesK4Simd>(t.q5_k);
  Set<QuantsQ6_K, kQ6_K, GgmlType::kQ6_K, ScalesQ6_KSimd>(t.q6_k);
  Set<QuantsIq4Xs, kIq4Xs, GgmlType::kIQ4_XS, ScalesIq4XsSimd>(t.iq4_xs);
}

}  // namespace primekv::quant::internal

#else  // not x86-64

namespace primekv::quant::internal {
void AddAvx512BlockKernels(KernelTable&) {}
}  // namespace primekv::quant::internal

#endif
