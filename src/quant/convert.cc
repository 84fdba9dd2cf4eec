// Scalar fp16 and bf16 conversions. The bit arithmetic follows IEEE 754 binary16 and the bfloat16
// truncated-binary32 layout directly, so results match F16C / integer SIMD conversions bit for
// bit (NaNs are quietened and keep the top payload bits).
#include <bit>
#include <cstdint>

#include "primekv/quant/quant.h"

namespace primekv::quant {

float F16ToF32(uint16_t h) {
  const uint32_t sign = static_cast<uint32_t>(h & 0x8000u) << 16;
  const uint32_t exponent = (h >> 10) & 0x1Fu;
  const uint32_t mantissa = h & 0x3FFu;
  if (exponent == 0) {
    // Zero or subnormal: mantissa * 2^-24 is exact in binary32.
    const float magnitude = static_cast<float>(mantissa) * 0x1p-24f;
    return sign ? -magnitude : magnitude;
  }
  if (exponent == 31) return std::bit_cast<float>(sign | 0x7F800000u | (mantissa << 13));
  return std::bit_cast<float>(sign | ((exponent + 112) << 23) | (mantissa << 13));
}

uint16_t F32ToF16(float f) {
  const uint32_t bits = std::bit_cast<uint32_t>(f);
  const auto sign = static_cast<uint16_t>((bits >> 16) & 0x8000u);
  const uint32_t magnitude = bits & 0x7FFFFFFFu;
  if (magnitude > 0x7F800000u) {  // NaN: keep it a quiet NaN with the top payload bits
    return static_cast<uint16_t>(sign | 0x7E00u | ((magnitude >> 13) & 0x3FFu));
  }
  const uint32_t exponent = magnitude >> 23;                          // biased by 127
  if (exponent >= 143) return static_cast<uint16_t>(sign | 0x7C00u);  // >= 2^16 (or inf)
  if (exponent >= 113) {
    // Normal in fp16 (before rounding). A carry out of the mantissa bumps the exponent, and
    // past 65504 reaches 0x7C00 = inf, which is what round-to-nearest-even wants.
    uint32_t h = ((exponent - 112) << 10) | ((magnitude >> 13) & 0x3FFu);
    const uint32_t rest = magnitude & 0x1FFFu;
    if (rest > 0x1000u || (rest == 0x1000u && (h & 1u))) ++h;
    return static_cast<uint16_t>(sign | h);
  }
  // Subnormal in fp16: value = m24 * 2^(exponent - 150), counted in units of 2^-24.
  const uint32_t shift = 126 - exponent;  // >= 14
  if (shift >= 25) return sign;           // below half the smallest subnormal (or f32 subnormal)
  const uint32_t m24 = 0x800000u | (magnitude & 0x7FFFFFu);
  uint32_t h = m24 >> shift;
  const uint32_t rest = m24 & ((1u << shift) - 1);
  const uint32_t half = 1u << (shift - 1);
  if (rest > half || (rest == half && (h & 1u))) ++h;  // may carry into the smallest normal
  return static_cast<uint16_t>(sign | h);
}

float Bf16ToF32(uint16_t h) { return std::bit_cast<float>(static_cast<uint32_t>(h) << 16); }

uint16_t F32ToBf16(float f) {
  const uint32_t bits = std::bit_cast<uint32_t>(f);
  if ((bits & 0x7FFFFFFFu) > 0x7F800000u) return static_cast<uint16_t>((bits >> 16) | 0x0040u);
  // Adding 0x7FFF plus the kept lsb rounds to nearest even; overflow carries into inf.
  return static_cast<uint16_t>((bits + 0x7FFFu + ((bits >> 16) & 1u)) >> 16);
}

}  // namespace primekv::quant
