// Plain C++ kernels of the K-quants, IQ4 and Q4_1/Q5_0/Q5_1 (see kquants.h): the unpackers that
// define each layout, dequantisation and dot products through them, and round-to-nearest
// quantisers that write blocks ggml reads. The quantisers are shared by every ISA's table.
#include <cmath>
#include <cstring>

#include "primekv/quant/quant.h"
#include "quant/kquants.h"

namespace primekv::quant::internal {
namespace {

float Half(const uint8_t* p) { return F16ToF32(LoadU16(p)); }

// Stores f as fp16 (round to nearest, saturating at +-65504 instead of becoming inf) and returns
// the value stored, against which the quants are then rounded.
float StoreHalf(uint8_t* p, float f) {
  uint16_t h = F32ToF16(f);
  if ((h & 0x7FFFu) >= 0x7C00u) h = static_cast<uint16_t>((h & 0x8000u) | 0x7BFFu);
  std::memcpy(p, &h, sizeof(h));
  return F16ToF32(h);
}

// Quant of x on the grid step * q for q in [lo, hi]; 0 for a zero or non-finite step.
int QuantOn(float x, float step, int lo, int hi) {
  if (step == 0.0f || !std::isfinite(step)) return 0;
  return RoundClamp(x / step, lo, hi);
}

// Element of largest magnitude, sign kept (the first one on ties).
float SignedMax(const float* x, int n) {
  float amax = 0.0f, max = 0.0f;
  for (int i = 0; i < n; ++i) {
    if (std::fabs(x[i]) > amax) {
      amax = std::fabs(x[i]);
      max = x[i];
    }
  }
  return max;
}

// Index of the IQ4 grid value nearest to v.
int NearestIq4(float v) {
  int best = 0;
  float best_err = INFINITY;
  for (int k = 0; k < 16; ++k) {
    const float err = std::fabs(v - static_cast<float>(kIq4Values[k]));
    if (err < best_err) {
      best_err = err;
      best = k;
    }
  }
  return best;
}

// The (low, offset) of an affine group: its range is [lo, hi] with lo <= 0 so that the offset
// -lo is non-negative, as the K formats store it.
struct Affine {
  float scale;   // (hi - lo) / levels
  float offset;  // -lo >= 0
};
Affine AffineOf(const float* x, int n, int levels) {
  float lo = 0.0f, hi = -INFINITY;
  for (int i = 0; i < n; ++i) {
    if (!std::isnan(x[i])) {
      lo = std::fmin(lo, x[i]);
      hi = std::fmax(hi, x[i]);
    }
  }
  if (hi < lo) hi = lo;
  return {(hi - lo) / static_cast<float>(levels), -lo};
}

void SetGroups(Unpacked& u, int groups, float scale, float min) {
  for (int g = 0; g < groups; ++g) {
    u.scale[g] = scale;
    u.min[g] = min;
  }
}

// --- Unpackers: the definition of each layout. -------------------------------------------------

// Elements j and j + 16 of the 32-element formats share byte j: low nibble, high nibble.
void ScalesQ4_1(const uint8_t* b, Unpacked& u) { SetGroups(u, 2, Half(b), -Half(b + 2)); }
void ScalesD0(const uint8_t* b, Unpacked& u) { SetGroups(u, 2, Half(b), 0.0f); }

// 16 bytes of nibbles at b + kQs: element j is the low nibble of byte j, element j + 16 the high
// one; read through the IQ4 grid when kGrid.
template <int kQs, bool kGrid>
void UnpackNibbles(const uint8_t* b, Unpacked& u) {
  const uint8_t* qs = b + kQs;
  for (int j = 0; j < 16; ++j) {
    const int lo = qs[j] & 0x0F, hi = qs[j] >> 4;
    u.q[j] = kGrid ? kIq4Values[lo] : static_cast<int8_t>(lo);
    u.q[j + 16] = kGrid ? kIq4Values[hi] : static_cast<int8_t>(hi);
  }
}

// Q5: bit j of the little-endian qh word at b + kQh is the fifth bit of element j; the nibbles
// follow the word; values are recentred by -kBias.
template <int kQh, int kBias>
void UnpackQ5Quants(const uint8_t* b, Unpacked& u) {
  uint32_t qh;
  std::memcpy(&qh, b + kQh, sizeof(qh));
  const uint8_t* qs = b + kQh + 4;
  for (int j = 0; j < 16; ++j) {
    u.q[j] = static_cast<int8_t>(((qs[j] & 0x0F) | (((qh >> j) & 1u) << 4)) - kBias);
    u.q[j + 16] = static_cast<int8_t>(((qs[j] >> 4) | (((qh >> (j + 16)) & 1u) << 4)) - kBias);
  }
}

void UnpackQ4_1(const uint8_t* b, Unpacked& u) {
  UnpackNibbles<4, false>(b, u);
  ScalesQ4_1(b, u);
}

void UnpackQ5_0(const uint8_t* b, Unpacked& u) {
  UnpackQ5Quants<2, 16>(b, u);
  ScalesD0(b, u);
}

void UnpackQ5_1(const uint8_t* b, Unpacked& u) {
  UnpackQ5Quants<4, 0>(b, u);
  ScalesQ4_1(b, u);
}

void UnpackIq4Nl(const uint8_t* b, Unpacked& u) {
  UnpackNibbles<2, true>(b, u);
  ScalesD0(b, u);
}

// Q2_K and Q3_K: element e's two low bits sit in byte (e / 128) * 32 + e % 32 of qs, at bit
// 2 * ((e % 128) / 32).
int Low2Bits(const uint8_t* qs, int e) {
  return (qs[(e / 128) * 32 + e % 32] >> (2 * ((e % 128) / 32))) & 3;
}

// Q2_K: per 16-group a byte of 4-bit scale (low) and 4-bit min (high); value d*sc*q - dmin*m.
void ScalesQ2_K(const uint8_t* b, Unpacked& u) {
  const uint8_t* scales = b;
  const float d = Half(b + 80), dmin = Half(b + 82);
  for (int g = 0; g < 16; ++g) {
    u.scale[g] = d * static_cast<float>(scales[g] & 0x0F);
    u.min[g] = dmin * static_cast<float>(scales[g] >> 4);
  }
}

void UnpackQ2_K(const uint8_t* b, Unpacked& u) {
  for (int e = 0; e < kSuperBlock; ++e) u.q[e] = static_cast<int8_t>(Low2Bits(b + 16, e));
  ScalesQ2_K(b, u);
}

// Q3_K: a clear hmask bit (bit e / 32 of byte e % 32) subtracts 4 from the 2-bit quant. The 16
// 6-bit scales: low nibble of scale g in byte g % 8 at bit 4 * (g / 8), its top two bits in byte
// 8 + g % 4 at bit 2 * (g / 4); the scale used is d * (s - 32).
void ScalesQ3_K(const uint8_t* b, Unpacked& u) {
  const uint8_t* sc = b + 96;
  const float d = Half(b + 108);
  for (int g = 0; g < 16; ++g) {
    const int s =
        ((sc[g % 8] >> (4 * (g / 8))) & 0x0F) | (((sc[8 + g % 4] >> (2 * (g / 4))) & 3) << 4);
    u.scale[g] = d * static_cast<float>(s - 32);
    u.min[g] = 0.0f;
  }
}

void UnpackQ3_K(const uint8_t* b, Unpacked& u) {
  const uint8_t* hmask = b;
  for (int e = 0; e < kSuperBlock; ++e) {
    const int high = (hmask[e % 32] >> (e / 32)) & 1;
    u.q[e] = static_cast<int8_t>(Low2Bits(b + 32, e) - (high ? 0 : 4));
  }
  ScalesQ3_K(b, u);
}

// Q4_K/Q5_K: eight 6-bit (scale, min) pairs in 12 bytes. Pairs 0-3 are the low 6 bits of bytes
// 0-3 (scale) and 4-7 (min); pairs 4-7 take their low nibbles from bytes 8-11 (scale low, min
// high) and their top two bits from the top of bytes 0-3 (scale) and 4-7 (min).
void ScaleMinK4(const uint8_t* s, int j, int* scale, int* min) {
  if (j < 4) {
    *scale = s[j] & 63;
    *min = s[j + 4] & 63;
  } else {
    *scale = (s[j + 4] & 0x0F) | ((s[j - 4] >> 6) << 4);
    *min = (s[j + 4] >> 4) | ((s[j] >> 6) << 4);
  }
}

void ScalesK4(const uint8_t* b, Unpacked& u) {
  const uint8_t* scales = b + 4;
  const float d = Half(b), dmin = Half(b + 2);
  for (int j = 0; j < 8; ++j) {
    int sc, m;
    ScaleMinK4(scales, j, &sc, &m);
    const float scale = d * static_cast<float>(sc);
    const float min = dmin * static_cast<float>(m);
    u.scale[2 * j] = u.scale[2 * j + 1] = scale;
    u.min[2 * j] = u.min[2 * j + 1] = min;
  }
}

// Q4_K: sub-block j (32 elements) is the low (j even) or high nibble of qs[(j / 2) * 32 ...].
void UnpackQ4_K(const uint8_t* b, Unpacked& u) {
  const uint8_t* qs = b + 16;
  for (int e = 0; e < kSuperBlock; ++e) {
    const int j = e / 32;
    u.q[e] = static_cast<int8_t>((qs[(j / 2) * 32 + e % 32] >> (4 * (j & 1))) & 0x0F);
  }
  ScalesK4(b, u);
}

// Q5_K: Q4_K plus a fifth bit, bit j of qh[e % 32].
void UnpackQ5_K(const uint8_t* b, Unpacked& u) {
  const uint8_t* qh = b + 16;
  const uint8_t* qs = b + 48;
  for (int e = 0; e < kSuperBlock; ++e) {
    const int j = e / 32;
    const int low = (qs[(j / 2) * 32 + e % 32] >> (4 * (j & 1))) & 0x0F;
    u.q[e] = static_cast<int8_t>(low | (((qh[e % 32] >> j) & 1) << 4));
  }
  ScalesK4(b, u);
}

// Q6_K: in each half h of 128 elements, quarter k = r / 32, lane l = r % 32 (r = e % 128): the
// low nibble is in ql[h * 64 + (k & 1) * 32 + l] (low half for k < 2), the top two bits in
// qh[h * 32 + l] at bit 2k; the quant is that minus 32, scaled by d * int8 scale[e / 16].
void ScalesQ6_K(const uint8_t* b, Unpacked& u) {
  const auto* sc = reinterpret_cast<const int8_t*>(b + 192);
  const float d = Half(b + 208);
  for (int g = 0; g < 16; ++g) {
    u.scale[g] = d * static_cast<float>(sc[g]);
    u.min[g] = 0.0f;
  }
}

void UnpackQ6_K(const uint8_t* b, Unpacked& u) {
  const uint8_t* ql = b;
  const uint8_t* qh = b + 128;
  for (int e = 0; e < kSuperBlock; ++e) {
    const int h = e / 128, r = e % 128, k = r / 32, l = r % 32;
    const int low = (ql[h * 64 + (k & 1) * 32 + l] >> (4 * (k >> 1))) & 0x0F;
    const int high = (qh[h * 32 + l] >> (2 * k)) & 3;
    u.q[e] = static_cast<int8_t>((low | (high << 4)) - 32);
  }
  ScalesQ6_K(b, u);
}

// IQ4_XS: eight IQ4_NL-style sub-blocks of 32 sharing d; sub-block ib's 6-bit scale has its low
// nibble in scales_l[ib / 2] (low nibble for even ib) and its top two bits at bit 2 * ib of
// scales_h; the scale used is d * (ls - 32).
void ScalesIq4Xs(const uint8_t* b, Unpacked& u) {
  const float d = Half(b);
  const uint16_t scales_h = LoadU16(b + 2);
  const uint8_t* scales_l = b + 4;
  for (int ib = 0; ib < 8; ++ib) {
    const int ls =
        ((scales_l[ib / 2] >> (4 * (ib % 2))) & 0x0F) | (((scales_h >> (2 * ib)) & 3) << 4);
    const float scale = d * static_cast<float>(ls - 32);
    u.scale[2 * ib] = u.scale[2 * ib + 1] = scale;
    u.min[2 * ib] = u.min[2 * ib + 1] = 0.0f;
  }
}

void UnpackIq4Xs(const uint8_t* b, Unpacked& u) {
  const uint8_t* qs = b + 8;
  for (int ib = 0; ib < 8; ++ib) {
    for (int j = 0; j < 16; ++j) {
      u.q[32 * ib + j] = kIq4Values[qs[16 * ib + j] & 0x0F];
      u.q[32 * ib + j + 16] = kIq4Values[qs[16 * ib + j] >> 4];
    }
  }
  ScalesIq4Xs(b, u);
}

// --- Dequantisation and dot products through the unpacked form. -------------------------------

template <UnpackFn kUnpack, KBlock kLayout>
void DequantizeBlocks(const void* src, float* dst, int64_t n) {
  const auto* p = static_cast<const uint8_t*>(src);
  Unpacked u;
  for (int64_t b = 0; b < n / kLayout.elements; ++b, p += kLayout.bytes, dst += kLayout.elements) {
    kUnpack(p, u);
    for (int i = 0; i < kLayout.elements; ++i) {
      dst[i] = u.scale[i / kGroup16] * static_cast<float>(u.q[i]) - u.min[i / kGroup16];
    }
  }
}

template <UnpackFn kUnpack, KBlock kLayout>
float DotBlocks(const void* row, const float* x, int64_t n) {
  const auto* p = static_cast<const uint8_t*>(row);
  Unpacked u;
  float sum = 0.0f;
  for (int64_t b = 0; b < n / kLayout.elements; ++b, p += kLayout.bytes, x += kLayout.elements) {
    kUnpack(p, u);
    for (int g = 0; g < kLayout.elements / kGroup16; ++g) {
      float qx = 0.0f, sx = 0.0f;
      for (int i = g * kGroup16; i < (g + 1) * kGroup16; ++i) {
        qx += static_cast<float>(u.q[i]) * x[i];
        sx += x[i];
      }
      sum += u.scale[g] * qx - u.min[g] * sx;
    }
  }
  return sum;
}

// int8 activations: sum_g scale_g * (sum q qx) - min_g * bsum_g per block, times the block's d.
// The inner sums are exact integers, so only the per-group float steps round.
template <UnpackFn kUnpack, KBlock kLayout>
float DotQ8KBlocks(const void* row, const Q8KBlock* x, int64_t n) {
  static_assert(kLayout.elements == kSuperBlock);
  const auto* p = static_cast<const uint8_t*>(row);
  Unpacked u;
  float sum = 0.0f;
  for (int64_t b = 0; b < n / kSuperBlock; ++b, p += kLayout.bytes, ++x) {
    kUnpack(p, u);
    float block = 0.0f;
    for (int g = 0; g < kSuperBlock / kGroup16; ++g) {
      int isum = 0;
      for (int i = g * kGroup16; i < (g + 1) * kGroup16; ++i) isum += u.q[i] * x->qs[i];
      block += u.scale[g] * static_cast<float>(isum) - u.min[g] * static_cast<float>(x->bsums[g]);
    }
    sum += x->d * block;
  }
  return sum;
}

// --- Round-to-nearest quantisers. ---------------------------------------------------------------

// Q4_1 / Q5_1: d = (max - min) / levels, m = min; quants rounded against the stored d and m.
template <int kLevels>
void AffineQuants32(const float* x, uint8_t* b, int* q) {
  float lo = INFINITY, hi = -INFINITY;
  for (int j = 0; j < 32; ++j) {
    if (!std::isnan(x[j])) {
      lo = std::fmin(lo, x[j]);
      hi = std::fmax(hi, x[j]);
    }
  }
  if (hi < lo) lo = hi = 0.0f;
  const float d = StoreHalf(b, (hi - lo) / kLevels);
  const float m = StoreHalf(b + 2, lo);
  for (int j = 0; j < 32; ++j) q[j] = QuantOn(x[j] - m, d, 0, kLevels);
}

void PackNibbles32(const int* q, uint8_t* qs) {
  for (int j = 0; j < 16; ++j)
    qs[j] = static_cast<uint8_t>((q[j] & 0x0F) | ((q[j + 16] & 0x0F) << 4));
}

void PackHighBits32(const int* q, uint8_t* qh) {
  uint32_t bits = 0;
  for (int j = 0; j < 32; ++j) bits |= static_cast<uint32_t>((q[j] >> 4) & 1) << j;
  std::memcpy(qh, &bits, sizeof(bits));
}

void EncodeQ4_1(const float* src, uint8_t* b) {
  int q[32];
  AffineQuants32<15>(src, b, q);
  PackNibbles32(q, b + 4);
}

void EncodeQ5_1(const float* src, uint8_t* b) {
  int q[32];
  AffineQuants32<31>(src, b, q);
  PackHighBits32(q, b + 4);
  PackNibbles32(q, b + 8);
}

// Q5_0: as Q4_0, the element of largest magnitude maps to quant -16 (d = max / -16).
void EncodeQ5_0(const float* src, uint8_t* b) {
  int q[32];
  const float d = StoreHalf(b, SignedMax(src, 32) / -16.0f);
  for (int j = 0; j < 32; ++j) q[j] = QuantOn(src[j], d, -16, 15) + 16;
  PackHighBits32(q, b + 2);
  PackNibbles32(q, b + 6);
}

// IQ4_NL: the element of largest magnitude maps to the grid's -127 end; others to the nearest
// grid value.
void EncodeIq4Nl(const float* src, uint8_t* b) {
  int q[32];
  const float d = StoreHalf(b, SignedMax(src, 32) / -127.0f);
  for (int j = 0; j < 32; ++j) q[j] = d == 0.0f ? 8 : NearestIq4(src[j] / d);
  PackNibbles32(q, b + 2);
}

// Affine K formats (Q2_K, Q4_K, Q5_K): per group a range scale and a non-negative offset, both
// quantised to `sub_bits` against super-block maxima d and dmin; then every element rounded on
// its group's stored grid dl * q - ml.
template <int kGroups, int kLevels, int kSubMax>
void AffineK(const float* x, uint8_t* d_at, uint8_t* dmin_at, int* sc, int* m, int* q) {
  constexpr int kSize = kSuperBlock / kGroups;
  Affine a[kGroups];
  float max_scale = 0.0f, max_offset = 0.0f;
  for (int g = 0; g < kGroups; ++g) {
    a[g] = AffineOf(x + g * kSize, kSize, kLevels);
    max_scale = std::fmax(max_scale, a[g].scale);
    max_offset = std::fmax(max_offset, a[g].offset);
  }
  const float d = StoreHalf(d_at, max_scale / kSubMax);
  const float dmin = StoreHalf(dmin_at, max_offset / kSubMax);
  for (int g = 0; g < kGroups; ++g) {
    sc[g] = QuantOn(a[g].scale, d, 0, kSubMax);
    m[g] = QuantOn(a[g].offset, dmin, 0, kSubMax);
    const float dl = d * static_cast<float>(sc[g]);
    const float ml = dmin * static_cast<float>(m[g]);
    for (int i = g * kSize; i < (g + 1) * kSize; ++i) q[i] = QuantOn(x[i] + ml, dl, 0, kLevels);
  }
}

// Symmetric K formats (Q3_K, Q6_K, IQ4_XS): per group the ideal step max / -qmin; the largest
// one in magnitude maps to the sub-scale -sub_lo, the others rounded against d.
template <int kGroups>
float SymmetricK(const float* x, float qmin, float sub_lo, int sub_hi, uint8_t* d_at, int* sub) {
  constexpr int kSize = kSuperBlock / kGroups;
  float steps[kGroups];
  for (int g = 0; g < kGroups; ++g) steps[g] = SignedMax(x + g * kSize, kSize) / -qmin;
  const float d = StoreHalf(d_at, SignedMax(steps, kGroups) / -sub_lo);
  for (int g = 0; g < kGroups; ++g) {
    sub[g] = QuantOn(steps[g], d, -static_cast<int>(sub_lo), sub_hi);
  }
  return d;
}

void EncodeQ2_K(const float* src, uint8_t* b) {
  int sc[16], m[16], q[kSuperBlock];
  std::memset(b, 0, kQ2_K.bytes);
  AffineK<16, 3, 15>(src, b + 80, b + 82, sc, m, q);
  for (int g = 0; g < 16; ++g) b[g] = static_cast<uint8_t>(sc[g] | (m[g] << 4));
  for (int e = 0; e < kSuperBlock; ++e) {
    b[16 + (e / 128) * 32 + e % 32] |= static_cast<uint8_t>(q[e] << (2 * ((e % 128) / 32)));
  }
}

void EncodeQ3_K(const float* src, uint8_t* b) {
  int s[16];
  std::memset(b, 0, kQ3_K.bytes);
  const float d = SymmetricK<16>(src, 4.0f, 32.0f, 31, b + 108, s);
  for (int g = 0; g < 16; ++g) {
    const float dl = d * static_cast<float>(s[g]);
    for (int e = g * 16; e < (g + 1) * 16; ++e) {
      const int q = QuantOn(src[e], dl, -4, 3) + 4;  // 0..7: two low bits, and the hmask bit
      b[32 + (e / 128) * 32 + e % 32] |= static_cast<uint8_t>((q & 3) << (2 * ((e % 128) / 32)));
      b[e % 32] |= static_cast<uint8_t>((q >> 2) << (e / 32));
    }
    const int stored = s[g] + 32;
    b[96 + g % 8] |= static_cast<uint8_t>((stored & 0x0F) << (4 * (g / 8)));
    b[96 + 8 + g % 4] |= static_cast<uint8_t>((stored >> 4) << (2 * (g / 4)));
  }
}

// The 12-byte (scale, min) packing of Q4_K/Q5_K; the inverse of ScaleMinK4.
void PackScaleMinK4(const int* sc, const int* m, uint8_t* s) {
  for (int j = 0; j < 4; ++j) {
    s[j] = static_cast<uint8_t>(sc[j] | ((sc[j + 4] >> 4) << 6));
    s[j + 4] = static_cast<uint8_t>(m[j] | ((m[j + 4] >> 4) << 6));
    s[j + 8] = static_cast<uint8_t>((sc[j + 4] & 0x0F) | ((m[j + 4] & 0x0F) << 4));
  }
}

// Q4_K and Q5_K (kBits = 4, 5): the low nibbles after the scales (Q5_K: after its plane of fifth
// bits, bit j of byte e % 32 for sub-block j = e / 32).
template <int kBits>
void EncodeK45(const float* src, uint8_t* b) {
  constexpr KBlock kLayout = kBits == 5 ? kQ5_K : kQ4_K;
  constexpr int kQs = kBits == 5 ? 48 : 16;
  int sc[8], m[8], q[kSuperBlock];
  std::memset(b, 0, kLayout.bytes);
  AffineK<8, (1 << kBits) - 1, 63>(src, b, b + 2, sc, m, q);
  PackScaleMinK4(sc, m, b + 4);
  for (int e = 0; e < kSuperBlock; ++e) {
    const int j = e / 32;
    b[kQs + (j / 2) * 32 + e % 32] |= static_cast<uint8_t>((q[e] & 0x0F) << (4 * (j & 1)));
    if constexpr (kBits == 5) b[16 + e % 32] |= static_cast<uint8_t>((q[e] >> 4) << j);
  }
}

void EncodeQ6_K(const float* src, uint8_t* b) {
  int s[16];
  std::memset(b, 0, kQ6_K.bytes);
  const float d = SymmetricK<16>(src, 32.0f, 128.0f, 127, b + 208, s);
  for (int g = 0; g < 16; ++g) {
    b[192 + g] = static_cast<uint8_t>(static_cast<int8_t>(s[g]));
    const float dl = d * static_cast<float>(s[g]);
    for (int e = g * 16; e < (g + 1) * 16; ++e) {
      const int q = QuantOn(src[e], dl, -32, 31) + 32;
      const int h = e / 128, r = e % 128, kq = r / 32, l = r % 32;
      b[h * 64 + (kq & 1) * 32 + l] |= static_cast<uint8_t>((q & 0x0F) << (4 * (kq >> 1)));
      b[128 + h * 32 + l] |= static_cast<uint8_t>((q >> 4) << (2 * kq));
    }
  }
}

void EncodeIq4Xs(const float* src, uint8_t* b) {
  int s[8];
  std::memset(b, 0, kIq4Xs.bytes);
  const float d = SymmetricK<8>(src, 127.0f, 32.0f, 31, b, s);
  uint16_t scales_h = 0;
  for (int ib = 0; ib < 8; ++ib) {
    const int ls = s[ib] + 32;
    scales_h = static_cast<uint16_t>(scales_h | ((ls >> 4) << (2 * ib)));
    b[4 + ib / 2] |= static_cast<uint8_t>((ls & 0x0F) << (4 * (ib % 2)));
    const float dl = d * static_cast<float>(s[ib]);
    for (int j = 0; j < 32; ++j) {
      const int idx = dl == 0.0f || !std::isfinite(dl) ? 8 : NearestIq4(src[32 * ib + j] / dl);
      b[8 + 16 * ib + j % 16] |= static_cast<uint8_t>(idx << (4 * (j / 16)));
    }
  }
  std::memcpy(b + 2, &scales_h, sizeof(scales_h));
}

// A row quantiser from the encoder of one block.
template <KBlock kLayout, void (*kEncode)(const float*, uint8_t*)>
void QuantizeBlocks(const float* src, void* dst, int64_t n) {
  auto* b = static_cast<uint8_t*>(dst);
  for (int64_t k = 0; k < n / kLayout.elements; ++k, b += kLayout.bytes, src += kLayout.elements) {
    kEncode(src, b);
  }
}

template <UnpackFn kUnpack, KBlock kLayout>
TypeKernels Kernels(QuantizeFn quantize) {
  TypeKernels k{DotBlocks<kUnpack, kLayout>, DequantizeBlocks<kUnpack, kLayout>, quantize};
  if constexpr (kLayout.elements == kSuperBlock) k.dot_q8k = DotQ8KBlocks<kUnpack, kLayout>;
  return k;
}

}  // namespace

void QuantizeQ8K(const float* x, Q8KBlock* out, int64_t n) {
  for (int64_t b = 0; b < n / kSuperBlock; ++b, x += kSuperBlock, ++out) {
    const float max = SignedMax(x, kSuperBlock);
    std::memset(out->bsums, 0, sizeof(out->bsums));
    std::memset(out->bsum32, 0, sizeof(out->bsum32));
    if (max == 0.0f || !std::isfinite(max)) {
      out->d = 0.0f;
      std::memset(out->qs, 0, sizeof(out->qs));
      continue;
    }
    const float iscale = -127.0f / max;
    for (int j = 0; j < kSuperBlock; ++j) {
      const float v = std::nearbyint(iscale * x[j]);
      const int q = std::isnan(v) ? 0 : static_cast<int>(std::fmax(-128.0f, std::fmin(127.0f, v)));
      out->qs[j] = static_cast<int8_t>(q);
      out->bsums[j / kGroup16] = static_cast<int16_t>(out->bsums[j / kGroup16] + q);
    }
    FillBsum32(*out);
    out->d = 1.0f / iscale;
  }
}

KBlock BlockOf(GgmlType type) {
  for (GgmlType t : kBlockTypes) {
    if (t == type) return LayoutOf(type);
  }
  return {0, 0};
}

namespace {

struct ScalarFormat {
  GgmlType type;
  UnpackFn unpack;
  UnpackFn scales;
};
constexpr ScalarFormat kScalarFormats[] = {
    {GgmlType::kQ4_1, UnpackQ4_1, ScalesQ4_1}, {GgmlType::kQ5_0, UnpackQ5_0, ScalesD0},
    {GgmlType::kQ5_1, UnpackQ5_1, ScalesQ4_1}, {GgmlType::kIQ4_NL, UnpackIq4Nl, ScalesD0},
    {GgmlType::kQ2_K, UnpackQ2_K, ScalesQ2_K}, {GgmlType::kQ3_K, UnpackQ3_K, ScalesQ3_K},
    {GgmlType::kQ4_K, UnpackQ4_K, ScalesK4},   {GgmlType::kQ5_K, UnpackQ5_K, ScalesK4},
    {GgmlType::kQ6_K, UnpackQ6_K, ScalesQ6_K}, {GgmlType::kIQ4_XS, UnpackIq4Xs, ScalesIq4Xs},
};

const ScalarFormat* FindFormat(GgmlType type) {
  for (const ScalarFormat& f : kScalarFormats) {
    if (f.type == type) return &f;
  }
  return nullptr;
}

}  // namespace

UnpackFn ScalarScales(GgmlType type) {
  const ScalarFormat* f = FindFormat(type);
  return f != nullptr ? f->scales : nullptr;
}

UnpackFn ScalarUnpack(GgmlType type) {
  const ScalarFormat* f = FindFormat(type);
  return f != nullptr ? f->unpack : nullptr;
}

void AddScalarBlockKernels(KernelTable& t) {
  t.q4_1 = Kernels<UnpackQ4_1, kQ4_1>(QuantizeBlocks<kQ4_1, EncodeQ4_1>);
  t.q5_0 = Kernels<UnpackQ5_0, kQ5_0>(QuantizeBlocks<kQ5_0, EncodeQ5_0>);
  t.q5_1 = Kernels<UnpackQ5_1, kQ5_1>(QuantizeBlocks<kQ5_1, EncodeQ5_1>);
  t.iq4_nl = Kernels<UnpackIq4Nl, kIq4Nl>(QuantizeBlocks<kIq4Nl, EncodeIq4Nl>);
  t.q2_k = Kernels<UnpackQ2_K, kQ2_K>(QuantizeBlocks<kQ2_K, EncodeQ2_K>);
  t.q3_k = Kernels<UnpackQ3_K, kQ3_K>(QuantizeBlocks<kQ3_K, EncodeQ3_K>);
  t.q4_k = Kernels<UnpackQ4_K, kQ4_K>(QuantizeBlocks<kQ4_K, EncodeK45<4>>);
  t.q5_k = Kernels<UnpackQ5_K, kQ5_K>(QuantizeBlocks<kQ5_K, EncodeK45<5>>);
  t.q6_k = Kernels<UnpackQ6_K, kQ6_K>(QuantizeBlocks<kQ6_K, EncodeQ6_K>);
  t.iq4_xs = Kernels<UnpackIq4Xs, kIq4Xs>(QuantizeBlocks<kIq4Xs, EncodeIq4Xs>);
}

}  // namespace primekv::quant::internal
