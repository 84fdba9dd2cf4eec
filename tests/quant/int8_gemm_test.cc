// The integer-dot path: the activation quantiser of every table against its definition and
// bit for bit against the scalar one, and every table's Q8_0 / Q4_0 product against an
// independent double-precision sum over the same quantised activations, and the K-quant batch
// kernels (AMX) against their twins and the same sums. Tables for an instruction set this CPU
// lacks are built but reported as skipped.
#include "quant/int8_gemm.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <iterator>
#include <random>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "primekv/quant/matmul.h"
#include "primekv/quant/quant.h"
#include "quant/int8_matmul.h"
#include "quant/quant_reference.h"

namespace primekv {
namespace {

using quant::internal::Int8Kernels;
using quant::internal::IsaName;
using quant::internal::kQ8Block;
using quant::internal::Q8Rows;
using quant::ref::RandomFloats;
using quant::ref::RandomRow;
using quant::ref::RefDecode;
using quant::ref::RefRowBytes;
using quant::ref::TypeName;

constexpr double kFloatUnit = 1.0 / (1 << 23);  // float epsilon, 2^-23

// Every table this build has, with whether this CPU can run it.
std::vector<const Int8Kernels*> AllTables() {
  std::vector<const Int8Kernels*> all = {&quant::internal::ScalarInt8Kernels()};
  for (const Int8Kernels* t :
       {quant::internal::Avx2Int8Kernels(), quant::internal::Avx512VnniInt8Kernels(),
        quant::internal::AmxInt8Kernels()}) {
    if (t != nullptr) all.push_back(t);
  }
  return all;
}

std::string Skipped(const std::vector<std::string>& names) {
  std::string s;
  for (const auto& n : names) s += (s.empty() ? "" : ", ") + n;
  return s;
}

// The tables this CPU can run; the names of the others go to `skipped`.
std::vector<const Int8Kernels*> RunnableTables(std::vector<std::string>& skipped) {
  std::vector<const Int8Kernels*> out;
  for (const Int8Kernels* t : AllTables()) {
    if (quant::internal::CpuHasIsa(t->isa)) {
      out.push_back(t);
    } else {
      skipped.push_back(IsaName(t->isa));
    }
  }
  return out;
}

// x [n, cols] quantised to 8-bit blocks by `table`; `a` points into the vectors.
struct Activations {
  Activations(const std::vector<float>& x, int64_t n, int64_t cols, const Int8Kernels& table,
              ThreadPool& pool) {
    internal::QuantizeActivations(MatView<const float>(x.data(), n, cols), table, q, d, s, a, pool);
  }
  Activations(const Activations&) = delete;
  Activations& operator=(const Activations&) = delete;
  std::vector<int8_t> q;
  std::vector<float> d;
  std::vector<int32_t> s;
  Q8Rows a;
};

// Weights of `rows` x `cols` in one buffer, rows `pad` bytes apart beyond their size (pad 0: an
// exactly sized buffer, so that ASan sees a read past the last row), with decoded values.
struct WeightMatrix {
  size_t row_bytes = 0;
  std::vector<uint8_t> bytes;
  std::vector<std::vector<double>> decoded;
};
WeightMatrix RandomMatrix(std::mt19937_64& rng, GgmlType type, int64_t rows, int64_t cols,
                          size_t pad = 0) {
  WeightMatrix m;
  m.row_bytes = RefRowBytes(type, cols) + pad;
  m.bytes.resize(m.row_bytes * rows);
  for (int64_t r = 0; r < rows; ++r) {
    const std::vector<uint8_t> row = RandomRow(rng, type, cols, 0.5f);
    std::copy(row.begin(), row.end(), m.bytes.begin() + r * m.row_bytes);
    m.decoded.push_back(RefDecode(type, row.data(), cols));
  }
  return m;
}

// Token t's exact product with decoded weight row w over the quantised activations, and the
// float summation bound over its blocks.
struct ExactProduct {
  double value = 0;
  double tolerance = 0;
};
ExactProduct Exact(const std::vector<double>& w, const Q8Rows& a, int64_t t) {
  const int64_t cols = static_cast<int64_t>(w.size());
  double exact = 0, magnitude = 0;
  for (int64_t k = 0; k < cols; ++k) {
    const double term = w[k] * a.d[t * a.block_stride + k / 32] * a.q[t * a.stride + k];
    exact += term;
    magnitude += std::fabs(term);
  }
  return {exact, (cols / 32.0 + 4) * 2 * kFloatUnit * magnitude + 1e-30};
}

TEST(Int8QuantizeTest, ScalarMeetsItsDefinition) {
  std::mt19937_64 rng(7);
  const int64_t n = 320;
  std::vector<float> x = RandomFloats(rng, n, 3.0f);
  for (int j = 32; j < 64; ++j) x[j] = 0.0f;  // an all-zero block
  x[70] = 1e-30f;                             // a tiny block maximum
  for (int j = 64; j < 96; ++j) x[j] = j == 70 ? x[j] : 0.0f;
  std::vector<int8_t> q(n);
  std::vector<float> d(n / kQ8Block);
  std::vector<int32_t> sum(n / kQ8Block);
  quant::internal::ScalarInt8Kernels().quantize(x.data(), n, q.data(), d.data(), sum.data());
  for (int64_t b = 0; b < n / kQ8Block; ++b) {
    double amax = 0;
    int32_t s = 0;
    for (int j = 0; j < kQ8Block; ++j) amax = std::max(amax, std::fabs(double{x[b * 32 + j]}));
    // The quants are rounded with the exact scale; the block keeps it in fp16, as Q8_0 does.
    const float exact = static_cast<float>(amax / 127.0);
    EXPECT_EQ(d[b], quant::F16ToF32(quant::F32ToF16(exact))) << "block " << b;
    for (int j = 0; j < kQ8Block; ++j) {
      const int64_t k = b * kQ8Block + j;
      ASSERT_LE(std::abs(int{q[k]}), 127);
      // Rounding to nearest: within half a step (plus the float rounding of x / d).
      EXPECT_LE(std::fabs(x[k] - double{exact} * q[k]), 0.5 * exact * (1 + 1e-5) + 1e-37)
          << "element " << k;
      s += q[k];
    }
    EXPECT_EQ(sum[b], s) << "block " << b;
  }
  EXPECT_EQ(d[1], 0.0f);
  for (int j = 32; j < 64; ++j) EXPECT_EQ(q[j], 0);
  EXPECT_EQ(std::abs(int{q[70]}), 127);
}

TEST(Int8QuantizeTest, EveryTableMatchesScalarBitForBit) {
  std::mt19937_64 rng(8);
  const int64_t n = 2048;
  std::vector<float> x = RandomFloats(rng, n, 0.7f);
  std::fill_n(x.begin(), 32, 0.0f);  // a zero block: d = 0, no reciprocal
  for (int j = 32; j < 64; ++j) x[j] = (j % 2 ? -1.0f : 1.0f) * (static_cast<float>(j - 32) + 0.5f);
  x[63] = 127.0f;  // d = 1: the other values of the block are ties, rounded to even
  std::vector<int8_t> q0(n), q1(n);
  std::vector<float> d0(n / 32), d1(n / 32);
  std::vector<int32_t> s0(n / 32), s1(n / 32);
  quant::internal::ScalarInt8Kernels().quantize(x.data(), n, q0.data(), d0.data(), s0.data());
  std::vector<std::string> skipped;
  for (const Int8Kernels* t : RunnableTables(skipped)) {
    t->quantize(x.data(), n, q1.data(), d1.data(), s1.data());
    EXPECT_EQ(q0, q1) << IsaName(t->isa);
    EXPECT_EQ(d0, d1) << IsaName(t->isa);
    EXPECT_EQ(s0, s1) << IsaName(t->isa);
  }
  if (!skipped.empty()) GTEST_SKIP() << "not run on this CPU: " << Skipped(skipped);
}

// Products of every table against sum_b dw_b * da_b * sum_j w_j a_j in double, from the
// reference decoder's weights and the quantised activations; the tolerance is the float
// summation bound over the blocks.
TEST(Int8GemmTest, EveryTableMatchesDoubleReference) {
  std::mt19937_64 rng(9);
  ThreadPool pool(1);
  std::vector<std::string> skipped;
  for (const Int8Kernels* table : RunnableTables(skipped)) {
    for (GgmlType type : {GgmlType::kQ8_0, GgmlType::kQ4_0}) {
      const quant::internal::Q8GemmFn gemm = quant::internal::FindQ8Gemm(*table, type);
      ASSERT_NE(gemm, nullptr);
      for (auto [rows, cols] :
           {std::pair<int64_t, int64_t>{1, 32}, {5, 96}, {9, 64}, {37, 320}, {8, 2080}}) {
        const WeightMatrix w = RandomMatrix(rng, type, rows, cols, /*pad=*/6);
        for (int64_t n : {1, 2, 3, 4, 5, 7, 70}) {
          const std::vector<float> x = RandomFloats(rng, n * cols);
          const Activations act(x, n, cols, *table, pool);
          const int64_t ldo = rows + 3;
          std::vector<float> out(n * ldo, -7.0f);
          gemm(w.bytes.data(), w.row_bytes, rows, act.a, out.data(), ldo);
          const std::string what = std::string(IsaName(table->isa)) + " " + TypeName(type) +
                                   " rows=" + std::to_string(rows) +
                                   " cols=" + std::to_string(cols) + " n=" + std::to_string(n);
          for (int64_t t = 0; t < n; ++t) {
            for (int64_t r = 0; r < rows; ++r) {
              const ExactProduct e = Exact(w.decoded[r], act.a, t);
              ASSERT_NEAR(out[t * ldo + r], e.value, e.tolerance)
                  << what << " t=" << t << " r=" << r;
            }
            for (int64_t r = rows; r < ldo; ++r)
              ASSERT_EQ(out[t * ldo + r], -7.0f) << what << ": wrote past the rows";
          }
        }
      }
    }
  }
  if (!skipped.empty()) GTEST_SKIP() << "not run on this CPU: " << Skipped(skipped);
}

// A decode batch: every token's outputs of a product over 2 to 7 tokens are the same bits as
// the product over that token alone (what keeps batched decoding's logits equal to one-token
// decoding), for row counts around the kernels' tiles.
TEST(Int8GemmTest, FewTokensEqualOneTokenBitForBit) {
  std::mt19937_64 rng(21);
  ThreadPool pool(1);
  std::vector<std::string> skipped;
  for (const Int8Kernels* table : RunnableTables(skipped)) {
    for (GgmlType type : {GgmlType::kQ8_0, GgmlType::kQ4_0}) {
      const quant::internal::Q8GemmFn gemm = quant::internal::FindQ8Gemm(*table, type);
      for (auto [rows, cols] : {std::pair<int64_t, int64_t>{1, 32}, {7, 96}, {37, 2080}}) {
        const WeightMatrix w = RandomMatrix(rng, type, rows, cols);
        const size_t row_bytes = w.row_bytes;
        const std::vector<uint8_t>& wbytes = w.bytes;
        for (int64_t n = 2; n <= 7; ++n) {
          const std::vector<float> x = RandomFloats(rng, n * cols);
          const Activations act(x, n, cols, *table, pool);
          const Q8Rows& a = act.a;
          std::vector<float> out(n * rows);
          gemm(wbytes.data(), row_bytes, rows, a, out.data(), rows);
          for (int64_t t = 0; t < n; ++t) {
            Q8Rows one = a;
            one.rows = 1;
            one.q = a.q + t * a.stride;
            one.d = a.d + t * a.block_stride;
            one.sum = a.sum + t * a.block_stride;
            std::vector<float> alone(rows);
            gemm(wbytes.data(), row_bytes, rows, one, alone.data(), rows);
            for (int64_t r = 0; r < rows; ++r) {
              ASSERT_EQ(std::memcmp(&out[t * rows + r], &alone[r], sizeof(float)), 0)
                  << IsaName(table->isa) << " " << TypeName(type) << " rows=" << rows
                  << " cols=" << cols << " n=" << n << " t=" << t << " r=" << r << ": "
                  << out[t * rows + r] << " vs " << alone[r];
            }
          }
        }
      }
    }
  }
  if (!skipped.empty()) GTEST_SKIP() << "not run on this CPU: " << Skipped(skipped);
}

// Column counts of 1-4 blocks past a multiple of four (the decode kernels' step), short and long.
constexpr std::pair<int64_t, int64_t> kDecodeShapes[] = {
    {1, 32}, {3, 64}, {2, 96}, {5, 128}, {4, 160}, {2, 224}, {37, 2080}, {9, 2048}, {3, 8192 + 96}};

// The decode twins: the scalar replicas of SIMD kernels below 16 tokens, with their tables.
struct DecodeTwin {
  GgmlType type;
  quant::internal::Q8GemmFn twin;
  const Int8Kernels* (*table)();
};
constexpr DecodeTwin kDecodeTwins[] = {
    {GgmlType::kQ8_0, quant::internal::Q8_0DecodeTwin, quant::internal::Avx512VnniInt8Kernels},
    {GgmlType::kQ4_0, quant::internal::Q4_0DecodeTwin, quant::internal::Avx512VnniInt8Kernels},
    {GgmlType::kQ8_0, quant::internal::Q8_0Avx2DecodeTwin, quant::internal::Avx2Int8Kernels},
    {GgmlType::kQ4_0, quant::internal::Q4_0Avx2DecodeTwin, quant::internal::Avx2Int8Kernels},
    // The AMX table runs the AVX-512 VNNI kernels below 16 tokens.
    {GgmlType::kQ8_0, quant::internal::Q8_0DecodeTwin, quant::internal::AmxInt8Kernels},
    {GgmlType::kQ4_0, quant::internal::Q4_0DecodeTwin, quant::internal::AmxInt8Kernels}};

// Each twin is a faithful product: within the float summation bound of the exact sum over the
// same quantised activations, for every shape and token count.
void ExpectTwinsMatchReference(std::span<const DecodeTwin> twins,
                               std::span<const std::pair<int64_t, int64_t>> shapes,
                               std::span<const int64_t> token_counts, uint64_t seed) {
  std::mt19937_64 rng(seed);
  ThreadPool pool(1);
  for (const DecodeTwin& twin : twins) {
    for (auto [rows, cols] : shapes) {
      const WeightMatrix w = RandomMatrix(rng, twin.type, rows, cols);
      for (int64_t n : token_counts) {
        const std::vector<float> x = RandomFloats(rng, n * cols);
        const Activations act(x, n, cols, quant::internal::ScalarInt8Kernels(), pool);
        std::vector<float> out(n * rows);
        twin.twin(w.bytes.data(), w.row_bytes, rows, act.a, out.data(), rows);
        for (int64_t t = 0; t < n; ++t) {
          for (int64_t r = 0; r < rows; ++r) {
            const ExactProduct e = Exact(w.decoded[r], act.a, t);
            ASSERT_NEAR(out[t * rows + r], e.value, e.tolerance)
                << TypeName(twin.type) << " rows=" << rows << " cols=" << cols << " n=" << n
                << " t=" << t << " r=" << r;
          }
        }
      }
    }
  }
}

// Each twin's SIMD kernel gives the twin's bits for every shape and token count, and writes
// nothing past the rows (ldo = rows + 2). Returns the tables this CPU cannot run.
std::vector<std::string> ExpectKernelsEqualTwins(
    std::span<const DecodeTwin> twins, std::span<const std::pair<int64_t, int64_t>> shapes,
    std::span<const int64_t> token_counts, uint64_t seed) {
  std::mt19937_64 rng(seed);
  ThreadPool pool(1);
  std::vector<std::string> skipped;
  for (const DecodeTwin& twin : twins) {
    const Int8Kernels* table = twin.table();
    if (table == nullptr || !quant::internal::CpuHasIsa(table->isa)) {
      skipped.push_back(std::string(table == nullptr ? "(not built)" : IsaName(table->isa)) + " " +
                        TypeName(twin.type));
      continue;
    }
    const quant::internal::Q8GemmFn gemm = quant::internal::FindQ8Gemm(*table, twin.type);
    for (auto [rows, cols] : shapes) {
      const WeightMatrix w = RandomMatrix(rng, twin.type, rows, cols);
      for (int64_t n : token_counts) {
        const std::vector<float> x = RandomFloats(rng, n * cols);
        const Activations act(x, n, cols, *table, pool);
        const int64_t ldo = rows + 2;
        std::vector<float> got(n * ldo, -7.0f), want(n * ldo, -7.0f);
        gemm(w.bytes.data(), w.row_bytes, rows, act.a, got.data(), ldo);
        twin.twin(w.bytes.data(), w.row_bytes, rows, act.a, want.data(), ldo);
        for (int64_t i = 0; i < n * ldo; ++i) {
          EXPECT_EQ(std::memcmp(&got[i], &want[i], sizeof(float)), 0)
              << IsaName(table->isa) << " " << TypeName(twin.type) << " rows=" << rows
              << " cols=" << cols << " n=" << n << " t=" << i / ldo << " r=" << i % ldo << ": "
              << got[i] << " vs " << want[i];
          if (::testing::Test::HasFailure()) return skipped;
        }
      }
    }
  }
  return skipped;
}

// Every token count one decode call takes at once (more are split into such calls).
constexpr int64_t kDecodeTokens[] = {1, 2, 3, 4, 5};
static_assert(std::size(kDecodeTokens) == quant::internal::kStreamTokens);

TEST(Int8GemmTest, DecodeTwinsMatchDoubleReference) {
  ExpectTwinsMatchReference(kDecodeTwins, kDecodeShapes, kDecodeTokens, 31);
}

// The AVX-512 VNNI and AVX2 Q8_0 and Q4_0 kernels below 16 tokens (decode and small batches) give
// their twins' bits.
TEST(Int8GemmTest, DecodeEqualsTwinBitForBit) {
  constexpr int64_t kTokens[] = {1, 2, 3, 4, 5, 7, 15};
  const auto skipped = ExpectKernelsEqualTwins(kDecodeTwins, kDecodeShapes, kTokens, 32);
  if (!skipped.empty()) GTEST_SKIP() << "not run on this CPU: " << Skipped(skipped);
}

// The panel twins: the scalar replicas of the SIMD kernels from 16 tokens on (prefill).
constexpr DecodeTwin kPanelTwins[] = {
    {GgmlType::kQ8_0, quant::internal::Q8_0PanelTwin, quant::internal::Avx512VnniInt8Kernels},
    {GgmlType::kQ4_0, quant::internal::Q4_0PanelTwin, quant::internal::Avx512VnniInt8Kernels},
    {GgmlType::kQ8_0, quant::internal::Q8_0PanelTwin, quant::internal::Avx2Int8Kernels},
    {GgmlType::kQ4_0, quant::internal::Q4_0PanelTwin, quant::internal::Avx2Int8Kernels},
    {GgmlType::kQ8_0, quant::internal::Q8_0PanelTwin, quant::internal::AmxInt8Kernels},
    {GgmlType::kQ4_0, quant::internal::Q4_0PanelTwin, quant::internal::AmxInt8Kernels}};

// Row counts around the 8- and 16-row panels, token counts around the tiles.
constexpr std::pair<int64_t, int64_t> kPanelShapes[] = {{1, 32},  {7, 96},    {8, 64},
                                                        {9, 160}, {17, 2080}, {37, 320}};

TEST(Int8GemmTest, PanelTwinsMatchDoubleReference) {
  constexpr int64_t kTokens[] = {17};
  ExpectTwinsMatchReference(kPanelTwins, kPanelShapes, kTokens, 33);
}

// The AMX, AVX-512 VNNI and AVX2 kernels from 16 tokens on give their panel twins' bits (AMX:
// whole groups of 16 tokens on tiles, the rest in 4s and 1s).
TEST(Int8GemmTest, BatchEqualsPanelTwinBitForBit) {
  constexpr int64_t kTokens[] = {16, 17, 18, 19, 32, 33, 70};
  const auto skipped = ExpectKernelsEqualTwins(kPanelTwins, kPanelShapes, kTokens, 34);
  if (!skipped.empty()) GTEST_SKIP() << "not run on this CPU: " << Skipped(skipped);
}

// MatMul through the integer path against the exact float product: off by no more than the
// activation rounding, sum_k |w_k| * d_block(k) / 2, plus float summation.
TEST(Int8GemmTest, MatMulStaysWithinActivationRounding) {
  std::mt19937_64 rng(10);
  for (int threads : {1, 2, 3}) {
    ThreadPool pool(threads);
    for (GgmlType type : {GgmlType::kQ8_0, GgmlType::kQ4_0}) {
      const int64_t rows = 301, cols = 576;
      const size_t row_bytes = RefRowBytes(type, cols);
      std::vector<uint8_t> wbytes(row_bytes * rows);
      std::vector<std::vector<double>> wdec;
      for (int64_t r = 0; r < rows; ++r) {
        const std::vector<uint8_t> row = RandomRow(rng, type, cols, 0.5f);
        std::copy(row.begin(), row.end(), wbytes.begin() + r * row_bytes);
        wdec.push_back(RefDecode(type, row.data(), cols));
      }
      const WeightView w{type, rows, cols, row_bytes, wbytes.data()};
      for (int64_t n : {1, 3, 130}) {
        const std::vector<float> x = RandomFloats(rng, n * cols);
        std::vector<float> y(n * rows);
        MatMul(w, MatView<const float>(x.data(), n, cols), MatView<float>(y.data(), n, rows), pool);
        for (int64_t t = 0; t < n; ++t) {
          std::vector<double> half_step(cols / 32);
          for (int64_t b = 0; b < cols / 32; ++b) {
            double amax = 0;
            for (int j = 0; j < 32; ++j)
              amax = std::max(amax, std::fabs(double{x[t * cols + b * 32 + j]}));
            half_step[b] = amax / 127.0 / 2 * (1 + 1e-5);
          }
          for (int64_t r = 0; r < rows; ++r) {
            double exact = 0, bound = 0, magnitude = 0;
            for (int64_t k = 0; k < cols; ++k) {
              exact += wdec[r][k] * x[t * cols + k];
              bound += std::fabs(wdec[r][k]) * half_step[k / 32];
              magnitude += std::fabs(wdec[r][k] * x[t * cols + k]);
            }
            const double tol = bound + (cols / 32.0 + 4) * 4 * kFloatUnit * magnitude + 1e-30;
            ASSERT_NEAR(y[t * rows + r], exact, tol) << TypeName(type) << " threads=" << threads
                                                     << " n=" << n << " t=" << t << " r=" << r;
          }
        }
      }
    }
  }
}

std::string KName(GgmlType type) { return std::string(TypeInfo(type)->name); }

// K-quant weights made by the engine's own encoder from random floats, with their decoded values
// and, per element, the largest magnitude of its group of 32 (a bound on the group's minimum:
// w = scale * q - min with q >= 0 makes |min| <= max |w|).
struct KQuantMatrix {
  size_t row_bytes = 0;
  std::vector<uint8_t> bytes;
  std::vector<std::vector<double>> decoded;
  std::vector<std::vector<double>> group_max;
};
KQuantMatrix RandomKQuantMatrix(std::mt19937_64& rng, GgmlType type, int64_t rows, int64_t cols) {
  KQuantMatrix m;
  m.row_bytes = quant::RowBytes(type, cols);
  m.bytes.resize(m.row_bytes * rows);
  std::vector<float> dec(cols);
  for (int64_t r = 0; r < rows; ++r) {
    const std::vector<float> x = RandomFloats(rng, cols, 0.5f);
    quant::QuantizeRow(type, x.data(), m.bytes.data() + r * m.row_bytes, cols);
    quant::DequantizeRow(type, m.bytes.data() + r * m.row_bytes, dec.data(), cols);
    m.decoded.emplace_back(dec.begin(), dec.end());
    std::vector<double> gmax(cols);
    for (int64_t g = 0; g < cols / 32; ++g) {
      double v = 0;
      for (int k = 0; k < 32; ++k) v = std::max(v, std::fabs(double{dec[g * 32 + k]}));
      std::fill_n(gmax.begin() + g * 32, 32, v);
    }
    m.group_max.push_back(std::move(gmax));
  }
  return m;
}

struct KQuantTwin {
  GgmlType type;
  quant::internal::Q8GemmFn twin;
};
constexpr KQuantTwin kKQuantTwins[] = {
    {GgmlType::kQ3_K, quant::internal::KQuantPanelTwin<GgmlType::kQ3_K>},
    {GgmlType::kQ4_K, quant::internal::KQuantPanelTwin<GgmlType::kQ4_K>},
    {GgmlType::kQ5_K, quant::internal::KQuantPanelTwin<GgmlType::kQ5_K>},
    {GgmlType::kQ6_K, quant::internal::KQuantPanelTwin<GgmlType::kQ6_K>},
    {GgmlType::kIQ4_XS, quant::internal::KQuantPanelTwin<GgmlType::kIQ4_XS>}};
constexpr std::pair<int64_t, int64_t> kKQuantShapes[] = {{1, 256}, {7, 512}, {16, 256}, {37, 768}};

// Each twin is a faithful product of the decoded weights with the quantised activations: within
// the float bound of its terms (scaled quant and minimum, each group's minimum bounded by the
// group's largest weight).
TEST(Int8GemmTest, KQuantBatchTwinsMatchDoubleReference) {
  std::mt19937_64 rng(35);
  ThreadPool pool(1);
  for (const KQuantTwin& twin : kKQuantTwins) {
    for (auto [rows, cols] : kKQuantShapes) {
      const KQuantMatrix w = RandomKQuantMatrix(rng, twin.type, rows, cols);
      const int64_t n = 17;
      const std::vector<float> x = RandomFloats(rng, n * cols);
      const Activations act(x, n, cols, quant::internal::ScalarInt8Kernels(), pool);
      std::vector<float> out(n * rows);
      twin.twin(w.bytes.data(), w.row_bytes, rows, act.a, out.data(), rows);
      for (int64_t t = 0; t < n; ++t) {
        for (int64_t r = 0; r < rows; ++r) {
          double exact = 0, magnitude = 0;
          for (int64_t k = 0; k < cols; ++k) {
            const double xa =
                act.a.d[t * act.a.block_stride + k / 32] * act.a.q[t * act.a.stride + k];
            exact += w.decoded[r][k] * xa;
            magnitude += (std::fabs(w.decoded[r][k]) + 2 * w.group_max[r][k]) * std::fabs(xa);
          }
          ASSERT_NEAR(out[t * rows + r], exact,
                      (cols / 16.0 + 4) * 4 * kFloatUnit * magnitude + 1e-30)
              << KName(twin.type) << " rows=" << rows << " cols=" << cols << " t=" << t
              << " r=" << r;
        }
      }
    }
  }
}

// The AMX K-quant batch kernels give their twins' bits for every shape and token count (whole
// and padded groups of 16 tokens), writing nothing past the rows or the tokens.
TEST(Int8GemmTest, KQuantBatchEqualsTwinBitForBit) {
  const Int8Kernels* table = quant::internal::AmxInt8Kernels();
  if (table == nullptr || !quant::internal::CpuHasIsa(table->isa)) {
    GTEST_SKIP() << "not run on this CPU: amx";
  }
  std::mt19937_64 rng(36);
  ThreadPool pool(1);
  for (const KQuantTwin& twin : kKQuantTwins) {
    const quant::internal::Q8GemmFn gemm = quant::internal::FindBatchQ8Gemm(*table, twin.type);
    ASSERT_NE(gemm, nullptr) << KName(twin.type);
    for (auto [rows, cols] : kKQuantShapes) {
      const KQuantMatrix w = RandomKQuantMatrix(rng, twin.type, rows, cols);
      for (int64_t n : {16, 17, 31, 33, 70}) {
        const std::vector<float> x = RandomFloats(rng, n * cols);
        const Activations act(x, n, cols, *table, pool);
        const int64_t ldo = rows + 2;
        std::vector<float> got((n + 1) * ldo, -7.0f), want((n + 1) * ldo, -7.0f);
        gemm(w.bytes.data(), w.row_bytes, rows, act.a, got.data(), ldo);
        twin.twin(w.bytes.data(), w.row_bytes, rows, act.a, want.data(), ldo);
        for (int64_t i = 0; i < (n + 1) * ldo; ++i) {
          ASSERT_EQ(std::memcmp(&got[i], &want[i], sizeof(float)), 0)
              << KName(twin.type) << " rows=" << rows << " cols=" << cols << " n=" << n
              << " t=" << i / ldo << " r=" << i % ldo << ": " << got[i] << " vs " << want[i];
        }
      }
    }
  }
}

}  // namespace
}  // namespace primekv
