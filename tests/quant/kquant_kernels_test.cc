// Kernels of the K-quant / IQ4 / Q4_1 / Q5 formats (src/quant/kquants*.cc): every SIMD table
// against the scalar one on random blocks, and the round-to-nearest quantisers. That the scalar
// unpackers read ggml's layouts is shown against ggml itself in kquant_fixture_test.cc.
#include <gtest/gtest.h>

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstddef>
#include <cstring>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "primekv/quant/matmul.h"
#include "primekv/quant/quant.h"
#include "primekv/util/thread_pool.h"
#include "quant/kernels.h"
#include "quant/kquants.h"
#include "quant/matmul_internal.h"

namespace primekv::quant {
namespace {

using internal::BlockOf;
using internal::Isa;
using internal::KBlock;
using internal::kBlockTypes;
using internal::KernelTable;

std::string Name(GgmlType t) { return std::string(TypeInfo(t)->name); }

// Byte offsets of the fp16 fields (scales, mins) of each layout.
std::vector<int> HalfFields(GgmlType t) {
  switch (t) {
    case GgmlType::kQ4_1:
    case GgmlType::kQ5_1:
    case GgmlType::kQ4_K:
    case GgmlType::kQ5_K:
      return {0, 2};
    case GgmlType::kQ5_0:
    case GgmlType::kIQ4_NL:
    case GgmlType::kIQ4_XS:
      return {0};
    case GgmlType::kQ2_K:
      return {80, 82};
    case GgmlType::kQ3_K:
      return {108};
    case GgmlType::kQ6_K:
      return {208};
    default:
      return {};
  }
}

// Random blocks: every bit pattern of the quant and sub-scale bytes, finite fp16 fields of
// either sign over several binades.
std::vector<uint8_t> RandomBlocks(std::mt19937_64& rng, GgmlType t, int64_t blocks) {
  const KBlock layout = BlockOf(t);
  std::vector<uint8_t> bytes(static_cast<size_t>(blocks * layout.bytes));
  std::uniform_int_distribution<int> byte(0, 255);
  std::uniform_real_distribution<float> log2(-12.0f, 2.0f);
  std::bernoulli_distribution negative(0.3);
  for (auto& b : bytes) b = static_cast<uint8_t>(byte(rng));
  for (int64_t k = 0; k < blocks; ++k) {
    for (int at : HalfFields(t)) {
      const float v = (negative(rng) ? -1.0f : 1.0f) * std::exp2(log2(rng));
      const uint16_t h = F32ToF16(v);
      std::memcpy(bytes.data() + k * layout.bytes + at, &h, sizeof(h));
    }
  }
  return bytes;
}

std::vector<float> RandomFloats(std::mt19937_64& rng, int64_t n) {
  std::normal_distribution<float> dist(0.0f, 1.0f);
  std::vector<float> v(static_cast<size_t>(n));
  for (auto& x : v) x = dist(rng);
  return v;
}

const KernelTable* TableOf(Isa isa) {
  for (const KernelTable* t : internal::SupportedKernels()) {
    if (t->isa == isa) return t;
  }
  return nullptr;
}

// Dequantisation bit-identical to the scalar table, and dot products within the float
// summation bound of the exact value over the scalar-decoded weights, for rows of 0..9 blocks
// and longer ones, at an odd byte offset (no kernel may assume alignment).
void CheckTableAgainstScalar(const KernelTable& table) {
  const KernelTable& scalar = internal::ScalarKernels();
  std::mt19937_64 rng(42);
  for (GgmlType t : kBlockTypes) {
    const KBlock layout = BlockOf(t);
    for (int64_t blocks : {0, 1, 2, 3, 5, 9, 16, 57, 14336 / layout.elements}) {
      SCOPED_TRACE(Name(t) + " blocks=" + std::to_string(blocks) + " " +
                   internal::IsaName(table.isa));
      const int64_t n = blocks * layout.elements;
      const std::vector<uint8_t> encoded = RandomBlocks(rng, t, blocks);
      std::vector<uint8_t> row(encoded.size() + 3);
      if (!encoded.empty()) std::memcpy(row.data() + 3, encoded.data(), encoded.size());
      const uint8_t* p = row.data() + 3;

      std::vector<float> want(static_cast<size_t>(n) + 2, -7.0f);
      std::vector<float> got(static_cast<size_t>(n) + 2, -7.0f);
      internal::Find(scalar, t)->dequantize(p, want.data() + 1, n);
      internal::Find(table, t)->dequantize(p, got.data() + 1, n);
      ASSERT_EQ(got.front(), -7.0f);
      ASSERT_EQ(got.back(), -7.0f);
      ASSERT_EQ(std::memcmp(want.data(), got.data(), want.size() * sizeof(float)), 0);

      // The exact dot over the decoded weights; the bound uses |scale * q| + |min| per element
      // because the affine formats may subtract nearly equal terms.
      std::vector<float> x_storage = RandomFloats(rng, n + 1);
      const float* x = x_storage.data() + 1;
      internal::Unpacked u;
      double exact = 0.0, magnitude = 0.0;
      for (int64_t k = 0; k < blocks; ++k) {
        internal::ScalarUnpack(t)(p + k * layout.bytes, u);
        for (int i = 0; i < layout.elements; ++i) {
          const int64_t e = k * layout.elements + i;
          exact += static_cast<double>(want[static_cast<size_t>(e) + 1]) * x[e];
          magnitude += (std::fabs(static_cast<double>(u.scale[i / 16]) * u.q[i]) +
                        std::fabs(static_cast<double>(u.min[i / 16]))) *
                       std::fabs(x[e]);
        }
      }
      const double tolerance = (static_cast<double>(n) + 4) * 0x1p-24 * magnitude;
      EXPECT_NEAR(internal::Find(table, t)->dot(p, x, n), exact, tolerance);
      EXPECT_NEAR(DotRow(t, p, x, n), exact, tolerance);
    }
  }
}

bool IsSuperBlockType(GgmlType t) { return BlockOf(t).elements == internal::kSuperBlock; }

// int8-activation dots (dot_q8k) of every 256-element format: within the float bound of the
// exact sum over the decoded weights times the decoded activations (d * qs).
void CheckQ8KDots(const KernelTable& table) {
  std::mt19937_64 rng(5);
  for (GgmlType t : kBlockTypes) {
    const internal::TypeKernels* k = internal::Find(table, t);
    if (!IsSuperBlockType(t)) {
      EXPECT_EQ(k->dot_q8k, nullptr) << Name(t);
      continue;
    }
    ASSERT_NE(k->dot_q8k, nullptr) << Name(t);
    const KBlock layout = BlockOf(t);
    for (int64_t blocks : {0, 1, 2, 3, 16, 56}) {
      SCOPED_TRACE(Name(t) + " blocks=" + std::to_string(blocks) + " " +
                   internal::IsaName(table.isa));
      const int64_t n = blocks * layout.elements;
      const std::vector<uint8_t> encoded = RandomBlocks(rng, t, blocks);
      std::vector<float> x = RandomFloats(rng, n);
      for (int64_t i = 0; i < n; i += 37) x[static_cast<size_t>(i)] *= 20.0f;  // outliers
      std::vector<internal::Q8KBlock> xq(static_cast<size_t>(blocks));
      internal::QuantizeQ8K(x.data(), xq.data(), n);
      internal::Unpacked u;
      double exact = 0.0, magnitude = 0.0;
      for (int64_t b = 0; b < blocks; ++b) {
        internal::ScalarUnpack(t)(encoded.data() + b * layout.bytes, u);
        const internal::Q8KBlock& a = xq[static_cast<size_t>(b)];
        for (int i = 0; i < layout.elements; ++i) {
          const double w = static_cast<double>(u.scale[i / 16]) * u.q[i] - u.min[i / 16];
          const double xv = static_cast<double>(a.d) * a.qs[i];
          exact += w * xv;
          magnitude += (std::fabs(static_cast<double>(u.scale[i / 16]) * u.q[i]) +
                        std::fabs(static_cast<double>(u.min[i / 16]))) *
                       std::fabs(xv);
        }
      }
      const double tolerance = (static_cast<double>(n) + 4) * 0x1p-24 * magnitude;
      EXPECT_NEAR(k->dot_q8k(encoded.data(), xq.data(), n), exact, tolerance);
      if (k->dot_q8k_rows == nullptr || blocks == 0) continue;
      // Several rows through the rows entry: each the single dot's bits. The rows sit 64 bytes
      // apart beyond their length, so a kernel that ignored row_bytes would read the wrong ones.
      constexpr int kRows = 5;
      const size_t row_bytes = encoded.size() + 64;
      std::vector<uint8_t> rows(row_bytes * kRows);
      for (int r = 0; r < kRows; ++r) {
        const std::vector<uint8_t> row = RandomBlocks(rng, t, blocks);
        std::copy(row.begin(), row.end(),
                  rows.begin() + static_cast<std::ptrdiff_t>(r * row_bytes));
      }
      for (int count : {1, 2, kRows}) {
        std::vector<float> out(kRows, -1.0f);
        k->dot_q8k_rows(rows.data(), row_bytes, count, xq.data(), n, out.data());
        for (int r = 0; r < kRows; ++r) {
          const float single = k->dot_q8k(rows.data() + r * row_bytes, xq.data(), n);
          if (r < count) {
            EXPECT_EQ(std::bit_cast<uint32_t>(out[static_cast<size_t>(r)]),
                      std::bit_cast<uint32_t>(single))
                << "row " << r << " of " << count;
          } else {
            EXPECT_EQ(out[static_cast<size_t>(r)], -1.0f) << "row " << r << " of " << count;
          }
        }
      }
    }
  }
}

TEST(KQuantKernelsTest, QuantizeQ8KAsLlamaCpp) {
  std::mt19937_64 rng(9);
  std::vector<float> x = RandomFloats(rng, 256 * 8);
  for (int j = 0; j < 256; ++j) x[static_cast<size_t>(256 + j)] = 0.0f;  // an all-zero block
  x[600] = -9.0f;                                                        // a negative maximum
  x[1000] = std::nextafter(0.5f, 1.0f);
  std::vector<internal::Q8KBlock> q(8);
  internal::QuantizeQ8K(x.data(), q.data(), 256 * 8);
  EXPECT_EQ(q[1].d, 0.0f);
  for (int b = 0; b < 8; ++b) {
    float max = 0.0f;
    for (int j = 0; j < 256; ++j) {
      if (std::fabs(x[static_cast<size_t>(b * 256 + j)]) > std::fabs(max)) {
        max = x[static_cast<size_t>(b * 256 + j)];
      }
    }
    if (max == 0.0f) continue;
    // d = max / -127 (as 1 / (-127 / max)), so max itself maps to -127.
    EXPECT_EQ(q[static_cast<size_t>(b)].d, 1.0f / (-127.0f / max)) << b;
    for (int g = 0; g < 16; ++g) {
      int sum = 0;
      for (int j = 0; j < 16; ++j) {
        const int i = g * 16 + j;
        const int qi = q[static_cast<size_t>(b)].qs[i];
        sum += qi;
        const double err = std::fabs(static_cast<double>(q[static_cast<size_t>(b)].d) * qi -
                                     x[static_cast<size_t>(b * 256 + i)]);
        ASSERT_LE(err, std::fabs(q[static_cast<size_t>(b)].d) * 0.5 * (1 + 1e-5)) << b << " " << i;
      }
      EXPECT_EQ(q[static_cast<size_t>(b)].bsums[g], sum);
    }
    for (int j = 0; j < 8; ++j) {
      int sum = 0;
      for (int i = 32 * j; i < 32 * j + 32; ++i) sum += q[static_cast<size_t>(b)].qs[i];
      EXPECT_EQ(q[static_cast<size_t>(b)].bsum32[j], sum) << b << " " << j;
    }
  }
  EXPECT_EQ(q[2].qs[600 - 512], -127);
}

// Every table's activation quantiser gives the scalar one's bits. Blocks: random; all zero; a
// NaN among finite values (skipped by the maximum, rounded to 0); an infinity (an all-zero
// block); +m and -m as the largest magnitude (the first one's sign wins); halves that the scale
// leaves on rounding ties; a negative maximum.
TEST(KQuantKernelsTest, QuantizeQ8KEveryTableMatchesScalarBitForBit) {
  constexpr int kBlocks = 7;
  std::mt19937_64 rng(21);
  std::vector<float> x = RandomFloats(rng, 256 * kBlocks);
  const auto at = [&](int block, int i) -> float& {
    return x[static_cast<size_t>(block * 256 + i)];
  };
  for (int j = 0; j < 256; ++j) at(1, j) = 0.0f;
  at(2, 17) = std::numeric_limits<float>::quiet_NaN();
  at(3, 200) = -std::numeric_limits<float>::infinity();
  at(4, 40) = 3.0f;
  at(4, 9) = -3.0f;
  for (int j = 0; j < 256; ++j) at(5, j) = static_cast<float>(j % 253 - 126) + 0.5f;
  at(5, 3) = 127.0f;
  at(6, 255) = -50.0f;
  std::vector<internal::Q8KBlock> expected(kBlocks);
  internal::QuantizeQ8K(x.data(), expected.data(), 256 * kBlocks);
  EXPECT_EQ(expected[3].d, 0.0f);
  EXPECT_EQ(expected[2].qs[17], 0);
  EXPECT_LT(expected[4].d, 0.0f);  // -3 came first: d = -3 / -127
  for (const KernelTable* table : internal::SupportedKernels()) {
    SCOPED_TRACE(internal::IsaName(table->isa));
    std::vector<internal::Q8KBlock> got(kBlocks);
    std::memset(got.data(), 0x5A, got.size() * sizeof(got[0]));
    table->quantize_q8k(x.data(), got.data(), 256 * kBlocks);
    for (int b = 0; b < kBlocks; ++b) {
      EXPECT_EQ(std::memcmp(&got[static_cast<size_t>(b)], &expected[static_cast<size_t>(b)],
                            sizeof(got[0])),
                0)
          << "block " << b;
    }
  }
}

TEST(KQuantKernelsTest, Q8KDotsScalar) { CheckQ8KDots(internal::ScalarKernels()); }

TEST(KQuantKernelsTest, Q8KDotsAvx2) {
  const KernelTable* table = TableOf(Isa::kAvx2);
  if (table == nullptr) GTEST_SKIP() << "this CPU has no AVX2: AVX2 int8 dots not run";
  CheckQ8KDots(*table);
}

TEST(KQuantKernelsTest, Q8KDotsAvx512) {
  const KernelTable* table = TableOf(Isa::kAvx512);
  if (table == nullptr) GTEST_SKIP() << "this CPU has no AVX-512 F/BW/VL: int8 dots not run";
  CheckQ8KDots(*table);
}

TEST(KQuantKernelsTest, Q8KDotsAvx512Vnni) {
  const KernelTable* table = TableOf(Isa::kAvx512Vnni);
  if (table == nullptr) GTEST_SKIP() << "this CPU has no AVX-512 VNNI: VNNI int8 dots not run";
  CheckQ8KDots(*table);
  CheckTableAgainstScalar(*table);
}

TEST(KQuantKernelsTest, ScalarTableSelfConsistent) {
  // The scalar dot against its own dequantisation (the SIMD tests below compare to it).
  CheckTableAgainstScalar(internal::ScalarKernels());
}

TEST(KQuantKernelsTest, Avx2MatchesScalar) {
  const KernelTable* table = TableOf(Isa::kAvx2);
  if (table == nullptr) GTEST_SKIP() << "this CPU has no AVX2+FMA+F16C: AVX2 kernels not run";
  CheckTableAgainstScalar(*table);
}

TEST(KQuantKernelsTest, Avx512MatchesScalar) {
  const KernelTable* table = TableOf(Isa::kAvx512);
  if (table == nullptr) GTEST_SKIP() << "this CPU has no AVX-512 F/BW/VL: AVX-512 kernels not run";
  CheckTableAgainstScalar(*table);
}

// The SIMD quant unpackers produce exactly the scalar unpackers' int8 quants.
TEST(KQuantKernelsTest, Avx2UnpackersMatchScalar) {
  if (TableOf(Isa::kAvx2) == nullptr) GTEST_SKIP() << "this CPU has no AVX2: unpackers not run";
  std::mt19937_64 rng(7);
  for (GgmlType t : kBlockTypes) {
    const KBlock layout = BlockOf(t);
    const std::vector<uint8_t> blocks = RandomBlocks(rng, t, 64);
    for (int k = 0; k < 64; ++k) {
      internal::Unpacked want, got;
      internal::ScalarUnpack(t)(blocks.data() + k * layout.bytes, want);
      internal::Avx2Quants(t)(blocks.data() + k * layout.bytes, got.q);
      ASSERT_EQ(std::memcmp(want.q, got.q, static_cast<size_t>(layout.elements)), 0)
          << Name(t) << " block " << k;
    }
  }
}

TEST(KQuantKernelsTest, EveryTableHasEveryFormat) {
  for (const KernelTable* table : internal::SupportedKernels()) {
    for (GgmlType t : kBlockTypes) {
      const internal::TypeKernels* k = internal::Find(*table, t);
      ASSERT_NE(k, nullptr) << Name(t);
      EXPECT_TRUE(k->dot && k->dequantize && k->quantize) << Name(t);
      EXPECT_EQ(internal::BlockSize(t), TypeInfo(t)->block_size) << Name(t);
      EXPECT_EQ(static_cast<size_t>(internal::BlockBytes(t)), TypeInfo(t)->block_bytes) << Name(t);
      EXPECT_TRUE(TypeInfo(t)->computable) << Name(t);
    }
  }
}

// Groups of 16 whose scales span 2^-10..2^4, with zero groups, one-signed groups, spikes and
// constant groups.
std::vector<float> QuantizeInputs(std::mt19937_64& rng, int64_t n) {
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::uniform_real_distribution<float> log2(-10.0f, 4.0f);
  std::vector<float> v(static_cast<size_t>(n));
  for (int64_t g = 0; g < n / 16; ++g) {
    const float scale = std::exp2(log2(rng));
    for (int j = 0; j < 16; ++j) {
      float x = normal(rng) * scale;
      switch (g % 9) {
        case 1:
          x = 0.0f;
          break;
        case 2:
          x = std::fabs(x) + scale;  // all positive, away from zero
          break;
        case 3:
          x = -std::fabs(x);
          break;
        case 4:
          x = j == 3 ? 8.0f * scale : 0.01f * x;
          break;
        case 5:
          x = scale;
          break;
        default:
          break;
      }
      v[static_cast<size_t>(g * 16 + j)] = x;
    }
  }
  return v;
}

// The values a group can represent: scale * q - min over the format's quant range.
std::vector<double> Grid(GgmlType t, float scale, float min) {
  std::vector<int> qs;
  switch (t) {
    case GgmlType::kQ4_1:
    case GgmlType::kQ4_K:
      for (int q = 0; q < 16; ++q) qs.push_back(q);
      break;
    case GgmlType::kQ5_1:
    case GgmlType::kQ5_K:
      for (int q = 0; q < 32; ++q) qs.push_back(q);
      break;
    case GgmlType::kQ5_0:
      for (int q = -16; q < 16; ++q) qs.push_back(q);
      break;
    case GgmlType::kQ2_K:
      for (int q = 0; q < 4; ++q) qs.push_back(q);
      break;
    case GgmlType::kQ3_K:
      for (int q = -4; q < 4; ++q) qs.push_back(q);
      break;
    case GgmlType::kQ6_K:
      for (int q = -32; q < 32; ++q) qs.push_back(q);
      break;
    case GgmlType::kIQ4_NL:
    case GgmlType::kIQ4_XS:
      for (int8_t v : internal::kIq4Values) qs.push_back(v);
      break;
    default:
      break;
  }
  std::vector<double> grid;
  for (int q : qs) grid.push_back(static_cast<double>(scale * static_cast<float>(q) - min));
  return grid;
}

// Largest relative RMS error allowed per format, about 1.5x what the quantiser measures on
// QuantizeInputs (fewer bits, coarser sub-scales: larger).
double MaxRelativeRms(GgmlType t) {
  switch (t) {
    case GgmlType::kQ2_K:
      return 0.45;
    case GgmlType::kQ3_K:
      return 0.25;
    case GgmlType::kQ4_1:
    case GgmlType::kQ4_K:
    case GgmlType::kIQ4_NL:
    case GgmlType::kIQ4_XS:
      return 0.12;
    default:
      return 0.06;  // Q5_0, Q5_1, Q5_K, Q6_K
  }
}

// Round trip through each quantiser: every element lands on the grid point of its group nearest
// to it (round to nearest, given the stored scales), zeros stay zero where the grid has zero,
// and the overall error is what the format's bits allow.
TEST(KQuantQuantizeTest, RoundToNearestOnStoredGrid) {
  std::mt19937_64 rng(3);
  const int64_t n = 256 * 40;
  const std::vector<float> src = QuantizeInputs(rng, n);
  for (GgmlType t : kBlockTypes) {
    SCOPED_TRACE(Name(t));
    const KBlock layout = BlockOf(t);
    std::vector<uint8_t> q(RowBytes(t, n));
    QuantizeRow(t, src.data(), q.data(), n);
    std::vector<float> back(static_cast<size_t>(n));
    DequantizeRow(t, q.data(), back.data(), n);
    double err2 = 0.0, sig2 = 0.0;
    internal::Unpacked u;
    for (int64_t k = 0; k < n / layout.elements; ++k) {
      internal::ScalarUnpack(t)(q.data() + k * layout.bytes, u);
      for (int g = 0; g < layout.elements / 16; ++g) {
        const std::vector<double> grid = Grid(t, u.scale[g], u.min[g]);
        for (int j = 0; j < 16; ++j) {
          const int64_t i = k * layout.elements + g * 16 + j;
          const double x = src[static_cast<size_t>(i)];
          double nearest = INFINITY;
          for (double v : grid) nearest = std::fmin(nearest, std::fabs(v - x));
          const double err = std::fabs(back[static_cast<size_t>(i)] - x);
          ASSERT_LE(err, nearest + 1e-6 * std::fabs(u.scale[g]) + 1e-30)
              << "element " << i << " x=" << x << " got " << back[static_cast<size_t>(i)];
          err2 += err * err;
          sig2 += x * x;
        }
      }
    }
    const double rel_rms = std::sqrt(err2 / sig2);
    EXPECT_LE(rel_rms, MaxRelativeRms(t));
    std::printf("[kquant quantize] %-6s relative RMS error %.4f\n", Name(t).c_str(), rel_rms);

    // An all-zero row encodes zeros; the dot of the quantised row is the dot of its decoding.
    std::vector<float> zeros(static_cast<size_t>(n), 0.0f), out(static_cast<size_t>(n), 1.0f);
    QuantizeRow(t, zeros.data(), q.data(), n);
    DequantizeRow(t, q.data(), out.data(), n);
    for (float v : out) ASSERT_EQ(v, 0.0f);
  }
}

// Each group's largest element is represented closely when the groups of a block have scales of
// similar size, as trained weights do: the grid's end covers it (within the rounding of the
// stored fp16 and sub-scales), so no group is clipped or zeroed; measured worst errors 0.31
// (Q2_K), 0.19 (4-bit formats), under 0.11 (5 and 6 bits). (Groups far smaller than their
// block's largest, as in QuantizeInputs, can round to a zero sub-scale in the 4-bit-scale
// formats; ggml's quantiser has the same limit.)
TEST(KQuantQuantizeTest, ExtremesAreNotClipped) {
  std::mt19937_64 rng(11);
  const int64_t n = 256 * 20;
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::uniform_real_distribution<float> log2(-10.0f, 4.0f), spread(-1.0f, 1.0f);
  std::vector<float> src(static_cast<size_t>(n));
  for (int64_t b = 0; b < n / 256; ++b) {
    const float block_scale = std::exp2(log2(rng));
    for (int64_t g = 0; g < 16; ++g) {
      const float scale = block_scale * std::exp2(spread(rng));  // within 4x inside a block
      for (int64_t j = 0; j < 16; ++j)
        src[static_cast<size_t>(b * 256 + g * 16 + j)] = normal(rng) * scale;
    }
  }
  for (GgmlType t : kBlockTypes) {
    SCOPED_TRACE(Name(t));
    std::vector<uint8_t> q(RowBytes(t, n));
    QuantizeRow(t, src.data(), q.data(), n);
    std::vector<float> back(static_cast<size_t>(n));
    DequantizeRow(t, q.data(), back.data(), n);
    double worst = 0.0;
    for (int64_t g = 0; g < n / 16; ++g) {
      int64_t arg = g * 16;
      for (int64_t i = g * 16; i < (g + 1) * 16; ++i) {
        if (std::fabs(src[static_cast<size_t>(i)]) > std::fabs(src[static_cast<size_t>(arg)])) {
          arg = i;
        }
      }
      const double x = src[static_cast<size_t>(arg)];
      worst = std::fmax(worst, std::fabs(back[static_cast<size_t>(arg)] - x) / std::fabs(x));
    }
    std::printf("[kquant quantize] %-6s worst relative error at a group's extreme %.3f\n",
                Name(t).c_str(), worst);
    // Half a grid step at most, about: Q2_K's step is a third of the group's range (up to 1/3
    // of the extreme), the 4-bit formats' a fifteenth of the block's; a clipped or zeroed
    // extreme would be off by most of its value.
    EXPECT_LE(worst, t == GgmlType::kQ2_K ? 0.45 : 0.3);
  }
}

TEST(KQuantQuantizeTest, NonFiniteInputsStayDefined) {
  // No UB on NaN or inf (UBSan checks the float-to-int conversions).
  std::vector<float> src(256, 1.0f);
  src[3] = std::numeric_limits<float>::quiet_NaN();
  src[40] = std::numeric_limits<float>::infinity();
  for (GgmlType t : kBlockTypes) {
    std::vector<uint8_t> q(RowBytes(t, 256));
    QuantizeRow(t, src.data(), q.data(), 256);
    std::vector<float> back(256);
    DequantizeRow(t, q.data(), back.data(), 256);
    EXPECT_FALSE(std::isnan(back[100])) << Name(t);
  }
}

// MatMul over the new formats, through every path: row dots with float activations, row dots
// with int8 activations (256-element formats, several passes of the stack buffer at 14336
// columns), and the GEMM on dequantised panels; against a double product of the decoded weights.
// With int8 activations the bound adds the rounding of each activation (at most |d| / 2).
TEST(KQuantMatMulTest, AllPathsMatchReference) {
  ThreadPool pool(2);
  std::mt19937_64 rng(21);
  for (GgmlType t : kBlockTypes) {
    const KBlock layout = BlockOf(t);
    for (int64_t cols : {layout.elements == 32 ? int64_t{96} : int64_t{512}, int64_t{14336}}) {
      const int64_t rows = 9;
      const std::vector<uint8_t> w_bytes = RandomBlocks(rng, t, rows * cols / layout.elements);
      const size_t row_bytes = RowBytes(t, cols);
      const WeightView w{t, rows, cols, row_bytes, w_bytes.data()};
      std::vector<float> decoded(static_cast<size_t>(rows * cols));
      for (int64_t r = 0; r < rows; ++r) {
        internal::Find(internal::ScalarKernels(), t)
            ->dequantize(w_bytes.data() + r * row_bytes, decoded.data() + r * cols, cols);
      }
      for (int64_t n : {1, 5, 20}) {
        const std::vector<float> x = RandomFloats(rng, n * cols);
        for (bool int8 : {false, true}) {
          SCOPED_TRACE(Name(t) + " cols=" + std::to_string(cols) + " n=" + std::to_string(n) +
                       (int8 ? " int8" : " float"));
          ::primekv::internal::MatMulTiling tiling;
          tiling.int8_activations = int8;
          std::vector<float> y(static_cast<size_t>(n * rows), -1.0f);
          ::primekv::internal::MatMulTiled(w, {x.data(), n, cols, cols}, {y.data(), n, rows, rows},
                                           pool, tiling);
          const bool rounded = int8 && n < tiling.small_batch && cols % 256 == 0 &&
                               layout.elements == internal::kSuperBlock;
          for (int64_t i = 0; i < n; ++i) {
            // The activation step of each 256-block of this row, as QuantizeQ8K sets it.
            std::vector<double> step(static_cast<size_t>(cols / 256 + 1), 0.0);
            if (rounded) {
              for (int64_t k = 0; k < cols; ++k) {
                double& s = step[static_cast<size_t>(k / 256)];
                s = std::fmax(s, std::fabs(x[static_cast<size_t>(i * cols + k)]) / 127.0);
              }
            }
            for (int64_t r = 0; r < rows; ++r) {
              double exact = 0.0, magnitude = 0.0, rounding = 0.0;
              for (int64_t k = 0; k < cols; ++k) {
                const double wv = decoded[static_cast<size_t>(r * cols + k)];
                const double xv = x[static_cast<size_t>(i * cols + k)];
                exact += wv * xv;
                magnitude += std::fabs(wv * xv);
                rounding += std::fabs(wv) * step[static_cast<size_t>(k / 256)] * 0.5;
              }
              // Float bound as in CheckTableAgainstScalar (magnitude without the offsets, so
              // doubled), plus the activation rounding.
              const double tol =
                  2 * (static_cast<double>(cols) + 4) * 0x1p-24 * magnitude + rounding * (1 + 1e-3);
              ASSERT_NEAR(y[static_cast<size_t>(i * rows + r)], exact, tol)
                  << "i=" << i << " r=" << r;
            }
          }
        }
      }
    }
  }
}

}  // namespace
}  // namespace primekv::quant
