// fp16 / bf16 conversions against definitions: exhaustive decoding, exact bit patterns, and every
// rounding midpoint of both formats.
#include <gtest/gtest.h>

#include <bit>
#include <cmath>
#include <cstdint>
#include <limits>

#include "primekv/quant/quant.h"
#include "quant/quant_reference.h"

namespace primekv::quant {
namespace {

using ref::RefBf16;
using ref::RefHalf;

constexpr float kInf = std::numeric_limits<float>::infinity();

uint32_t Bits(float f) { return std::bit_cast<uint32_t>(f); }
float FromBits(uint32_t b) { return std::bit_cast<float>(b); }

TEST(F16Test, DecodesEveryPattern) {
  for (uint32_t h = 0; h < 0x10000; ++h) {
    const float f = F16ToF32(static_cast<uint16_t>(h));
    const double ref = RefHalf(static_cast<uint16_t>(h));
    if (std::isnan(ref)) {
      ASSERT_TRUE(std::isnan(f)) << h;
      // Payload and sign are kept.
      ASSERT_EQ(Bits(f), ((h & 0x8000u) << 16) | 0x7F800000u | ((h & 0x3FFu) << 13)) << h;
    } else {
      ASSERT_EQ(static_cast<double>(f), ref) << h;
      ASSERT_EQ(std::signbit(f), (h & 0x8000u) != 0) << h;
    }
  }
}

TEST(F16Test, KnownBitPatterns) {
  EXPECT_EQ(F32ToF16(1.0f), 0x3C00);
  EXPECT_EQ(F32ToF16(-2.0f), 0xC000);
  EXPECT_EQ(F32ToF16(65504.0f), 0x7BFF);      // largest finite
  EXPECT_EQ(F32ToF16(0x1p-14f), 0x0400);      // smallest normal
  EXPECT_EQ(F32ToF16(0x1p-24f), 0x0001);      // smallest subnormal
  EXPECT_EQ(F32ToF16(0x1.ff8p-15f), 0x03FF);  // largest subnormal
  EXPECT_EQ(F32ToF16(0.0f), 0x0000);
  EXPECT_EQ(F32ToF16(-0.0f), 0x8000);
  EXPECT_EQ(F32ToF16(kInf), 0x7C00);
  EXPECT_EQ(F32ToF16(-kInf), 0xFC00);
  EXPECT_EQ(F32ToF16(0.1f), 0x2E66);
  EXPECT_EQ(F32ToF16(1.0f / 3.0f), 0x3555);
  EXPECT_EQ(F32ToF16(65520.0f), 0x7C00);  // tie above max: inf
  EXPECT_EQ(F32ToF16(std::nextafter(65520.0f, 0.0f)), 0x7BFF);
  EXPECT_EQ(F32ToF16(1e10f), 0x7C00);
  EXPECT_EQ(F32ToF16(-1e10f), 0xFC00);
  EXPECT_EQ(F32ToF16(0x1p-25f), 0x0000);  // tie with 0: even
  EXPECT_EQ(F32ToF16(std::nextafter(0x1p-25f, 1.0f)), 0x0001);
  EXPECT_EQ(F32ToF16(0x1.8p-24f), 0x0002);  // 1.5 units: tie, even
  EXPECT_EQ(F32ToF16(0x1.8p-23f), 0x0003);  // 3 units exactly
  EXPECT_EQ(F32ToF16(1e-30f), 0x0000);
  EXPECT_EQ(F32ToF16(FromBits(0x00000001u)), 0x0000);  // f32 subnormal
  EXPECT_EQ(F32ToF16(FromBits(0x80000001u)), 0x8000);
  EXPECT_EQ(F32ToF16(1.0f + 0x1p-11f), 0x3C00);    // tie: even
  EXPECT_EQ(F32ToF16(1.0f + 0x1.8p-10f), 0x3C02);  // tie: even (up)
  EXPECT_FLOAT_EQ(F16ToF32(0x3C00), 1.0f);
  EXPECT_FLOAT_EQ(F16ToF32(0x7BFF), 65504.0f);
  EXPECT_EQ(F16ToF32(0x0001), 0x1p-24f);
  EXPECT_TRUE(std::signbit(F16ToF32(0x8000)));
  EXPECT_EQ(F16ToF32(0x7C00), kInf);
  EXPECT_TRUE(std::isnan(F16ToF32(0x7E00)));
}

TEST(F16Test, NanStaysNan) {
  for (uint32_t bits : {0x7FC00000u, 0xFFC00000u, 0x7F800001u, 0x7FBFFFFFu, 0x7FFFFFFFu}) {
    const uint16_t h = F32ToF16(FromBits(bits));
    EXPECT_EQ(h & 0x7C00u, 0x7C00u) << bits;
    EXPECT_NE(h & 0x3FFu, 0u) << bits;
    EXPECT_EQ((h & 0x8000u) != 0, (bits & 0x80000000u) != 0) << bits;
  }
}

TEST(F16Test, RoundTripsEveryValue) {
  for (uint32_t h = 0; h < 0x10000; ++h) {
    if (std::isnan(RefHalf(static_cast<uint16_t>(h)))) continue;
    ASSERT_EQ(F32ToF16(F16ToF32(static_cast<uint16_t>(h))), h) << h;
  }
}

// Between two neighbouring halves the midpoint goes to the even one, anything off it to the
// nearer one. Covers subnormals, normals, the carry into the next exponent and overflow.
TEST(F16Test, RoundsEveryMidpointToEven) {
  for (uint32_t sign : {0u, 0x8000u}) {
    for (uint32_t h = 0; h < 0x7C00; ++h) {
      const auto lo = static_cast<uint16_t>(sign | h);
      const auto hi = static_cast<uint16_t>(sign | (h + 1));
      const double hi_value = h + 1 == 0x7C00 ? (sign ? -65536.0 : 65536.0) : RefHalf(hi);
      const auto mid = static_cast<float>((RefHalf(lo) + hi_value) / 2);  // exact in float
      ASSERT_EQ(static_cast<double>(mid), (RefHalf(lo) + hi_value) / 2);
      const uint16_t even = (h & 1) ? hi : lo;
      ASSERT_EQ(F32ToF16(mid), even) << std::hex << lo;
      const float toward_zero = std::nextafter(mid, 0.0f);
      const float away = std::nextafter(mid, sign ? -kInf : kInf);
      ASSERT_EQ(F32ToF16(toward_zero), lo) << std::hex << lo;
      ASSERT_EQ(F32ToF16(away), hi) << std::hex << lo;
    }
  }
}

TEST(Bf16Test, DecodesEveryPattern) {
  for (uint32_t h = 0; h < 0x10000; ++h) {
    const float f = Bf16ToF32(static_cast<uint16_t>(h));
    const double ref = RefBf16(static_cast<uint16_t>(h));
    if (std::isnan(ref)) {
      ASSERT_TRUE(std::isnan(f)) << h;
    } else {
      ASSERT_EQ(static_cast<double>(f), ref) << h;
      ASSERT_EQ(std::signbit(f), (h & 0x8000u) != 0) << h;
    }
  }
}

TEST(Bf16Test, KnownBitPatterns) {
  EXPECT_EQ(F32ToBf16(1.0f), 0x3F80);
  EXPECT_EQ(F32ToBf16(-2.0f), 0xC000);
  EXPECT_EQ(F32ToBf16(1.00390625f), 0x3F80);  // 1 + 2^-8: tie, even is down
  EXPECT_EQ(F32ToBf16(std::nextafter(1.00390625f, 2.0f)), 0x3F81);
  EXPECT_EQ(F32ToBf16(1.01171875f), 0x3F82);  // 1 + 3 * 2^-8: tie, even is up
  EXPECT_EQ(F32ToBf16(std::nextafter(1.01171875f, 0.0f)), 0x3F81);
  EXPECT_EQ(F32ToBf16(0.0f), 0x0000);
  EXPECT_EQ(F32ToBf16(-0.0f), 0x8000);
  EXPECT_EQ(F32ToBf16(kInf), 0x7F80);
  EXPECT_EQ(F32ToBf16(-kInf), 0xFF80);
  EXPECT_EQ(F32ToBf16(std::numeric_limits<float>::max()), 0x7F80);  // rounds past the max
  EXPECT_EQ(F32ToBf16(FromBits(0x7F7F7FFFu)), 0x7F7F);
  EXPECT_EQ(F32ToBf16(FromBits(0x00000001u)), 0x0000);  // subnormals are kept, not flushed
  EXPECT_EQ(F32ToBf16(FromBits(0x00018000u)), 0x0002);
  EXPECT_EQ(F32ToBf16(FromBits(0x00010000u)), 0x0001);
  const uint16_t nan = F32ToBf16(FromBits(0x7F800001u));  // signalling NaN is quietened
  EXPECT_EQ(nan & 0x7F80u, 0x7F80u);
  EXPECT_NE(nan & 0x7Fu, 0u);
  EXPECT_EQ(Bf16ToF32(0x3F80), 1.0f);
  EXPECT_EQ(Bf16ToF32(0x0001), 0x1p-133f);
}

TEST(Bf16Test, RoundsEveryMidpointToEven) {
  for (uint32_t sign : {0u, 0x8000u}) {
    for (uint32_t h = 0; h < 0x7F80; ++h) {
      const uint32_t lo = sign | h;
      const uint32_t hi = sign | (h + 1);
      const float mid = FromBits((lo << 16) | 0x8000u);
      ASSERT_EQ(F32ToBf16(mid), (h & 1) ? hi : lo) << std::hex << lo;
      ASSERT_EQ(F32ToBf16(FromBits((lo << 16) | 0x7FFFu)), lo) << std::hex << lo;
      ASSERT_EQ(F32ToBf16(FromBits((lo << 16) | 0x8001u)), hi) << std::hex << lo;
      ASSERT_EQ(F32ToBf16(FromBits(lo << 16)), lo) << std::hex << lo;
    }
  }
}

}  // namespace
}  // namespace primekv::quant
