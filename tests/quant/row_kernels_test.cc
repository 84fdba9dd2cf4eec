// Every kernel table the CPU supports (scalar, AVX2, AVX-512) and the public dispatching API,
// against the double-precision references of quant_reference.h.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "primekv/quant/quant.h"
#include "quant/kernels.h"
#include "quant/quant_reference.h"

namespace primekv::quant {
namespace {

using internal::KernelTable;
using ref::kComputableTypes;
using ref::kUnit;
using ref::RandomFloats;
using ref::RandomRow;
using ref::RefBlockSize;
using ref::RefDecode;
using ref::RefRowBytes;
using ref::TypeName;

std::string Case(const KernelTable& table, GgmlType type, int64_t n) {
  return std::string(internal::IsaName(table.isa)) + " " + TypeName(type) +
         " n=" + std::to_string(n);
}

// Lengths around every unroll boundary (8, 16, 32, 64 elements, 1 and 2 blocks) plus random
// ones up to a long FFN row.
std::vector<int64_t> Lengths(GgmlType type, std::mt19937_64& rng) {
  const int block = RefBlockSize(type);
  std::vector<int64_t> lengths;
  for (int64_t blocks = 0; blocks <= 70; ++blocks) lengths.push_back(blocks * block);
  if (block == 1) {
    for (int64_t n : {127, 129, 255, 257, 1023, 1025}) lengths.push_back(n);
  }
  std::uniform_int_distribution<int64_t> blocks(1, 14336 / block);
  for (int i = 0; i < 20; ++i) lengths.push_back(blocks(rng) * block);
  lengths.push_back(14336);
  return lengths;
}

// The row-kernel tests below run every table this CPU supports; this one says which tables of
// this build they leave out (an ISA the CPU lacks), so a missing ISA shows as a skip.
TEST(KernelTablesTest, EveryTableOfThisBuildRunsHere) {
  std::string not_run;
  for (const KernelTable* t :
       {internal::Avx2Kernels(), internal::Avx512Kernels(), internal::Avx512VnniKernels()}) {
    if (t != nullptr && !internal::CpuHasIsa(t->isa)) {
      not_run += std::string(not_run.empty() ? "" : ", ") + internal::IsaName(t->isa);
    }
  }
  const auto supported = internal::SupportedKernels();
  for (const KernelTable* t : supported) EXPECT_TRUE(internal::CpuHasIsa(t->isa));
  if (!not_run.empty()) GTEST_SKIP() << "row kernels not run on this CPU: " << not_run;
}

TEST(KernelTablesTest, ScalarFirstAndBestLast) {
  const auto tables = internal::SupportedKernels();
  ASSERT_FALSE(tables.empty());
  EXPECT_EQ(tables.front()->isa, internal::Isa::kScalar);
  EXPECT_EQ(&internal::BestKernels(), tables.back());
#if defined(__x86_64__)
  if (__builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
      __builtin_cpu_supports("avx512vl")) {
    EXPECT_EQ(internal::BestKernels().isa, __builtin_cpu_supports("avx512vnni")
                                               ? internal::Isa::kAvx512Vnni
                                               : internal::Isa::kAvx512);
  }
#endif
  for (const KernelTable* table : tables) {
    for (GgmlType type : kComputableTypes) {
      const internal::TypeKernels* k = internal::Find(*table, type);
      ASSERT_NE(k, nullptr);
      EXPECT_TRUE(k->dot && k->dequantize && k->quantize);
    }
    EXPECT_EQ(internal::Find(*table, GgmlType::kQ8_K), nullptr);
  }
}

TEST(RowBytesTest, MatchesBlockLayouts) {
  EXPECT_EQ(RowBytes(GgmlType::kF32, 10), 40u);
  EXPECT_EQ(RowBytes(GgmlType::kF16, 10), 20u);
  EXPECT_EQ(RowBytes(GgmlType::kBF16, 7), 14u);
  EXPECT_EQ(RowBytes(GgmlType::kQ8_0, 64), 68u);
  EXPECT_EQ(RowBytes(GgmlType::kQ4_0, 64), 36u);
  EXPECT_EQ(RowBytes(GgmlType::kQ4_0, 14336), 14336u / 32 * 18);
  EXPECT_EQ(RowBytes(GgmlType::kQ8_0, 0), 0u);
}

TEST(RowBytesDeathTest, RejectsPartialBlocksAndUnknownTypes) {
  // OpenBLAS starts its threads at load time, so fork-and-exec style is needed.
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  EXPECT_DEATH((void)RowBytes(GgmlType::kQ8_0, 33), "multiple of the block size");
  EXPECT_DEATH((void)RowBytes(GgmlType::kQ8_K, 256), "not computable");
}

// Dot products: error within the float summation bound (n + 2) u sum|w_i x_i| of the exact
// value, for every table, every type and lengths over all loop tails. The rows sit at an odd
// offset (2 bytes; 4 for F32) so no kernel may assume alignment.
TEST(DotRowTest, AllTablesMatchReference) {
  std::mt19937_64 rng(1234);
  for (GgmlType type : kComputableTypes) {
    for (int64_t n : Lengths(type, rng)) {
      const std::vector<uint8_t> encoded = RandomRow(rng, type, n);
      const size_t offset = type == GgmlType::kF32 ? 4 : 2;
      std::vector<uint8_t> row(encoded.size() + offset);
      if (!encoded.empty()) std::memcpy(row.data() + offset, encoded.data(), encoded.size());
      std::vector<float> x_storage = RandomFloats(rng, n + 1);
      const float* x = x_storage.data() + 1;
      const std::vector<double> w = RefDecode(type, encoded.data(), n);
      double exact = 0.0, magnitude = 0.0;
      for (int64_t i = 0; i < n; ++i) {
        exact += w[i] * x[i];
        magnitude += std::fabs(w[i] * x[i]);
      }
      const double tolerance = (static_cast<double>(n) + 2) * kUnit * magnitude;
      for (const KernelTable* table : internal::SupportedKernels()) {
        const float got = internal::Find(*table, type)->dot(row.data() + offset, x, n);
        ASSERT_NEAR(got, exact, tolerance) << Case(*table, type, n);
      }
      ASSERT_NEAR(DotRow(type, row.data() + offset, x, n), exact, tolerance)
          << TypeName(type) << " n=" << n;
    }
  }
}

// A row whose exact dot product is known in closed form: catches element-order mistakes that
// random data might average out (e.g. swapped Q4_0 nibble halves).
TEST(DotRowTest, PositionalWeights) {
  for (GgmlType type : kComputableTypes) {
    const int64_t n = 64;
    // Element i has value (i % 16) - 8 (scaled by 1 for the quantised types).
    std::vector<float> values(n);
    for (int64_t i = 0; i < n; ++i) values[i] = static_cast<float>(i % 16 - 8);
    std::vector<uint8_t> row(RefRowBytes(type, n));
    QuantizeRow(type, values.data(), row.data(), n);
    std::vector<double> decoded = RefDecode(type, row.data(), n);
    for (int64_t i = 0; i < n; ++i) {
      ASSERT_NEAR(decoded[i], values[i], 0.05) << TypeName(type) << " i=" << i;
    }
    for (int64_t probe = 0; probe < n; ++probe) {
      std::vector<float> x(n, 0.0f);
      x[probe] = 1.0f;
      for (const KernelTable* table : internal::SupportedKernels()) {
        ASSERT_EQ(internal::Find(*table, type)->dot(row.data(), x.data(), n),
                  static_cast<float>(decoded[probe]))
            << Case(*table, type, n) << " probe=" << probe;
      }
    }
  }
}

// The multi-row dot (a decode batch): every (activation row, weight row) result is the same bits
// as the table's single-row dot, for one and two weight rows and 1 to 7 activation rows (more than
// any table's group, so the split into groups is covered), lengths over every loop tail, strided
// and unaligned x and out; the gaps between outputs stay untouched. Every table this build has;
// those this CPU lacks are reported as skipped.
TEST(DotRowsTest, EachRowEqualsSingleDotBitForBit) {
  std::mt19937_64 rng(4321);
  std::vector<const KernelTable*> tables = {&internal::ScalarKernels()};
  std::string skipped;
  for (const KernelTable* t :
       {internal::Avx2Kernels(), internal::Avx512Kernels(), internal::Avx512VnniKernels()}) {
    if (t == nullptr) continue;
    if (internal::CpuHasIsa(t->isa)) {
      tables.push_back(t);
    } else {
      skipped += std::string(skipped.empty() ? "" : ", ") + internal::IsaName(t->isa);
    }
  }
  for (const KernelTable* table : tables) {
    for (GgmlType type : {GgmlType::kF32, GgmlType::kF16, GgmlType::kBF16}) {
      const internal::TypeKernels* k = internal::Find(*table, type);
      ASSERT_NE(k->dot_rows, nullptr) << Case(*table, type, 0);
      for (int64_t n : {0,  1,  7,   8,   9,   15,  16,  17,  31,  32,  33,   63,
                        64, 65, 100, 127, 128, 129, 255, 256, 257, 768, 1000, 4099}) {
        // Two weight rows, the second at row_bytes (the first's size plus 6) from the first.
        const size_t row_bytes = RefRowBytes(type, n) + 6;
        std::vector<uint8_t> w(2 * row_bytes + 2);
        for (size_t j = 0; j < 2; ++j) {
          const std::vector<uint8_t> encoded = RandomRow(rng, type, n);
          if (!encoded.empty()) {
            std::memcpy(w.data() + 2 + j * row_bytes, encoded.data(), encoded.size());
          }
        }
        const int64_t x_stride = n + 3;
        const std::vector<float> x = RandomFloats(rng, 7 * x_stride + 1);
        for (int64_t w_rows = 1; w_rows <= 2; ++w_rows) {
          for (int rows = 1; rows <= 7; ++rows) {
            const int64_t out_stride = 3;
            std::vector<float> out(static_cast<size_t>(rows * out_stride + 1), -5.0f);
            k->dot_rows(w.data() + 2, row_bytes, w_rows, x.data() + 1, x_stride, rows, n,
                        out.data() + 1, out_stride);
            for (int64_t o = 0; o < static_cast<int64_t>(out.size()); ++o) {
              const int64_t i = (o - 1) / out_stride, j = (o - 1) % out_stride;
              const std::string what = Case(*table, type, n) + " w_rows=" + std::to_string(w_rows) +
                                       " rows=" + std::to_string(rows) + " out[" +
                                       std::to_string(o) + "]";
              if (o == 0 || j >= w_rows || i >= rows) {
                ASSERT_EQ(out[o], -5.0f) << what << ": wrote outside its outputs";
                continue;
              }
              const float single =
                  k->dot(w.data() + 2 + j * row_bytes, x.data() + 1 + i * x_stride, n);
              uint32_t got_bits, single_bits;
              std::memcpy(&got_bits, &out[o], sizeof(got_bits));
              std::memcpy(&single_bits, &single, sizeof(single_bits));
              ASSERT_EQ(got_bits, single_bits) << what << " got " << out[o] << " single " << single;
            }
          }
        }
      }
    }
  }
  if (!skipped.empty()) GTEST_SKIP() << "multi-row dots not run on this CPU: " << skipped;
}

// Dequantisation is exact: d * q fits in a float for every fp16 d and quant.
TEST(DequantizeRowTest, AllTablesExact) {
  std::mt19937_64 rng(99);
  for (GgmlType type : kComputableTypes) {
    for (int64_t n : Lengths(type, rng)) {
      const std::vector<uint8_t> encoded = RandomRow(rng, type, n, 3.0f);
      const size_t offset = type == GgmlType::kF32 ? 4 : 2;
      std::vector<uint8_t> row(encoded.size() + offset);
      if (!encoded.empty()) std::memcpy(row.data() + offset, encoded.data(), encoded.size());
      const std::vector<double> ref = RefDecode(type, encoded.data(), n);
      for (const KernelTable* table : internal::SupportedKernels()) {
        std::vector<float> out(n + 2, -1.0f);
        internal::Find(*table, type)->dequantize(row.data() + offset, out.data() + 1, n);
        ASSERT_EQ(out[0], -1.0f) << Case(*table, type, n);
        ASSERT_EQ(out[n + 1], -1.0f) << Case(*table, type, n);
        for (int64_t i = 0; i < n; ++i) {
          ASSERT_EQ(static_cast<double>(out[i + 1]), ref[i]) << Case(*table, type, n) << " i=" << i;
        }
      }
      std::vector<float> out(n);
      DequantizeRow(type, row.data() + offset, out.data(), n);
      for (int64_t i = 0; i < n; ++i) ASSERT_EQ(static_cast<double>(out[i]), ref[i]);
    }
  }
}

// The GEMM tile of every table: every row count up to its tile height, full and partial token
// groups, fresh and accumulating, against a double reference. Lanes past `tokens` are padding
// and not checked.
TEST(GemmTileTest, AllTablesMatchReference) {
  std::mt19937_64 rng(77);
  for (const KernelTable* table : internal::SupportedKernels()) {
    const int group = table->gemm_group;
    ASSERT_GT(group, 0);
    ASSERT_GT(table->gemm_rows, 0);
    for (int64_t kc : {1, 7, 64, 300}) {
      const int64_t ldw = kc + 5;
      const std::vector<float> xp = RandomFloats(rng, kc * group);
      const std::vector<float> w = RandomFloats(rng, table->gemm_rows * ldw);
      for (int rows = 1; rows <= table->gemm_rows; ++rows) {
        for (int tokens : {1, group / 2, group / 2 + 1, group}) {
          for (bool accumulate : {false, true}) {
            const std::vector<float> initial = RandomFloats(rng, rows * group);
            std::vector<float> acc = initial;
            table->gemm_tile(xp.data(), tokens, w.data(), ldw, rows, kc, acc.data(), accumulate);
            for (int j = 0; j < rows; ++j) {
              for (int t = 0; t < tokens; ++t) {
                double exact = accumulate ? initial[j * group + t] : 0.0;
                double magnitude = std::fabs(exact);
                for (int64_t k = 0; k < kc; ++k) {
                  exact += static_cast<double>(w[j * ldw + k]) * xp[k * group + t];
                  magnitude += std::fabs(static_cast<double>(w[j * ldw + k]) * xp[k * group + t]);
                }
                ASSERT_NEAR(acc[j * group + t], exact, (kc + 2) * kUnit * magnitude)
                    << internal::IsaName(table->isa) << " kc=" << kc << " rows=" << rows
                    << " tokens=" << tokens << " accumulate=" << accumulate << " j=" << j
                    << " t=" << t;
              }
            }
          }
        }
      }
    }
  }
}

// Float bit patterns of every kind: normals, subnormals, zeros, infinities, NaNs, ties.
std::vector<float> AwkwardFloats(std::mt19937_64& rng, int64_t n) {
  std::vector<float> v(n);
  std::uniform_int_distribution<uint32_t> bits;
  std::uniform_int_distribution<int> kind(0, 5);
  for (auto& f : v) {
    uint32_t b = bits(rng);
    switch (kind(rng)) {
      case 0:  // around the fp16 range, including its subnormals
        b = (b & 0x807FFFFFu) | ((96u + (b >> 24) % 48u) << 23);
        break;
      case 1:  // exact fp16 / bf16 midpoints
        b = (b & 0xFFFFE000u) | 0x1000u;
        break;
      case 2:
        b = (b & 0xFFFF0000u) | 0x8000u;
        break;
      case 3:  // f32 subnormal
        b &= 0x807FFFFFu;
        break;
      default:
        break;  // anything, NaNs and infinities included
    }
    std::memcpy(&f, &b, sizeof(f));
  }
  return v;
}

TEST(QuantizeRowTest, HalfAndBf16MatchScalarConversion) {
  std::mt19937_64 rng(5);
  for (int64_t n : {0, 1, 7, 8, 9, 15, 16, 17, 33, 1000, 4099}) {
    const std::vector<float> src = AwkwardFloats(rng, n);
    for (GgmlType type : {GgmlType::kF16, GgmlType::kBF16}) {
      for (const KernelTable* table : internal::SupportedKernels()) {
        std::vector<uint8_t> out(2 * n + 4, 0xAB);
        internal::Find(*table, type)->quantize(src.data(), out.data() + 2, n);
        ASSERT_EQ(out[0], 0xAB);
        ASSERT_EQ(out[2 * n + 3], 0xAB);
        for (int64_t i = 0; i < n; ++i) {
          const uint16_t got = ref::U16At(out.data() + 2 + 2 * i);
          const uint16_t want = type == GgmlType::kF16 ? F32ToF16(src[i]) : F32ToBf16(src[i]);
          ASSERT_EQ(got, want) << Case(*table, type, n) << " i=" << i << " bits=" << std::hex
                               << std::bit_cast<uint32_t>(src[i]);
        }
      }
    }
  }
}

TEST(QuantizeRowTest, F32IsACopy) {
  std::mt19937_64 rng(6);
  const std::vector<float> src = RandomFloats(rng, 77);
  std::vector<float> out(77);
  QuantizeRow(GgmlType::kF32, src.data(), out.data(), 77);
  EXPECT_EQ(std::memcmp(src.data(), out.data(), sizeof(float) * 77), 0);
}

// Blocks with a wide spread of scales, a zero block, a lone spike, tiny (subnormal-scale) values
// and values beyond the fp16 range.
std::vector<float> QuantizeInputs(std::mt19937_64& rng, int64_t blocks) {
  std::vector<float> v;
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::uniform_real_distribution<float> log_scale(-12.0f, 6.0f);
  for (int64_t b = 0; b < blocks; ++b) {
    const float scale = std::exp2(log_scale(rng));
    for (int j = 0; j < 32; ++j) {
      float x = normal(rng) * scale;
      switch (b % 7) {
        case 1:
          x = 0.0f;
          break;
        case 2:
          x = j == 5 ? -3.0f * scale : 0.0f;
          break;
        case 3:
          x *= 1e-5f;
          break;
        case 4:
          x = static_cast<float>(j % 9) - 4.0f;  // exact ties at +-0.5 multiples of d
          break;
        default:
          break;
      }
      v.push_back(x);
    }
  }
  return v;
}

TEST(QuantizeRowTest, Q8_0ErrorWithinHalfStep) {
  std::mt19937_64 rng(7);
  const int64_t n = 32 * 200;
  const std::vector<float> src = QuantizeInputs(rng, n / 32);
  for (const KernelTable* table : internal::SupportedKernels()) {
    std::vector<uint8_t> q(RefRowBytes(GgmlType::kQ8_0, n));
    internal::Find(*table, GgmlType::kQ8_0)->quantize(src.data(), q.data(), n);
    const std::vector<double> back = RefDecode(GgmlType::kQ8_0, q.data(), n);
    for (int64_t b = 0; b < n / 32; ++b) {
      double amax = 0.0;
      for (int j = 0; j < 32; ++j) amax = std::fmax(amax, std::fabs(src[b * 32 + j]));
      const double d = ref::RefHalf(ref::U16At(q.data() + 34 * b));
      // The stored scale is max|x| / 127 rounded up to fp16 (one step: relative 2^-10, or the
      // subnormal step 2^-24).
      ASSERT_GE(d, amax / 127) << "block " << b;
      ASSERT_LE(d, amax / 127 * (1 + 0x1p-10) + 0x1p-24) << "block " << b;
      for (int j = 0; j < 32; ++j) {
        const int64_t i = b * 32 + j;
        const double err = std::fabs(back[i] - src[i]);
        ASSERT_LE(err, d / 2 + std::fabs(src[i]) * 0x1p-22) << "block " << b << " j=" << j;
        if (src[i] == 0.0f) {
          ASSERT_EQ(back[i], 0.0);
        }
      }
    }
  }
}

TEST(QuantizeRowTest, Q4_0ErrorBounds) {
  std::mt19937_64 rng(8);
  const int64_t n = 32 * 200;
  const std::vector<float> src = QuantizeInputs(rng, n / 32);
  for (const KernelTable* table : internal::SupportedKernels()) {
    std::vector<uint8_t> q(RefRowBytes(GgmlType::kQ4_0, n));
    internal::Find(*table, GgmlType::kQ4_0)->quantize(src.data(), q.data(), n);
    const std::vector<double> back = RefDecode(GgmlType::kQ4_0, q.data(), n);
    for (int64_t b = 0; b < n / 32; ++b) {
      double max = 0.0;  // largest magnitude, sign kept
      for (int j = 0; j < 32; ++j) {
        if (std::fabs(src[b * 32 + j]) > std::fabs(max)) max = src[b * 32 + j];
      }
      const double d = ref::RefHalf(ref::U16At(q.data() + 18 * b));
      // -max / 8 rounded away from zero to fp16.
      ASSERT_GE(std::fabs(d), std::fabs(max) / 8) << "block " << b;
      ASSERT_LE(std::fabs(d), std::fabs(max) / 8 * (1 + 0x1p-10) + 0x1p-24) << "block " << b;
      if (max != 0.0) {
        ASSERT_EQ(std::signbit(d), !std::signbit(max)) << "block " << b;
      }
      for (int j = 0; j < 32; ++j) {
        const int64_t i = b * 32 + j;
        const double err = std::fabs(back[i] - src[i]);
        const double slack = std::fabs(src[i]) * 0x1p-22;
        if (d == 0.0) {
          ASSERT_EQ(back[i], 0.0);
        } else if (src[i] / d <= 7.5) {
          // In the grid [-8, 7] * d: half a step.
          ASSERT_LE(err, std::fabs(d) / 2 + slack) << "block " << b << " j=" << j;
        } else {
          // The far end (up to +8 d, opposite in sign to max) clamps to 7 d: at most one step.
          ASSERT_LE(err, std::fabs(d) + slack) << "block " << b << " j=" << j;
        }
      }
    }
  }
}

TEST(QuantizeRowTest, NonFiniteInputsStayDefined) {
  // No UB on NaN or inf (UBSan checks the float-to-int conversions); finite neighbours of a NaN
  // are still quantised sensibly.
  std::vector<float> src(64, 1.0f);
  src[3] = std::numeric_limits<float>::quiet_NaN();
  src[40] = std::numeric_limits<float>::infinity();
  for (GgmlType type : {GgmlType::kQ8_0, GgmlType::kQ4_0}) {
    std::vector<uint8_t> q(RefRowBytes(type, 64));
    QuantizeRow(type, src.data(), q.data(), 64);
    const std::vector<double> back = RefDecode(type, q.data(), 64);
    EXPECT_NEAR(back[0], 1.0, 0.01) << TypeName(type);
  }
}

}  // namespace
}  // namespace primekv::quant
