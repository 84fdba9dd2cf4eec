// AVX2 + FMA kernels of the formats of kquants.h: SIMD unpacking (kquants_x86.inc), then 8-wide
// float arithmetic on the unpacked form. Target pragma and run-time choice as kernels_avx2.cc.
#include <cstdint>
#include <cstring>

#include "quant/kquants.h"

#if defined(__x86_64__)
#include <immintrin.h>

#if defined(__clang__)
#pragma clang attribute push(__attribute__((target("avx2,fma,f16c"))), apply_to = function)
#else
#pragma GCC push_options
#pragma GCC target("avx2,fma,f16c")
#endif

namespace primekv::quant::internal {
namespace {

#include "quant/kquants_x86.inc"

float HorizontalSum(__m256 v) {
  __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  s = _mm_add_ps(s, _mm_movehl_ps(s, s));
  s = _mm_add_ss(s, _mm_movehdup_ps(s));
  return _mm_cvtss_f32(s);
}

// The 16 quants of group g as two vectors of 8 floats.
void GroupQuants(const Unpacked& u, int g, __m256* lo, __m256* hi) {
  const __m128i q = _mm_load_si128(reinterpret_cast<const __m128i*>(u.q + 16 * g));
  *lo = _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(q));
  *hi = _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(_mm_unpackhi_epi64(q, q)));
}

template <QuantsFn kQuants, KBlock kLayout, GgmlType kType, UnpackFn kScales>
float Dot(const void* row, const float* x, int64_t n) {
  // A SIMD scale decoder where the format has one, else the scalar one (through a pointer).
  const UnpackFn scales = kScales != nullptr ? kScales : ScalarScales(kType);
  const auto* p = static_cast<const uint8_t*>(row);
  Unpacked u;
  __m256 a0 = _mm256_setzero_ps(), a1 = _mm256_setzero_ps();
  for (int64_t b = 0; b < n / kLayout.elements; ++b, p += kLayout.bytes, x += kLayout.elements) {
    kQuants(p, u.q);
    scales(p, u);
    for (int g = 0; g < kLayout.elements / kGroup16; ++g) {
      __m256 lo, hi;
      GroupQuants(u, g, &lo, &hi);
      const __m256 s = _mm256_set1_ps(u.scale[g]);
      const __m256 m = _mm256_set1_ps(u.min[g]);
      a0 = _mm256_fmadd_ps(_mm256_fmsub_ps(lo, s, m), _mm256_loadu_ps(x + 16 * g), a0);
      a1 = _mm256_fmadd_ps(_mm256_fmsub_ps(hi, s, m), _mm256_loadu_ps(x + 16 * g + 8), a1);
    }
  }
  return HorizontalSum(_mm256_add_ps(a0, a1));
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
      __m256 lo, hi;
      GroupQuants(u, g, &lo, &hi);
      const __m256 s = _mm256_set1_ps(u.scale[g]);
      const __m256 m = _mm256_set1_ps(u.min[g]);
      _mm256_storeu_ps(dst + 16 * g, _mm256_sub_ps(_mm256_mul_ps(s, lo), m));
      _mm256_storeu_ps(dst + 16 * g + 8, _mm256_sub_ps(_mm256_mul_ps(s, hi), m));
    }
  }
}

