// y = x * W^T on integer dot products (quant/int8_gemm.h): x is quantised once per call to
// 8-bit blocks, in parallel over its rows, then the pool's threads take ranges of weight rows.
// Decode (a few rows of x) reads each weight row once, in ranges of at least 64 KiB per task;
// for prefill each task gets a range of whole 16-row panels and up to 512 tokens.
#include "quant/int8_matmul.h"

#include <algorithm>
#include <array>
#include <vector>

#include "primekv/quant/quant.h"
#include "quant/int8_gemm.h"
#include "quant/kernels.h"

namespace primekv {
namespace quant::internal {
std::span<const Int8Kernels* const> SupportedInt8Kernels() {
  static const std::vector<const Int8Kernels*> tables = UsableTables(
      ScalarInt8Kernels(), {Avx2Int8Kernels(), Avx512VnniInt8Kernels(), AmxInt8Kernels()},
      +[](const Int8Kernels& t) { return CpuHasIsa(t.isa); });
  return tables;
}

const Int8Kernels& BestInt8Kernels() {
  static const Int8Kernels* const best = SupportedInt8Kernels().back();
  return *best;
}

Q8GemmFn FindQ8Gemm(const Int8Kernels& table, GgmlType type) {
  switch (type) {
    case GgmlType::kQ8_0:
      return table.q8_0;
    case GgmlType::kQ4_0:
      return table.q4_0;
    default:
      return nullptr;
  }
}

Q8GemmFn FindBatchQ8Gemm(const Int8Kernels& table, GgmlType type) {
  switch (type) {
    case GgmlType::kQ3_K:
      return table.batch_q3_k;
    case GgmlType::kQ4_K:
      return table.batch_q4_k;
    case GgmlType::kQ5_K:
      return table.batch_q5_k;
    case GgmlType::kQ6_K:
      return table.batch_q6_k;
    case GgmlType::kIQ4_XS:
      return table.batch_iq4_xs;
    default:
      return nullptr;
  }
}

}  // namespace quant::internal

namespace internal {
namespace {

// Quantised activations of one call. Kept per thread and reused, so decode steps allocate
// nothing once warm (tests/press/decode_alloc_test.cc); MatMul is called from one thread at a
// time per forward pass, and each calling thread gets its own buffers.
struct Q8Scratch {
  std::vector<int8_t> q;
  std::vector<float> d;
  std::vector<int32_t> sum;
};

template <typename T>
void GrowTo(std::vector<T>& v, size_t n) {
  if (v.size() < n) v.resize(n);
}

// Tokens per kernel call: bounds the activations a task walks over (the kernels block for
// their caches inside) while letting the batch kernels repack a weight panel once per call.
constexpr int64_t kTokenChunk = 512;

}  // namespace

void QuantizeActivations(MatView<const float> x, const quant::internal::Int8Kernels& kernels,
                         std::vector<int8_t>& q, std::vector<float>& d, std::vector<int32_t>& sum,
                         quant::internal::Q8Rows& out, ThreadPool& pool) {
  using quant::internal::kQ8Block;
  const int64_t blocks = x.cols / kQ8Block;
  out.rows = x.rows;
  out.cols = x.cols;
  out.stride = (x.cols + 63) / 64 * 64;
  out.block_stride = (blocks + 1) / 2 * 2;
  GrowTo(q, static_cast<size_t>(out.rows * out.stride));
  GrowTo(d, static_cast<size_t>(out.rows * out.block_stride));
  GrowTo(sum, static_cast<size_t>(out.rows * out.block_stride));
  const auto quantize_rows = [&](int64_t begin, int64_t end, int) {
    for (int64_t t = begin; t < end; ++t) {
      int8_t* qt = q.data() + t * out.stride;
      float* dt = d.data() + t * out.block_stride;
      int32_t* st = sum.data() + t * out.block_stride;
      kernels.quantize(x.Row(t), x.cols, qt, dt, st);
      std::fill(qt + x.cols, qt + out.stride, int8_t{0});
      std::fill(dt + blocks, dt + out.block_stride, 0.0f);
      std::fill(st + blocks, st + out.block_stride, 0);
    }
  };
  // About 16K values per task: below that the hand-off costs more than the work.
  pool.ParallelFor(x.rows, quantize_rows, std::max<int64_t>(1, (int64_t{1} << 14) / x.cols));
  out.q = q.data();
  out.d = d.data();
  out.sum = sum.data();
}

bool MatMulInt8(const WeightView& w, MatView<const float> x, MatView<float> y, ThreadPool& pool,
                const quant::internal::Int8Kernels& kernels) {
  const WeightView* const ws[] = {&w};
  const MatView<float> ys[] = {y};
  return MatMulInt8SameInput(ws, x, ys, pool, kernels);
}

bool MatMulInt8SameInput(std::span<const WeightView* const> ws, MatView<const float> x,
                         std::span<const MatView<float>> ys, ThreadPool& pool,
                         const quant::internal::Int8Kernels& kernels) {
  constexpr size_t kMaxWeights = 4;
  if (ws.empty() || ws.size() > kMaxWeights || ws.size() != ys.size()) return false;
  std::array<quant::internal::Q8GemmFn, kMaxWeights> gemms{};
  for (size_t i = 0; i < ws.size(); ++i) {
    gemms[i] = quant::internal::FindQ8Gemm(kernels, ws[i]->type);
    if (gemms[i] == nullptr && x.rows >= quant::internal::kBatchMinTokens &&
        ws[i]->cols % 256 == 0) {
      gemms[i] = quant::internal::FindBatchQ8Gemm(kernels, ws[i]->type);
    }
    if (gemms[i] == nullptr || ws[i]->cols % quant::internal::kQ8Block != 0) return false;
  }
  thread_local Q8Scratch scratch;
  quant::internal::Q8Rows a;
  QuantizeActivations(x, kernels, scratch.q, scratch.d, scratch.sum, a, pool);
  // Units of whole row tiles (4 rows; 16, the repacked panel, for batches), numbered through the
  // weights one after the other, so that every tile is the one a call per weight would make; tasks
  // of at least 64 KiB of weights.
  const int64_t kUnit = x.rows >= 16 ? 16 : 4;
  std::array<int64_t, kMaxWeights + 1> first{};  // weight i's units: [first[i], first[i + 1])
  size_t widest = 0;
  for (size_t i = 0; i < ws.size(); ++i) {
    first[i + 1] = first[i] + (ws[i]->rows + kUnit - 1) / kUnit;
    widest = std::max(widest, ws[i]->row_bytes);
  }
  const int64_t min_units =
      std::max<int64_t>(1, (int64_t{1} << 16) / std::max<int64_t>(1, kUnit * widest));
  pool.ParallelFor(
      first[ws.size()],
      [&](int64_t begin, int64_t end, int) {
        for (size_t i = 0; i < ws.size(); ++i) {
          const int64_t b = std::max(begin, first[i]), e = std::min(end, first[i + 1]);
          if (b >= e) continue;
          const WeightView& w = *ws[i];
          const MatView<float>& y = ys[i];
          const int64_t r0 = (b - first[i]) * kUnit;
          const int64_t r1 = std::min(w.rows, (e - first[i]) * kUnit);
          for (int64_t t0 = 0; t0 < a.rows; t0 += kTokenChunk) {
            quant::internal::Q8Rows part = a;
            part.rows = std::min(kTokenChunk, a.rows - t0);
            part.q = a.q + t0 * a.stride;
            part.d = a.d + t0 * a.block_stride;
            part.sum = a.sum + t0 * a.block_stride;
            gemms[i](w.Row(r0), w.row_bytes, r1 - r0, part, y.Row(t0) + r0, y.stride);
          }
        }
      },
      min_units);
  return true;
}

}  // namespace internal
}  // namespace primekv
