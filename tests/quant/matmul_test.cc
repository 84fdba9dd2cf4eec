// MatMul and GetRow against a double-precision product of independently decoded weights.
#include "primekv/quant/matmul.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "primekv/quant/quant.h"
#include "quant/int8_gemm.h"
#include "quant/int8_matmul.h"
#include "quant/kernels.h"
#include "quant/matmul_internal.h"
#include "quant/quant_reference.h"

namespace primekv {
namespace {

using quant::ref::kComputableTypes;
using quant::ref::kUnit;
using quant::ref::RandomFloats;
using quant::ref::RandomRow;
using quant::ref::RefDecode;
using quant::ref::RefRowBytes;
using quant::ref::TypeName;

// A random weight matrix with `pad` spare bytes after each row (as if the rows were strided).
struct TestWeight {
  std::vector<uint8_t> bytes;
  WeightView view;
  std::vector<std::vector<double>> decoded;  // [rows][cols]
};

TestWeight MakeWeight(std::mt19937_64& rng, GgmlType type, int64_t rows, int64_t cols,
                      size_t pad = 0) {
  TestWeight w;
  if (RefRowBytes(type, cols) == 0) {
    // A type the reference does not encode (the K-quants): random values through QuantizeRow,
    // for the tests that compare two paths of MatMul with each other.
    const size_t row_bytes = quant::RowBytes(type, cols) + pad;
    w.bytes.resize(row_bytes * rows);
    std::normal_distribution<float> dist(0.0f, 0.5f);
    std::vector<float> values(static_cast<size_t>(cols));
    for (int64_t r = 0; r < rows; ++r) {
      for (float& v : values) v = dist(rng);
      quant::QuantizeRow(type, values.data(), w.bytes.data() + r * row_bytes, cols);
      std::vector<float> decoded(static_cast<size_t>(cols));
      quant::DequantizeRow(type, w.bytes.data() + r * row_bytes, decoded.data(), cols);
      w.decoded.emplace_back(decoded.begin(), decoded.end());
    }
    w.view = WeightView{type, rows, cols, row_bytes, w.bytes.data()};
    return w;
  }
  const size_t row_bytes = RefRowBytes(type, cols) + pad;
  w.bytes.resize(row_bytes * rows);
  for (int64_t r = 0; r < rows; ++r) {
    const std::vector<uint8_t> row = RandomRow(rng, type, cols, 0.5f);
    std::memcpy(w.bytes.data() + r * row_bytes, row.data(), row.size());
    w.decoded.push_back(RefDecode(type, row.data(), cols));
  }
  w.view = WeightView{type, rows, cols, row_bytes, w.bytes.data()};
  return w;
}

// Checks y against sum_k x[i][k] w[r][k] in double, within the summation bound for K terms.
void ExpectProduct(const TestWeight& w, MatView<const float> x, MatView<const float> y,
                   const std::string& what) {
  for (int64_t i = 0; i < x.rows; ++i) {
    for (int64_t r = 0; r < w.view.rows; ++r) {
      double exact = 0.0, magnitude = 0.0;
      for (int64_t k = 0; k < x.cols; ++k) {
        exact += w.decoded[r][k] * x(i, k);
        magnitude += std::fabs(w.decoded[r][k] * x(i, k));
      }
      const double tolerance = (static_cast<double>(x.cols) + 2) * kUnit * magnitude + 1e-30;
      ASSERT_NEAR(y(i, r), exact, tolerance) << what << " i=" << i << " r=" << r;
    }
  }
}

std::string Case(GgmlType type, int64_t n, int64_t rows, int64_t cols, int threads) {
  return std::string(TypeName(type)) + " n=" + std::to_string(n) + " rows=" + std::to_string(rows) +
         " cols=" + std::to_string(cols) + " threads=" + std::to_string(threads);
}

TEST(MatMulTest, MatchesReferenceForAllTypesAndBatchSizes) {
  std::mt19937_64 rng(42);
  ThreadPool pool(3);
  for (GgmlType type : kComputableTypes) {
    for (auto [rows, cols] : {std::pair<int64_t, int64_t>{37, 64}, {300, 1056}, {129, 4096}}) {
      const TestWeight w = MakeWeight(rng, type, rows, cols);
      for (int64_t n : {1, 2, 3, 4, 17, 64}) {
        const std::vector<float> x = RandomFloats(rng, n * cols);
        std::vector<float> y(n * rows, std::nanf(""));
        // The float kernels (MatMul itself takes the integer path for Q8_0 and Q4_0, whose
        // activation rounding int8_gemm_test.cc bounds).
        internal::MatMulTiled(w.view, MatView<const float>(x.data(), n, cols),
                              MatView<float>(y.data(), n, rows), pool, internal::MatMulTiling{});
        ExpectProduct(w, MatView<const float>(x.data(), n, cols),
                      MatView<const float>(y.data(), n, rows),
                      Case(type, n, rows, cols, pool.size()));
      }
    }
  }
}

// Every code path (dots, built-in GEMM, BLAS GEMM) at every batch size, small panels and
// column chunks (partial last panel and tile, several K chunks accumulating, several token
// blocks and partial token groups), strided x and y, padded weight rows, 1 and 2 threads.
TEST(MatMulTest, TilingsStridesAndPaddingAgree) {
  std::mt19937_64 rng(43);
  const int64_t rows = 83, cols = 320, x_stride = 333, y_stride = 90;
  for (GgmlType type : kComputableTypes) {
    for (size_t pad : {size_t{0}, size_t{8}}) {
      const TestWeight w = MakeWeight(rng, type, rows, cols, pad);
      for (int threads : {1, 2}) {
        ThreadPool pool(threads);
        for (const quant::internal::KernelTable* kernels : quant::internal::SupportedKernels()) {
          for (int64_t n : {1, 2, 5, 17, 70}) {
            const std::vector<float> x = RandomFloats(rng, n * x_stride);
            const MatView<const float> xv(x.data(), n, cols, x_stride);
            // {small_batch, panel_rows, panel_cols, token_block, use_blas, kernels}
            for (const internal::MatMulTiling tiling : {
                     internal::MatMulTiling{1, 16, 64, 32, false, kernels},
                     internal::MatMulTiling{1, 32, 96, 8, false, kernels},
                     internal::MatMulTiling{1, 200, 4096, 512, false, kernels},
                     internal::MatMulTiling{100, 16, 64, 512, false, kernels},
                     internal::MatMulTiling{1, 16, 64, 512, true, kernels},
                     internal::MatMulTiling{2, 200, 4096, 512, true, kernels},
                 }) {
              std::vector<float> y(n * y_stride, -7.0f);
              internal::MatMulTiled(w.view, xv, MatView<float>(y.data(), n, rows, y_stride), pool,
                                    tiling);
              const std::string what =
                  Case(type, n, rows, cols, threads) + " pad=" + std::to_string(pad) +
                  " panel=" + std::to_string(tiling.panel_rows) + "x" +
                  std::to_string(tiling.panel_cols) +
                  " small=" + std::to_string(tiling.small_batch) +
                  " tokens=" + std::to_string(tiling.token_block) +
                  (tiling.use_blas ? " blas " : " ") + quant::internal::IsaName(kernels->isa);
              ExpectProduct(w, xv, MatView<const float>(y.data(), n, rows, y_stride), what);
              for (int64_t i = 0; i < n; ++i) {
                for (int64_t c = rows; c < y_stride; ++c) {
                  ASSERT_EQ(y[i * y_stride + c], -7.0f) << what << ": wrote past y.cols";
                }
              }
            }
          }
        }
      }
    }
  }
}

// y = x * W^T without the pool: the int8 table's kernel over all rows in one call on x quantised
// by that table (the integer path's definition), or MatMul for a type without one.
std::vector<float> OneCall(const WeightView& w, MatView<const float> x, int64_t y_stride) {
  std::vector<float> y(x.rows * y_stride, -7.0f);
  const quant::internal::Int8Kernels& table = quant::internal::BestInt8Kernels();
  const quant::internal::Q8GemmFn gemm = quant::internal::FindQ8Gemm(table, w.type);
  ThreadPool serial(1);
  if (gemm == nullptr) {
    MatMul(w, x, MatView<float>(y.data(), x.rows, w.rows, y_stride), serial);
    return y;
  }
  std::vector<int8_t> q;
  std::vector<float> d;
  std::vector<int32_t> sum;
  quant::internal::Q8Rows a;
  internal::QuantizeActivations(x, table, q, d, sum, a, serial);
  for (int64_t t0 = 0; t0 < x.rows; t0 += 512) {  // MatMul's token chunks
    quant::internal::Q8Rows part = a;
    part.rows = std::min<int64_t>(512, a.rows - t0);
    part.q = a.q + t0 * a.stride;
    part.d = a.d + t0 * a.block_stride;
    part.sum = a.sum + t0 * a.block_stride;
    gemm(w.data, w.row_bytes, w.rows, part, y.data() + t0 * y_stride, y_stride);
  }
  return y;
}

// Weights that share their input (q/k/v, gate/up), multiplied together: each output the bits of
// its weight's product in one call, nothing written past y.cols; on the integer path (Q8_0 and
// Q4_0, mixed), on the K-quant decode path (Q4_K, Q5_K and Q6_K, mixed as in a Q4_K_M file) and
// on the fallback (one F16 or Q8_0 weight among them), decode and batch sizes, row counts off
// the tiles, one and two threads.
TEST(MatMulTest, SameInputEqualsOneCallPerWeight) {
  std::mt19937_64 rng(47);
  const int64_t y_stride = 90;
  struct Weights {
    int64_t cols;
    std::vector<GgmlType> types;
  };
  for (const auto& [cols, types] :
       {Weights{320, {GgmlType::kQ8_0, GgmlType::kQ8_0, GgmlType::kQ4_0}},
        Weights{320, {GgmlType::kQ4_0, GgmlType::kQ8_0}},
        Weights{320, {GgmlType::kQ8_0, GgmlType::kF16, GgmlType::kQ8_0}},
        Weights{512, {GgmlType::kQ4_K, GgmlType::kQ4_K, GgmlType::kQ6_K}},
        Weights{512, {GgmlType::kQ6_K, GgmlType::kQ5_K}},
        Weights{512, {GgmlType::kQ4_K, GgmlType::kQ8_0}},
        Weights{512, {GgmlType::kQ4_K, GgmlType::kF16, GgmlType::kQ4_K}}}) {
    std::vector<TestWeight> w;
    std::vector<const WeightView*> views;
    for (size_t i = 0; i < types.size(); ++i) {
      w.push_back(MakeWeight(rng, types[i], i == 0 ? 83 : 18 + static_cast<int64_t>(i), cols));
    }
    for (const TestWeight& tw : w) views.push_back(&tw.view);
    for (int threads : {1, 2}) {
      ThreadPool pool(threads);
      for (int64_t n : {1, 3, 17, 40}) {
        const std::vector<float> x = RandomFloats(rng, n * cols);
        const MatView<const float> xv(x.data(), n, cols);
        std::vector<std::vector<float>> got(w.size(), std::vector<float>(n * y_stride, -7.0f));
        std::vector<MatView<float>> outs;
        for (size_t i = 0; i < w.size(); ++i)
          outs.emplace_back(got[i].data(), n, w[i].view.rows, y_stride);
        MatMulSameInput(views, xv, outs, pool);
        for (size_t i = 0; i < w.size(); ++i) {
          const std::vector<float> want = OneCall(w[i].view, xv, y_stride);
          for (int64_t k = 0; k < n * y_stride; ++k) {
            ASSERT_EQ(std::memcmp(&got[i][k], &want[k], sizeof(float)), 0)
                << Case(types[i], n, w[i].view.rows, cols, threads) << " weight " << i
                << " t=" << k / y_stride << " r=" << k % y_stride << ": " << got[i][k] << " vs "
                << want[k];
          }
        }
      }
    }
  }
}

TEST(MatMulTest, EmptyShapes) {
  ThreadPool pool(2);
  std::mt19937_64 rng(44);
  const TestWeight w = MakeWeight(rng, GgmlType::kQ8_0, 4, 32);
  std::vector<float> y(4, 1.0f);
  MatMul(w.view, MatView<const float>(nullptr, 0, 32), MatView<float>(y.data(), 0, 4), pool);
  EXPECT_EQ(y[0], 1.0f);
  // Zero columns: the product is an empty sum.
  const WeightView empty{GgmlType::kF16, 4, 0, 0, w.bytes.data()};
  std::vector<float> x(2, 0.0f);
  for (int64_t n : {1, 8}) {
    std::vector<float> out(n * 4, 1.0f);
    MatMul(empty, MatView<const float>(x.data(), n, 0), MatView<float>(out.data(), n, 4), pool);
    for (float v : out) EXPECT_EQ(v, 0.0f);
  }
}

TEST(MatMulDeathTest, ShapeMismatchIsAProgrammerError) {
  // OpenBLAS starts its threads at load time, so fork-and-exec style is needed.
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  ThreadPool pool(1);
  std::mt19937_64 rng(45);
  const TestWeight w = MakeWeight(rng, GgmlType::kF32, 4, 8);
  std::vector<float> x(16), y(8);
  EXPECT_DEATH(
      MatMul(w.view, MatView<const float>(x.data(), 2, 7), MatView<float>(y.data(), 2, 4), pool),
      "x.cols");
}

TEST(GetRowTest, MatchesReferenceDecode) {
  std::mt19937_64 rng(46);
  for (GgmlType type : kComputableTypes) {
    const TestWeight w = MakeWeight(rng, type, 9, 96, 4);
    for (int64_t r : {0, 4, 8}) {
      std::vector<float> out(96);
      GetRow(w.view, r, out.data());
      for (int64_t k = 0; k < 96; ++k) {
        ASSERT_EQ(static_cast<double>(out[k]), w.decoded[r][k]) << TypeName(type) << " r=" << r;
      }
    }
  }
}

}  // namespace
}  // namespace primekv
