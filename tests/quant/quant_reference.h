// Independent references for the quant tests: element formats decoded from their definitions
// with ldexp in double, and helpers to build random encoded rows. Nothing here calls the code
// under test except where noted for generating inputs.
#pragma once

#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <random>
#include <vector>

#include "primekv/util/dtype.h"

namespace primekv::quant::ref {

inline double RefHalf(uint16_t h) {
  const int sign = (h >> 15) ? -1 : 1;
  const int exponent = (h >> 10) & 0x1F;
  const int mantissa = h & 0x3FF;
  if (exponent == 31) {
    return mantissa ? std::numeric_limits<double>::quiet_NaN()
                    : sign * std::numeric_limits<double>::infinity();
  }
  if (exponent == 0) return sign * std::ldexp(static_cast<double>(mantissa), -24);
  return sign * std::ldexp(static_cast<double>(1024 + mantissa), exponent - 25);
}

inline double RefBf16(uint16_t h) {
  const int sign = (h >> 15) ? -1 : 1;
  const int exponent = (h >> 7) & 0xFF;
  const int mantissa = h & 0x7F;
  if (exponent == 255) {
    return mantissa ? std::numeric_limits<double>::quiet_NaN()
                    : sign * std::numeric_limits<double>::infinity();
  }
  if (exponent == 0) return sign * std::ldexp(static_cast<double>(mantissa), -133);
  return sign * std::ldexp(static_cast<double>(128 + mantissa), exponent - 134);
}

inline uint16_t U16At(const uint8_t* p) { return static_cast<uint16_t>(p[0] | (p[1] << 8)); }

inline int RefBlockSize(GgmlType type) {
  return type == GgmlType::kQ8_0 || type == GgmlType::kQ4_0 ? 32 : 1;
}

inline size_t RefRowBytes(GgmlType type, int64_t n) {
  switch (type) {
    case GgmlType::kF32:
      return 4 * static_cast<size_t>(n);
    case GgmlType::kF16:
    case GgmlType::kBF16:
      return 2 * static_cast<size_t>(n);
    case GgmlType::kQ8_0:
      return 34 * static_cast<size_t>(n / 32);
    case GgmlType::kQ4_0:
      return 18 * static_cast<size_t>(n / 32);
    default:
      return 0;
  }
}

// Decodes n elements of a little-endian encoded row.
inline std::vector<double> RefDecode(GgmlType type, const uint8_t* p, int64_t n) {
  std::vector<double> out(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) {
    switch (type) {
      case GgmlType::kF32: {
        float f;
        std::memcpy(&f, p + 4 * i, 4);
        out[i] = f;
        break;
      }
      case GgmlType::kF16:
        out[i] = RefHalf(U16At(p + 2 * i));
        break;
      case GgmlType::kBF16:
        out[i] = RefBf16(U16At(p + 2 * i));
        break;
      case GgmlType::kQ8_0: {
        const uint8_t* block = p + 34 * (i / 32);
        const auto q = static_cast<int8_t>(block[2 + i % 32]);
        out[i] = RefHalf(U16At(block)) * q;
        break;
      }
      case GgmlType::kQ4_0: {
        const uint8_t* block = p + 18 * (i / 32);
        const int j = static_cast<int>(i % 32);
        const int nibble = j < 16 ? (block[2 + j] & 0xF) : (block[2 + j - 16] >> 4);
        out[i] = RefHalf(U16At(block)) * (nibble - 8);
        break;
      }
      default:
        break;
    }
  }
  return out;
}

// An fp16 bit pattern for a finite value near v (truncating, good enough for test inputs).
inline uint16_t RoughHalf(float v) {
  uint32_t bits;
  std::memcpy(&bits, &v, 4);
  const uint16_t sign = static_cast<uint16_t>((bits >> 16) & 0x8000);
  const int exponent = static_cast<int>((bits >> 23) & 0xFF) - 127 + 15;
  if (exponent <= 0) return sign;
  if (exponent >= 31) return static_cast<uint16_t>(sign | 0x7BFF);
  return static_cast<uint16_t>(sign | (exponent << 10) | ((bits >> 13) & 0x3FF));
}

inline std::vector<float> RandomFloats(std::mt19937_64& rng, int64_t n, float scale = 1.0f) {
  std::normal_distribution<float> dist(0.0f, scale);
  std::vector<float> v(static_cast<size_t>(n));
  for (auto& x : v) x = dist(rng);
  return v;
}

// A random encoded row of n elements with finite values of magnitude about `scale`.
inline std::vector<uint8_t> RandomRow(std::mt19937_64& rng, GgmlType type, int64_t n,
                                      float scale = 1.0f) {
  std::vector<uint8_t> row(RefRowBytes(type, n));
  std::normal_distribution<float> dist(0.0f, scale);
  std::uniform_int_distribution<int> byte(0, 255);
  auto put16 = [&](size_t at, uint16_t v) {
    row[at] = static_cast<uint8_t>(v & 0xFF);
    row[at + 1] = static_cast<uint8_t>(v >> 8);
  };
  switch (type) {
    case GgmlType::kF32:
      for (int64_t i = 0; i < n; ++i) {
        const float f = dist(rng);
        std::memcpy(row.data() + 4 * i, &f, 4);
      }
      break;
    case GgmlType::kF16:
      for (int64_t i = 0; i < n; ++i) put16(2 * i, RoughHalf(dist(rng)));
      break;
    case GgmlType::kBF16:
      for (int64_t i = 0; i < n; ++i) {
        const float f = dist(rng);
        uint32_t bits;
        std::memcpy(&bits, &f, 4);
        put16(2 * i, static_cast<uint16_t>(bits >> 16));
      }
      break;
    case GgmlType::kQ8_0:
    case GgmlType::kQ4_0: {
      const size_t block_bytes = type == GgmlType::kQ8_0 ? 34 : 18;
      const float q_range = type == GgmlType::kQ8_0 ? 127.0f : 8.0f;
      for (size_t b = 0; b < row.size() / block_bytes; ++b) {
        put16(b * block_bytes, RoughHalf(dist(rng) / q_range));
        for (size_t j = 2; j < block_bytes; ++j) {
          row[b * block_bytes + j] = static_cast<uint8_t>(byte(rng));
        }
      }
      break;
    }
    default:
      break;
  }
  return row;
}

inline const char* TypeName(GgmlType type) {
  switch (type) {
    case GgmlType::kF32:
      return "F32";
    case GgmlType::kF16:
      return "F16";
    case GgmlType::kBF16:
      return "BF16";
    case GgmlType::kQ8_0:
      return "Q8_0";
    case GgmlType::kQ4_0:
      return "Q4_0";
    default:
      return "?";
  }
}

inline constexpr GgmlType kComputableTypes[] = {GgmlType::kF32, GgmlType::kF16, GgmlType::kBF16,
                                                GgmlType::kQ8_0, GgmlType::kQ4_0};

// Rounding unit of float arithmetic.
inline constexpr double kUnit = 0x1p-24;

}  // namespace primekv::quant::ref
