// AVX2 + FMA + F16C row kernels (8 floats a vector). Compiled with a target pragma rather than
// global -m flags, and only called after the CPU check in dispatch.cc, so the binary still runs on
// any x86-64. All headers are included before the pragma so no inline library code is compiled
// for AVX2 and then shared with generic callers.
#include <cstdint>
#include <cstring>

#include "quant/kernels.h"
#include "quant/kquants.h"

#if defined(__x86_64__)
#include <immintrin.h>

// Clang has no GCC target pragmas; its attribute pragma does the same.
#if defined(__clang__)
#pragma clang attribute push(__attribute__((target("avx2,fma,f16c"))), apply_to = function)
#else
#pragma GCC push_options
#pragma GCC target("avx2,fma,f16c")
#endif

namespace primekv::quant::internal {
namespace {

float HorizontalSum(__m256 v) {
  __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  s = _mm_add_ps(s, _mm_movehl_ps(s, s));
  s = _mm_add_ss(s, _mm_movehdup_ps(s));
  return _mm_cvtss_f32(s);
}

float LoadHalf(const uint8_t* p) {
  uint16_t h;
  std::memcpy(&h, p, sizeof(h));
  return _cvtsh_ss(h);
}

float LoadBf16(const uint8_t* p) {
  uint16_t h;
  std::memcpy(&h, p, sizeof(h));
  const uint32_t bits = static_cast<uint32_t>(h) << 16;
  float f;
  std::memcpy(&f, &bits, sizeof(f));
  return f;
}

__m256 LoadF16x8(const uint8_t* p) {
  return _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p)));
}

__m256 LoadBf16x8(const uint8_t* p) {
  const __m256i wide = _mm256_cvtepu16_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p)));
  return _mm256_castsi256_ps(_mm256_slli_epi32(wide, 16));
}

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

float DotF32(const void* row, const float* x, int64_t n) {
  const auto* w = static_cast<const float*>(row);
  __m256 a0 = _mm256_setzero_ps(), a1 = _mm256_setzero_ps();
  __m256 a2 = _mm256_setzero_ps(), a3 = _mm256_setzero_ps();
  int64_t i = 0;
  for (; i + 32 <= n; i += 32) {
    a0 = _mm256_fmadd_ps(_mm256_loadu_ps(w + i), _mm256_loadu_ps(x + i), a0);
    a1 = _mm256_fmadd_ps(_mm256_loadu_ps(w + i + 8), _mm256_loadu_ps(x + i + 8), a1);
    a2 = _mm256_fmadd_ps(_mm256_loadu_ps(w + i + 16), _mm256_loadu_ps(x + i + 16), a2);
    a3 = _mm256_fmadd_ps(_mm256_loadu_ps(w + i + 24), _mm256_loadu_ps(x + i + 24), a3);
  }
  for (; i + 8 <= n; i += 8)
    a0 = _mm256_fmadd_ps(_mm256_loadu_ps(w + i), _mm256_loadu_ps(x + i), a0);
  float sum = HorizontalSum(_mm256_add_ps(_mm256_add_ps(a0, a1), _mm256_add_ps(a2, a3)));
  for (; i < n; ++i) sum += w[i] * x[i];
  return sum;
}

float DotF16(const void* row, const float* x, int64_t n) {
  const auto* w = static_cast<const uint8_t*>(row);
  __m256 a0 = _mm256_setzero_ps(), a1 = _mm256_setzero_ps();
  __m256 a2 = _mm256_setzero_ps(), a3 = _mm256_setzero_ps();
  int64_t i = 0;
  for (; i + 32 <= n; i += 32) {
    a0 = _mm256_fmadd_ps(LoadF16x8(w + 2 * i), _mm256_loadu_ps(x + i), a0);
    a1 = _mm256_fmadd_ps(LoadF16x8(w + 2 * i + 16), _mm256_loadu_ps(x + i + 8), a1);
    a2 = _mm256_fmadd_ps(LoadF16x8(w + 2 * i + 32), _mm256_loadu_ps(x + i + 16), a2);
    a3 = _mm256_fmadd_ps(LoadF16x8(w + 2 * i + 48), _mm256_loadu_ps(x + i + 24), a3);
  }
  for (; i + 8 <= n; i += 8) a0 = _mm256_fmadd_ps(LoadF16x8(w + 2 * i), _mm256_loadu_ps(x + i), a0);
  float sum = HorizontalSum(_mm256_add_ps(_mm256_add_ps(a0, a1), _mm256_add_ps(a2, a3)));
  for (; i < n; ++i) sum += LoadHalf(w + 2 * i) * x[i];
  return sum;
}

float DotBf16(const void* row, const float* x, int64_t n) {
  const auto* w = static_cast<const uint8_t*>(row);
  __m256 a0 = _mm256_setzero_ps(), a1 = _mm256_setzero_ps();
  __m256 a2 = _mm256_setzero_ps(), a3 = _mm256_setzero_ps();
  int64_t i = 0;
  for (; i + 32 <= n; i += 32) {
    a0 = _mm256_fmadd_ps(LoadBf16x8(w + 2 * i), _mm256_loadu_ps(x + i), a0);
    a1 = _mm256_fmadd_ps(LoadBf16x8(w + 2 * i + 16), _mm256_loadu_ps(x + i + 8), a1);
    a2 = _mm256_fmadd_ps(LoadBf16x8(w + 2 * i + 32), _mm256_loadu_ps(x + i + 16), a2);
    a3 = _mm256_fmadd_ps(LoadBf16x8(w + 2 * i + 48), _mm256_loadu_ps(x + i + 24), a3);
  }
  for (; i + 8 <= n; i += 8)
    a0 = _mm256_fmadd_ps(LoadBf16x8(w + 2 * i), _mm256_loadu_ps(x + i), a0);
  float sum = HorizontalSum(_mm256_add_ps(_mm256_add_ps(a0, a1), _mm256_add_ps(a2, a3)));
  for (; i < n; ++i) sum += LoadBf16(w + 2 * i) * x[i];
  return sum;
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
  return HorizontalSum(_mm256_add_ps(a0, a1));
}

