// Plain C++ row kernels: the portable fallback and the twin every SIMD kernel is tested against.
#include <cmath>
#include <cstring>

#include "primekv/quant/quant.h"
#include "quant/kernels.h"
#include "quant/kquants.h"

namespace primekv::quant::internal {
namespace {

// The scale as stored: the fp16 of smallest magnitude >= |d|, so the block's largest element
// stays on the quant grid without clamping, even where fp16 is coarse (subnormal scales, i.e.
// blocks with max|x| below ~0.008 for Q8_0). Saturates at 65504 instead of becoming inf.
uint16_t EncodeScale(float d) {
  auto h = F32ToF16(d);
  if ((h & 0x7FFFu) < 0x7C00u && std::fabs(F16ToF32(h)) < std::fabs(d)) ++h;
  if ((h & 0x7FFFu) >= 0x7C00u) h = static_cast<uint16_t>((h & 0x8000u) | 0x7BFFu);
  return h;
}

float LoadF32(const uint8_t* row, int64_t i) {
  float f;
  std::memcpy(&f, row + 4 * i, sizeof(f));
  return f;
}
float LoadF16(const uint8_t* row, int64_t i) { return F16ToF32(LoadU16(row + 2 * i)); }
float LoadBf16(const uint8_t* row, int64_t i) { return Bf16ToF32(LoadU16(row + 2 * i)); }

// sum += w[i] * x[i] in element order, for up to 4 activation rows at a time (each element
// converted once); one row is the single dot, so both give the same bits.
template <float (*Load)(const uint8_t*, int64_t)>
void DotRows(const void* w, size_t row_bytes, int64_t w_rows, const float* x, int64_t x_stride,
             int rows, int64_t n, float* out, int64_t out_stride) {
  for (int64_t j = 0; j < w_rows; ++j) {
    const uint8_t* row = static_cast<const uint8_t*>(w) + static_cast<size_t>(j) * row_bytes;
    for (int r0 = 0; r0 < rows; r0 += 4) {
      const int m = rows - r0 < 4 ? rows - r0 : 4;
      float sum[4] = {};
      for (int64_t i = 0; i < n; ++i) {
        const float v = Load(row, i);
        for (int r = 0; r < m; ++r) sum[r] += v * x[(r0 + r) * x_stride + i];
      }
      for (int r = 0; r < m; ++r) out[(r0 + r) * out_stride + j] = sum[r];
    }
  }
}

template <float (*Load)(const uint8_t*, int64_t)>
float Dot(const void* row, const float* x, int64_t n) {
  float sum;
  DotRows<Load>(row, 0, 1, x, 0, 1, n, &sum, 0);
  return sum;
}

float DotQ8_0(const void* row, const float* x, int64_t n) {
  const auto* p = static_cast<const uint8_t*>(row);
  float sum = 0.0f;
  for (int64_t b = 0; b < n / kQ8_0Block; ++b, p += kQ8_0BlockBytes, x += kQ8_0Block) {
    const auto* q = reinterpret_cast<const int8_t*>(p + 2);
    float block = 0.0f;
    for (int j = 0; j < kQ8_0Block; ++j) block += static_cast<float>(q[j]) * x[j];
    sum += F16ToF32(LoadU16(p)) * block;
  }
  return sum;
}

float DotQ4_0(const void* row, const float* x, int64_t n) {
  const auto* p = static_cast<const uint8_t*>(row);
  float sum = 0.0f;
  for (int64_t b = 0; b < n / kQ4_0Block; ++b, p += kQ4_0BlockBytes, x += kQ4_0Block) {
    float block = 0.0f;
    for (int j = 0; j < 16; ++j) {
      block += static_cast<float>((p[2 + j] & 0x0F) - 8) * x[j];
      block += static_cast<float>((p[2 + j] >> 4) - 8) * x[j + 16];
    }
    sum += F16ToF32(LoadU16(p)) * block;
  }
  return sum;
}

void DequantizeF32(const void* src, float* dst, int64_t n) {
  if (n > 0) std::memcpy(dst, src, static_cast<size_t>(n) * sizeof(float));
}

void DequantizeF16(const void* src, float* dst, int64_t n) {
  const auto* s = static_cast<const uint8_t*>(src);
  for (int64_t i = 0; i < n; ++i) dst[i] = F16ToF32(LoadU16(s + 2 * i));
}

void DequantizeBf16(const void* src, float* dst, int64_t n) {
  const auto* s = static_cast<const uint8_t*>(src);
  for (int64_t i = 0; i < n; ++i) dst[i] = Bf16ToF32(LoadU16(s + 2 * i));
}

void DequantizeQ8_0(const void* src, float* dst, int64_t n) {
  const auto* p = static_cast<const uint8_t*>(src);
  for (int64_t b = 0; b < n / kQ8_0Block; ++b, p += kQ8_0BlockBytes, dst += kQ8_0Block) {
    const float d = F16ToF32(LoadU16(p));
    const auto* q = reinterpret_cast<const int8_t*>(p + 2);
    for (int j = 0; j < kQ8_0Block; ++j) dst[j] = d * static_cast<float>(q[j]);
  }
}

void DequantizeQ4_0(const void* src, float* dst, int64_t n) {
  const auto* p = static_cast<const uint8_t*>(src);
  for (int64_t b = 0; b < n / kQ4_0Block; ++b, p += kQ4_0BlockBytes, dst += kQ4_0Block) {
    const float d = F16ToF32(LoadU16(p));
    for (int j = 0; j < 16; ++j) {
      dst[j] = d * static_cast<float>((p[2 + j] & 0x0F) - 8);
      dst[j + 16] = d * static_cast<float>((p[2 + j] >> 4) - 8);
    }
  }
}

void QuantizeF32(const float* src, void* dst, int64_t n) {
  if (n > 0) std::memcpy(dst, src, static_cast<size_t>(n) * sizeof(float));
}

void QuantizeF16(const float* src, void* dst, int64_t n) {
  auto* d = static_cast<uint8_t*>(dst);
  for (int64_t i = 0; i < n; ++i) {
    const uint16_t h = F32ToF16(src[i]);
    std::memcpy(d + 2 * i, &h, sizeof(h));
  }
}

void QuantizeBf16(const float* src, void* dst, int64_t n) {
  auto* d = static_cast<uint8_t*>(dst);
  for (int64_t i = 0; i < n; ++i) {
    const uint16_t h = F32ToBf16(src[i]);
    std::memcpy(d + 2 * i, &h, sizeof(h));
  }
}

// Q8_0: d = max|x| / 127, stored as fp16 rounded up (EncodeScale). The quants are rounded
// against that stored d, so every element's error is at most half of the scale actually used.
void QuantizeQ8_0(const float* src, void* dst, int64_t n) {
  auto* p = static_cast<uint8_t*>(dst);
  for (int64_t b = 0; b < n / kQ8_0Block; ++b, p += kQ8_0BlockBytes, src += kQ8_0Block) {
    float amax = 0.0f;
    for (int j = 0; j < kQ8_0Block; ++j) amax = std::fmax(amax, std::fabs(src[j]));
    const uint16_t d16 = EncodeScale(amax / 127.0f);
    std::memcpy(p, &d16, sizeof(d16));
    const float d = F16ToF32(d16);
    for (int j = 0; j < kQ8_0Block; ++j) {
      const int q = d == 0.0f ? 0 : RoundClamp(src[j] / d, -127, 127);
      p[2 + j] = static_cast<uint8_t>(static_cast<int8_t>(q));
    }
  }
}

// Q4_0: the element of largest magnitude, sign kept, maps to quant 0 (-8 * d), so d = max / -8
// (stored rounded away from zero) and that element is exact up to the fp16 rounding of d; the
// opposite extreme, up to +8 d, clamps at 15 (7 d).
void QuantizeQ4_0(const float* src, void* dst, int64_t n) {
  auto* p = static_cast<uint8_t*>(dst);
  for (int64_t b = 0; b < n / kQ4_0Block; ++b, p += kQ4_0BlockBytes, src += kQ4_0Block) {
    float amax = 0.0f;
    float max = 0.0f;
    for (int j = 0; j < kQ4_0Block; ++j) {
      if (std::fabs(src[j]) > amax) {
        amax = std::fabs(src[j]);
        max = src[j];
      }
    }
    const uint16_t d16 = EncodeScale(max / -8.0f);
    std::memcpy(p, &d16, sizeof(d16));
    const float d = F16ToF32(d16);
    int q[kQ4_0Block];
    for (int j = 0; j < kQ4_0Block; ++j) q[j] = d == 0.0f ? 8 : RoundClamp(src[j] / d, -8, 7) + 8;
    for (int j = 0; j < 16; ++j) p[2 + j] = static_cast<uint8_t>(q[j] | (q[j + 16] << 4));
  }
}

constexpr int kScalarGroup = 8;

void GemmTile(const float* xp, int /*tokens*/, const float* w, int64_t ldw, int rows, int64_t kc,
              float* acc, bool accumulate) {
  for (int j = 0; j < rows; ++j) {
    float sum[kScalarGroup] = {};
    for (int64_t k = 0; k < kc; ++k) {
      const float wk = w[j * ldw + k];
      for (int t = 0; t < kScalarGroup; ++t) sum[t] += wk * xp[k * kScalarGroup + t];
    }
    for (int t = 0; t < kScalarGroup; ++t) {
      acc[j * kScalarGroup + t] = (accumulate ? acc[j * kScalarGroup + t] : 0.0f) + sum[t];
    }
  }
}

}  // namespace

const KernelTable& ScalarKernels() {
  static const KernelTable table = [] {
    KernelTable t;
    t.isa = Isa::kScalar;
    t.f32 = {Dot<LoadF32>, DequantizeF32, QuantizeF32, nullptr, DotRows<LoadF32>};
    t.f16 = {Dot<LoadF16>, DequantizeF16, QuantizeF16, nullptr, DotRows<LoadF16>};
    t.bf16 = {Dot<LoadBf16>, DequantizeBf16, QuantizeBf16, nullptr, DotRows<LoadBf16>};
    t.q8_0 = {DotQ8_0, DequantizeQ8_0, QuantizeQ8_0};
    t.q4_0 = {DotQ4_0, DequantizeQ4_0, QuantizeQ4_0};
    t.gemm_tile = GemmTile;
    t.gemm_group = kScalarGroup;
    t.gemm_rows = 4;
    AddScalarBlockKernels(t);
    return t;
  }();
  return table;
}

}  // namespace primekv::quant::internal
