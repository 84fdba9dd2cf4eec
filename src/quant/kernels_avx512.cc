// AVX-512 row kernels (16 floats a vector): the float kernels of float_kernels.inc for this
// ISA, and its own Q8_0/Q4_0 kernels. Same scheme as kernels_avx2.cc: a target pragma over the
// kernels only, chosen at run time by dispatch.cc.
#include <cstdint>
#include <cstring>

#include "quant/kernels.h"
#include "quant/kquants.h"

#if defined(__x86_64__)
#include <immintrin.h>

// clang-format off
#include "primekv/quant/simd/target_avx512_begin.inc"
#include "primekv/quant/simd/simd_avx512.inc"
#include "quant/float_kernels.inc"
// clang-format on

namespace primekv::quant::internal {
namespace {

// 16 int8 -> 16 floats.
__m512 Int8x16ToFloat(__m128i v) { return _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(v)); }

__m128i Load128(const uint8_t* p) { return _mm_loadu_si128(reinterpret_cast<const __m128i*>(p)); }

// The fp16 scales of up to 16 consecutive blocks (`count`) as floats, with one gather and one
// conversion instead of a load, convert and broadcast per block (about 10% faster Q8_0 and Q4_0
// dots, min-of-many timings). Each gathered dword is a scale plus two quant bytes, so nothing
// past the row is read.
template <int kBlockBytes>
void LoadScales(const uint8_t* blocks, int count, float* scales) {
  const __m512i offsets =
      _mm512_mullo_epi32(_mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15),
                         _mm512_set1_epi32(kBlockBytes));
  const auto mask = static_cast<__mmask16>((1u << count) - 1);
  const __m512i words =
      _mm512_mask_i32gather_epi32(_mm512_setzero_si512(), mask, offsets, blocks, 1);
  _mm512_storeu_ps(scales, _mm512_cvtph_ps(_mm512_cvtepi32_epi16(words)));
}

float DotQ8_0(const void* row, const float* x, int64_t n) {
  const auto* p = static_cast<const uint8_t*>(row);
  __m512 a0 = _mm512_setzero_ps(), a1 = _mm512_setzero_ps();
  alignas(64) float scales[16];
  for (int64_t left = n / 32; left > 0; left -= 16) {
    const int count = left < 16 ? static_cast<int>(left) : 16;
    LoadScales<kQ8_0BlockBytes>(p, count, scales);
    for (int j = 0; j < count; ++j, p += kQ8_0BlockBytes, x += 32) {
      const __m512 q0 = Int8x16ToFloat(Load128(p + 2));
      const __m512 q1 = Int8x16ToFloat(Load128(p + 18));
      const __m512 s =
          _mm512_fmadd_ps(q1, _mm512_loadu_ps(x + 16), _mm512_mul_ps(q0, _mm512_loadu_ps(x)));
      // Alternate accumulators so consecutive blocks do not wait on each other's FMA.
      if (j & 1) {
        a1 = _mm512_fmadd_ps(s, _mm512_set1_ps(scales[j]), a1);
      } else {
        a0 = _mm512_fmadd_ps(s, _mm512_set1_ps(scales[j]), a0);
      }
    }
  }
  return _mm512_reduce_add_ps(_mm512_add_ps(a0, a1));
}

// Q4_0 through a 16-entry table d * (nibble - 8): vpermps indexes with the low 4 bits of each
// lane, so the nibbles need no masking or recentring and no int-to-float conversion (10-25%
// faster than unpack-and-convert here). Calls body(j, table, bytes) for block j of each run of
// up to 16 blocks: its table, and its 16 quant bytes widened to one per lane (the low nibble
// indexes element i, the high one element i + 16).
template <class Body>
void ForEachQ4_0Block(const uint8_t* p, int64_t n, Body&& body) {
  const __m512 grid = _mm512_setr_ps(-8, -7, -6, -5, -4, -3, -2, -1, 0, 1, 2, 3, 4, 5, 6, 7);
  alignas(64) float scales[16];
  for (int64_t left = n / 32; left > 0; left -= 16) {
    const int count = left < 16 ? static_cast<int>(left) : 16;
    LoadScales<kQ4_0BlockBytes>(p, count, scales);
    for (int j = 0; j < count; ++j, p += kQ4_0BlockBytes) {
      const __m512 table = _mm512_mul_ps(grid, _mm512_set1_ps(scales[j]));
      body(j, table, _mm512_cvtepu8_epi32(Load128(p + 2)));
    }
  }
}

// Four accumulators: two FMAs per block would otherwise wait on the previous block's.
float DotQ4_0(const void* row, const float* x, int64_t n) {
  __m512 a0 = _mm512_setzero_ps(), a1 = _mm512_setzero_ps();
  __m512 a2 = _mm512_setzero_ps(), a3 = _mm512_setzero_ps();
  ForEachQ4_0Block(static_cast<const uint8_t*>(row), n, [&](int j, __m512 table, __m512i bytes) {
    const __m512 w0 = _mm512_permutexvar_ps(bytes, table);
    const __m512 w1 = _mm512_permutexvar_ps(_mm512_srli_epi32(bytes, 4), table);
    if (j & 1) {
      a2 = _mm512_fmadd_ps(w0, _mm512_loadu_ps(x), a2);
      a3 = _mm512_fmadd_ps(w1, _mm512_loadu_ps(x + 16), a3);
    } else {
      a0 = _mm512_fmadd_ps(w0, _mm512_loadu_ps(x), a0);
      a1 = _mm512_fmadd_ps(w1, _mm512_loadu_ps(x + 16), a1);
    }
    x += 32;
  });
  return _mm512_reduce_add_ps(_mm512_add_ps(_mm512_add_ps(a0, a1), _mm512_add_ps(a2, a3)));
}

void DequantizeQ8_0(const void* src, float* dst, int64_t n) {
  const auto* p = static_cast<const uint8_t*>(src);
  for (int64_t b = 0; b < n / 32; ++b, p += kQ8_0BlockBytes, dst += 32) {
    const __m512 d = _mm512_set1_ps(LoadHalf(p));
    _mm512_storeu_ps(dst, _mm512_mul_ps(d, Int8x16ToFloat(Load128(p + 2))));
    _mm512_storeu_ps(dst + 16, _mm512_mul_ps(d, Int8x16ToFloat(Load128(p + 18))));
  }
}

void DequantizeQ4_0(const void* src, float* dst, int64_t n) {
  ForEachQ4_0Block(static_cast<const uint8_t*>(src), n, [&](int, __m512 table, __m512i bytes) {
    _mm512_storeu_ps(dst, _mm512_permutexvar_ps(bytes, table));
    _mm512_storeu_ps(dst + 16, _mm512_permutexvar_ps(_mm512_srli_epi32(bytes, 4), table));
    dst += 32;
  });
}

}  // namespace
}  // namespace primekv::quant::internal

// clang-format off
#include "primekv/quant/simd/target_end.inc"
#include "quant/float_kernels_table.inc"
// clang-format on

namespace primekv::quant::internal {

// Outside the target region (see kernels_avx2.cc). Quantisation is not on a hot path; the AVX2
// versions serve here too.
const KernelTable* Avx512Kernels() {
  static const KernelTable table =
      MakeTable<simd::Avx512>(*Avx2Kernels(), Isa::kAvx512, {DotQ8_0, DequantizeQ8_0},
                              {DotQ4_0, DequantizeQ4_0}, AddAvx512BlockKernels);
  return &table;
}

}  // namespace primekv::quant::internal

#endif  // x86-64