float DotQ8_0(const void* row, const float* x, int64_t n) {
  return DotBlocks<kQ8_0BlockBytes, Q8_0BlockDot>(row, x, n);
}

float DotQ4_0(const void* row, const float* x, int64_t n) {
  return DotBlocks<kQ4_0BlockBytes, Q4_0BlockDot>(row, x, n);
}

void DequantizeF16(const void* src, float* dst, int64_t n) {
  const auto* s = static_cast<const uint8_t*>(src);
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) _mm256_storeu_ps(dst + i, LoadF16x8(s + 2 * i));
  for (; i < n; ++i) dst[i] = LoadHalf(s + 2 * i);
}

void DequantizeBf16(const void* src, float* dst, int64_t n) {
  const auto* s = static_cast<const uint8_t*>(src);
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) _mm256_storeu_ps(dst + i, LoadBf16x8(s + 2 * i));
  for (; i < n; ++i) dst[i] = LoadBf16(s + 2 * i);
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

// GEMM tile: 16 tokens (two vectors) by up to 6 weight rows, 12 accumulators in registers.
constexpr int kGroup = 16;
constexpr int kTileRows = 6;

template <int kRows, int kVecs>
void Tile(const float* xp, const float* w, int64_t ldw, int64_t kc, float* acc, bool accumulate) {
  __m256 c[kRows][kVecs];
  for (int j = 0; j < kRows; ++j) {
    for (int v = 0; v < kVecs; ++v) {
      c[j][v] = accumulate ? _mm256_loadu_ps(acc + j * kGroup + 8 * v) : _mm256_setzero_ps();
    }
  }
  for (int64_t k = 0; k < kc; ++k) {
    __m256 xv[kVecs];
    for (int v = 0; v < kVecs; ++v) xv[v] = _mm256_loadu_ps(xp + k * kGroup + 8 * v);
    for (int j = 0; j < kRows; ++j) {
      const __m256 b = _mm256_broadcast_ss(w + j * ldw + k);
      for (int v = 0; v < kVecs; ++v) c[j][v] = _mm256_fmadd_ps(xv[v], b, c[j][v]);
    }
  }
  for (int j = 0; j < kRows; ++j) {
    for (int v = 0; v < kVecs; ++v) _mm256_storeu_ps(acc + j * kGroup + 8 * v, c[j][v]);
  }
}

template <int kVecs>
void TileRows(const float* xp, const float* w, int64_t ldw, int rows, int64_t kc, float* acc,
              bool accumulate) {
  switch (rows) {
    case 1:
      return Tile<1, kVecs>(xp, w, ldw, kc, acc, accumulate);
    case 2:
      return Tile<2, kVecs>(xp, w, ldw, kc, acc, accumulate);
    case 3:
      return Tile<3, kVecs>(xp, w, ldw, kc, acc, accumulate);
    case 4:
      return Tile<4, kVecs>(xp, w, ldw, kc, acc, accumulate);
    case 5:
      return Tile<5, kVecs>(xp, w, ldw, kc, acc, accumulate);
    default:
      return Tile<6, kVecs>(xp, w, ldw, kc, acc, accumulate);
  }
}

// Lanes past `tokens` in a skipped vector are left as they were: they are padding and never read.
void GemmTile(const float* xp, int tokens, const float* w, int64_t ldw, int rows, int64_t kc,
              float* acc, bool accumulate) {
  if (tokens <= 8) {
    TileRows<1>(xp, w, ldw, rows, kc, acc, accumulate);
  } else {
    TileRows<2>(xp, w, ldw, rows, kc, acc, accumulate);
  }
}

}  // namespace
}  // namespace primekv::quant::internal

#if defined(__clang__)
#pragma clang attribute pop
#else
#pragma GCC pop_options
#endif

namespace primekv::quant::internal {

// Outside the target region: building the table must not itself use AVX instructions, since
// dispatch may ask for it on a CPU without them.
const KernelTable* Avx2Kernels() {
  static const KernelTable table = [] {
    KernelTable t = ScalarKernels();
    t.isa = Isa::kAvx2;
    t.f32.dot = DotF32;
    t.f16 = {DotF16, DequantizeF16, QuantizeF16};
    t.bf16 = {DotBf16, DequantizeBf16, QuantizeBf16};
    t.q8_0.dot = DotQ8_0;
    t.q8_0.dequantize = DequantizeQ8_0;
    t.q4_0.dot = DotQ4_0;
    t.q4_0.dequantize = DequantizeQ4_0;
    AddAvx2BlockKernels(t);
    t.gemm_tile = GemmTile;
    t.gemm_group = kGroup;
    t.gemm_rows = kTileRows;
    return t;
  }();
  return &table;
}

}  // namespace primekv::quant::internal

#else  // not x86-64

namespace primekv::quant::internal {
const KernelTable* Avx2Kernels() { return nullptr; }
}  // namespace primekv::quant::internal

#endif
