// AVX2 + FMA + F16C row kernels (8 floats a vector): the float kernels of float_kernels.inc for
// this ISA, and its own Q8_0/Q4_0 kernels and fp16/bf16 rounding. Compiled with a target pragma
// rather than global -m flags, and only called after the CPU check in dispatch.cc, so the binary
// still runs on any x86-64.
#include <cstdint>
#include <cstring>

#include "quant/kernels.h"
#include "quant/kquants.h"

#if defined(__x86_64__)
#include <immintrin.h>

// clang-format off
#include "primekv/quant/simd/target_avx2_begin.inc"
#include "primekv/quant/simd/simd_avx2.inc"
#include "quant/float_kernels.inc"
// clang-format on

namespace primekv::quant::internal {
namespace {

// 8 int8 -> 8 floats.
__m256 Int8x8ToFloat(__m128i v) { return _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(v)); }

// The 32 quants of a Q4_0 block, recentred to [-8, 7]: elements 0..15 in *lo, 16..31 in *hi.
void UnpackQ4_0(const uint8_t* quants, __m128i* lo, __m128i* hi) {
  const __m128i bytes = _mm_loadu_si128(reinterpret_cast<const __m128i*>(quants));
  const __m128i low_mask = _mm_set1_epi8(0x0F);
  const __m128i eight = _mm_set1_epi8(8);
  *lo = _mm_sub_epi8(_mm_and_si128(bytes, low_mask), eight);
  *hi = _mm_sub_epi8(_mm_and_si128(_mm_srli_epi16(bytes, 4), low_mask), eight);
}

// One block's sum_j q_j x_j (unscaled), with two partial chains to shorten the latency.
__m256 BlockDot(__m256 q0, __m256 q1, __m256 q2, __m256 q3, const float* x) {
  __m256 s0 = _mm256_mul_ps(q0, _mm256_loadu_ps(x));
  __m256 s1 = _mm256_mul_ps(q1, _mm256_loadu_ps(x + 8));
  s0 = _mm256_fmadd_ps(q2, _mm256_loadu_ps(x + 16), s0);
  s1 = _mm256_fmadd_ps(q3, _mm256_loadu_ps(x + 24), s1);
  return _mm256_add_ps(s0, s1);
}

__m256 Q8_0BlockDot(const uint8_t* p, const float* x) {
  const auto* q = reinterpret_cast<const __m128i*>(p + 2);
  const __m128i q01 = _mm_loadu_si128(q);
  const __m128i q23 = _mm_loadu_si128(q + 1);
  return BlockDot(Int8x8ToFloat(q01), Int8x8ToFloat(_mm_unpackhi_epi64(q01, q01)),
                  Int8x8ToFloat(q23), Int8x8ToFloat(_mm_unpackhi_epi64(q23, q23)), x);
}

__m256 Q4_0BlockDot(const uint8_t* p, const float* x) {
  __m128i lo, hi;
  UnpackQ4_0(p + 2, &lo, &hi);
  return BlockDot(Int8x8ToFloat(lo), Int8x8ToFloat(_mm_unpackhi_epi64(lo, lo)), Int8x8ToFloat(hi),
                  Int8x8ToFloat(_mm_unpackhi_epi64(hi, hi)), x);
}

template <int kBlockBytes, __m256 (*kBlockDot)(const uint8_t*, const float*)>
float DotBlocks(const void* row, const float* x, int64_t n) {
  const auto* p = static_cast<const uint8_t*>(row);
  const int64_t blocks = n / 32;
  // Two accumulators so consecutive blocks do not wait on each other's final FMA.
  __m256 a0 = _mm256_setzero_ps(), a1 = _mm256_setzero_ps();
  int64_t b = 0;
  for (; b + 2 <= blocks; b += 2, p += 2 * kBlockBytes, x += 64) {
    a0 = _mm256_fmadd_ps(kBlockDot(p, x), _mm256_set1_ps(LoadHalf(p)), a0);
    a1 = _mm256_fmadd_ps(kBlockDot(p + kBlockBytes, x + 32),
                         _mm256_set1_ps(LoadHalf(p + kBlockBytes)), a1);
  }
  if (b < blocks) a0 = _mm256_fmadd_ps(kBlockDot(p, x), _mm256_set1_ps(LoadHalf(p)), a0);
  return simd::Avx2::ReduceAdd(_mm256_add_ps(a0, a1));
}

float DotQ8_0(const void* row, const float* x, int64_t n) {
  return DotBlocks<kQ8_0BlockBytes, Q8_0BlockDot>(row, x, n);
}

float DotQ4_0(const void* row, const float* x, int64_t n) {
  return DotBlocks<kQ4_0BlockBytes, Q4_0BlockDot>(row, x, n);
}

void DequantizeQ8_0(const void* src, float* dst, int64_t n) {
  const auto* p = static_cast<const uint8_t*>(src);
  for (int64_t b = 0; b < n / 32; ++b, p += kQ8_0BlockBytes, dst += 32) {
    const __m256 d = _mm256_set1_ps(LoadHalf(p));
    const auto* q = reinterpret_cast<const __m128i*>(p + 2);
    const __m128i q01 = _mm_loadu_si128(q);
    const __m128i q23 = _mm_loadu_si128(q + 1);
    _mm256_storeu_ps(dst, _mm256_mul_ps(d, Int8x8ToFloat(q01)));
    _mm256_storeu_ps(dst + 8, _mm256_mul_ps(d, Int8x8ToFloat(_mm_unpackhi_epi64(q01, q01))));
    _mm256_storeu_ps(dst + 16, _mm256_mul_ps(d, Int8x8ToFloat(q23)));
    _mm256_storeu_ps(dst + 24, _mm256_mul_ps(d, Int8x8ToFloat(_mm_unpackhi_epi64(q23, q23))));
  }
}

void DequantizeQ4_0(const void* src, float* dst, int64_t n) {
  const auto* p = static_cast<const uint8_t*>(src);
  for (int64_t b = 0; b < n / 32; ++b, p += kQ4_0BlockBytes, dst += 32) {
    const __m256 d = _mm256_set1_ps(LoadHalf(p));
    __m128i lo, hi;
    UnpackQ4_0(p + 2, &lo, &hi);
    _mm256_storeu_ps(dst, _mm256_mul_ps(d, Int8x8ToFloat(lo)));
    _mm256_storeu_ps(dst + 8, _mm256_mul_ps(d, Int8x8ToFloat(_mm_unpackhi_epi64(lo, lo))));
    _mm256_storeu_ps(dst + 16, _mm256_mul_ps(d, Int8x8ToFloat(hi)));
    _mm256_storeu_ps(dst + 24, _mm256_mul_ps(d, Int8x8ToFloat(_mm_unpackhi_epi64(hi, hi))));
  }
}

// F16C rounds to nearest even and keeps subnormals (MXCSR is not consulted with an immediate
// rounding mode), so it agrees with the scalar F32ToF16 bit for bit.
void QuantizeF16(const float* src, void* dst, int64_t n) {
  auto* d = static_cast<uint8_t*>(dst);
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) {
    const __m128i h = _mm256_cvtps_ph(_mm256_loadu_ps(src + i), _MM_FROUND_TO_NEAREST_INT);
    _mm_storeu_si128(reinterpret_cast<__m128i*>(d + 2 * i), h);
  }
  for (; i < n; ++i) {
    const auto h = static_cast<uint16_t>(_cvtss_sh(src[i], _MM_FROUND_TO_NEAREST_INT));
    std::memcpy(d + 2 * i, &h, sizeof(h));
  }
}