// int8 activations: per pair of groups, maddubs on |w| and x carrying w's sign (exact: each
// pair of products is at most 2 * 127 * 127 in magnitude, within int16), then madd to int32,
// then one float FMA with the groups' scales; the offsets subtract min_g * bsum_g.
template <QuantsFn kQuants, GgmlType kType, UnpackFn kScales>
float DotQ8K(const void* row, const Q8KBlock* x, int64_t n) {
  // A SIMD scale decoder where the format has one, else the scalar one (through a pointer).
  const UnpackFn scales = kScales != nullptr ? kScales : ScalarScales(kType);
  const auto* p = static_cast<const uint8_t*>(row);
  const int bytes = BlockOf(kType).bytes;
  const __m256i ones = _mm256_set1_epi16(1);
  const __m256i pairs = _mm256_setr_epi32(0, 0, 0, 0, 1, 1, 1, 1);
  Unpacked u;
  __m256 acc = _mm256_setzero_ps();
  for (int64_t b = 0; b < n / kSuperBlock; ++b, p += bytes, ++x) {
    kQuants(p, u.q);
    scales(p, u);
    __m256 block = _mm256_setzero_ps();
    for (int k = 0; k < kSuperBlock / 32; ++k) {
      const __m256i w = _mm256_load_si256(reinterpret_cast<const __m256i*>(u.q + 32 * k));
      const __m256i xq = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(x->qs + 32 * k));
      __m256i prod;
      if constexpr (UnsignedQuants(kType)) {
        prod = _mm256_maddubs_epi16(w, xq);
      } else {
        prod = _mm256_maddubs_epi16(_mm256_abs_epi8(w), _mm256_sign_epi8(xq, w));
      }
      const __m256i sums = _mm256_madd_epi16(prod, ones);  // lanes 0-3: group 2k, 4-7: 2k+1
      const __m256 sc = _mm256_permutevar8x32_ps(
          _mm256_castps128_ps256(
              _mm_castsi128_ps(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(u.scale + 2 * k)))),
          pairs);
      block = _mm256_fmadd_ps(_mm256_cvtepi32_ps(sums), sc, block);
    }
    const __m128i bsums_lo = _mm_loadu_si128(reinterpret_cast<const __m128i*>(x->bsums));
    const __m128i bsums_hi = _mm_loadu_si128(reinterpret_cast<const __m128i*>(x->bsums + 8));
    block = _mm256_fnmadd_ps(_mm256_load_ps(u.min),
                             _mm256_cvtepi32_ps(_mm256_cvtepi16_epi32(bsums_lo)), block);
    block = _mm256_fnmadd_ps(_mm256_load_ps(u.min + 8),
                             _mm256_cvtepi32_ps(_mm256_cvtepi16_epi32(bsums_hi)), block);
    acc = _mm256_fmadd_ps(block, _mm256_set1_ps(x->d), acc);
  }
  return HorizontalSum(acc);
}

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
  return HorizontalSum(acc);
}

}  // namespace
}  // namespace primekv::quant::internal

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

// Outside the target region, like Avx2Kernels(). Quantisation stays scalar.
void AddAvx2BlockKernels(KernelTable& t) {
  Set<QuantsQ4_1, kQ4_1, GgmlType::kQ4_1, ScalesQ4_1Simd>(t.q4_1);
  Set<QuantsQ5_0, kQ5_0, GgmlType::kQ5_0, ScalesD0Simd>(t.q5_0);
  Set<QuantsQ5_1, kQ5_1, GgmlType::kQ5_1, ScalesQ4_1Simd>(t.q5_1);
  Set<QuantsIq4Nl, kIq4Nl, GgmlType::kIQ4_NL, ScalesD0Simd>(t.iq4_nl);
  Set<QuantsQ2_K, kQ2_K, GgmlType::kQ2_K, ScalesQ2_KSimd>(t.q2_k);
  Set<QuantsQ3_K, kQ3_K, GgmlType::kQ3_K, ScalesQ3_KSimd>(t.q3_k);
  Set<QuantsQ4_K, kQ4_K, GgmlType::kQ4_K, ScalesK4Simd>(t.q4_k);
  t.q4_k.dot_q8k = DotQ8KQ4K;
  Set<QuantsQ5_K, kQ5_K, GgmlType::kQ5_K, ScalesK4Simd>(t.q5_k);
  Set<QuantsQ6_K, kQ6_K, GgmlType::kQ6_K, ScalesQ6_KSimd>(t.q6_k);
  Set<QuantsIq4Xs, kIq4Xs, GgmlType::kIQ4_XS, ScalesIq4XsSimd>(t.iq4_xs);
}

// For the kernel tests: this table's unpacker of `type`'s quants.
QuantsFn Avx2Quants(GgmlType type) {
  switch (type) {
    case GgmlType::kQ4_1:
      return QuantsQ4_1;
    case GgmlType::kQ5_0:
      return QuantsQ5_0;
    case GgmlType::kQ5_1:
      return QuantsQ5_1;
    case GgmlType::kIQ4_NL:
      return QuantsIq4Nl;
    case GgmlType::kQ2_K:
      return QuantsQ2_K;
    case GgmlType::kQ3_K:
      return QuantsQ3_K;
    case GgmlType::kQ4_K:
      return QuantsQ4_K;
    case GgmlType::kQ5_K:
      return QuantsQ5_K;
    case GgmlType::kQ6_K:
      return QuantsQ6_K;
    case GgmlType::kIQ4_XS:
      return QuantsIq4Xs;
    default:
      return nullptr;
  }
}

}  // namespace primekv::quant::internal

#else  // not x86-64

namespace primekv::quant::internal {
void AddAvx2BlockKernels(KernelTable&) {}
QuantsFn Avx2Quants(GgmlType) { return nullptr; }
}  // namespace primekv::quant::internal

#endif