// bf16 round to nearest even on 8 floats, as 8 uint32 holding the 16-bit results.
__m256i RoundToBf16(__m256 v) {
  const __m256i bits = _mm256_castps_si256(v);
  const __m256i lsb = _mm256_and_si256(_mm256_srli_epi32(bits, 16), _mm256_set1_epi32(1));
  const __m256i bias = _mm256_add_epi32(lsb, _mm256_set1_epi32(0x7FFF));
  const __m256i rounded = _mm256_srli_epi32(_mm256_add_epi32(bits, bias), 16);
  const __m256i quiet_nan = _mm256_or_si256(_mm256_srli_epi32(bits, 16), _mm256_set1_epi32(0x40));
  const __m256 is_nan = _mm256_cmp_ps(v, v, _CMP_UNORD_Q);
  return _mm256_blendv_epi8(rounded, quiet_nan, _mm256_castps_si256(is_nan));
}

void QuantizeBf16(const float* src, void* dst, int64_t n) {
  auto* d = static_cast<uint8_t*>(dst);
  int64_t i = 0;
  for (; i + 16 <= n; i += 16) {
    // packus works per 128-bit lane; the permute puts the four 64-bit groups back in order.
    const __m256i packed = _mm256_packus_epi32(RoundToBf16(_mm256_loadu_ps(src + i)),
                                               RoundToBf16(_mm256_loadu_ps(src + i + 8)));
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(d + 2 * i),
                        _mm256_permute4x64_epi64(packed, 0xD8));
  }
  for (; i < n; ++i) {
    uint32_t bits;
    std::memcpy(&bits, src + i, sizeof(bits));
    uint16_t h;
    if ((bits & 0x7FFFFFFFu) > 0x7F800000u) {
      h = static_cast<uint16_t>((bits >> 16) | 0x40u);
    } else {
      h = static_cast<uint16_t>((bits + 0x7FFFu + ((bits >> 16) & 1u)) >> 16);
    }
    std::memcpy(d + 2 * i, &h, sizeof(h));
  }
}

}  // namespace
}  // namespace primekv::quant::internal

// clang-format off
#include "primekv/quant/simd/target_end.inc"
#include "quant/float_kernels_table.inc"
// clang-format on

namespace primekv::quant::internal {

// Outside the target region: building the table must not itself use AVX instructions, since
// dispatch may ask for it on a CPU without them.
const KernelTable* Avx2Kernels() {
  static const KernelTable table = [] {
    KernelTable t = MakeTable<simd::Avx2>(ScalarKernels(), Isa::kAvx2, {DotQ8_0, DequantizeQ8_0},
                                          {DotQ4_0, DequantizeQ4_0}, AddAvx2BlockKernels);
    t.f16.quantize = QuantizeF16;
    t.bf16.quantize = QuantizeBf16;
    return t;
  }();
  return &table;
}

}  // namespace primekv::quant::internal

#endif  // x86-64
