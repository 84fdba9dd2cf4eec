// y = x * W^T over GGUF weight rows.
//
// Small n (decode): every output element is one DotRow over an encoded row, threaded over rows.
// This is bandwidth-bound, so the rows are read once and never expanded to float. With several
// x rows (a batched decode step) the float formats take each weight row against all of them in
// one multi-row dot (DotRowsFn), which gives every output the bits of its own single dot. For the
// 256-element block formats (K-quants, IQ4_XS) the activations are first rounded to 8-bit
// blocks (Q8_K, as llama.cpp) so the dots run on integer multiply-adds.
//
// Larger n (prefill): the pool's threads take panels of weight rows; each dequantises its panel
// a column chunk at a time into per-thread scratch (F32 rows are read in place) and multiplies it
// with the activations, packed once per call, using the register-tiled kernel of the best
// kernel table (kernels_avx512.cc: 32 tokens x 12 rows per tile).
//
// Why not cblas_sgemm per panel (still available as MatMulTiling::use_blas, for comparison):
// OpenBLAS 0.3.21 picks its kernels from the CPU model at load time, and on our machines
// (family 6, model 207) it falls back to its generic "Prescott" core, about 4x slower than this
// kernel (bench/bm_quant.cc BM_Gemm, n = 128, 4096 x 4096). With OPENBLAS_CORETYPE=SkylakeX
// forced, OpenBLAS was within noise of this kernel. The built-in kernel also keeps OpenBLAS's
// process-wide thread setting out of the way. Threads: only our pool; the BLAS path, when asked
// for, runs OpenBLAS single-threaded so that pool threads calling it concurrently do not
// oversubscribe the cores.
#include "primekv/quant/matmul.h"

#include <cblas.h>

#include <algorithm>
#include <array>
#include <cstdint>
#include <vector>

#include "primekv/quant/quant.h"
#include "quant/int8_matmul.h"
#include "quant/kernels.h"
#include "quant/matmul_internal.h"

namespace primekv {
namespace internal {
namespace {

// OpenBLAS's thread count is process-wide; the BLAS path sets it to 1 on first use since the
// parallelism comes from the pool (see above). Anything else in the process that calls BLAS
// inherits this.
void UseSingleThreadedBlas() {
  static const bool done = [] {
    openblas_set_num_threads(1);
    return true;
  }();
  (void)done;
}

void CheckShapes(const WeightView& w, MatView<const float> x, MatView<float> y) {
  Check(w.data != nullptr || w.rows == 0, "MatMul: weight has no data");
  Check(x.cols == w.cols, "MatMul: x.cols != w.cols");
  Check(y.rows == x.rows, "MatMul: y.rows != x.rows");
  Check(y.cols == w.rows, "MatMul: y.cols != w.rows");
  Check(x.stride >= x.cols && y.stride >= y.cols, "MatMul: stride smaller than cols");
  Check(w.row_bytes >= quant::RowBytes(w.type, w.cols), "MatMul: row_bytes too small");
}

const quant::internal::KernelTable& TableFor(const MatMulTiling& tiling) {
  return tiling.kernels != nullptr ? *tiling.kernels : quant::internal::BestKernels();
}

// Q8_K blocks of activations MatVecQ8K keeps on the stack: 67 KiB, a 57,344-wide row.
constexpr int64_t kQ8KBufferBlocks = 224;

// The most weights MatVecQ8K takes at once (q, k, v).
constexpr size_t kMaxSameInput = 4;

// MatVec with int8 activations for one or more weights that read the same x (q/k/v, gate/up): x
// rows quantised once into a stack buffer (no allocation per decode step), as many rows at a time
// as fit, then one ParallelFor over all the weights' rows numbered one weight after the other, so
// the threads meet once per input rather than once per weight. With one x row, a thread's run of
// a weight's rows goes to the kernel's rows entry where it has one. Every output is the one dot
// it would be alone.
void MatVecQ8K(std::span<const WeightView* const> ws, MatView<const float> x,
               std::span<const MatView<float>> ys, ThreadPool& pool,
               quant::internal::QuantizeQ8KFn quantize,
               std::span<const quant::internal::TypeKernels* const> kernels) {
  const int64_t cols = ws[0]->cols;
  const int64_t blocks = cols / 256;
  std::array<quant::internal::Q8KBlock, kQ8KBufferBlocks> buffer;
  const int64_t rows_per_pass = kQ8KBufferBlocks / blocks;
  std::array<int64_t, kMaxSameInput + 1> first{};  // weight i's rows: [first[i], first[i + 1])
  size_t widest = 1;
  for (size_t i = 0; i < ws.size(); ++i) {
    first[i + 1] = first[i] + ws[i]->rows;
    widest = std::max(widest, ws[i]->row_bytes);
  }
  const int64_t min_rows = std::max<int64_t>(1, (int64_t{1} << 16) / static_cast<int64_t>(widest));
  for (int64_t i0 = 0; i0 < x.rows; i0 += rows_per_pass) {
    const int64_t m = std::min(rows_per_pass, x.rows - i0);
    for (int64_t i = 0; i < m; ++i) quantize(x.Row(i0 + i), buffer.data() + i * blocks, cols);
    pool.ParallelFor(
        first[ws.size()],
        [&](int64_t begin, int64_t end, int) {
          for (size_t k = 0; k < ws.size(); ++k) {
            const WeightView& w = *ws[k];
            const MatView<float>& y = ys[k];
            const int64_t r0 = std::max(begin, first[k]) - first[k];
            const int64_t r1 = std::min(end, first[k + 1]) - first[k];
            const quant::internal::TypeKernels& kernel = *kernels[k];
            if (m == 1 && kernel.dot_q8k_rows != nullptr && r1 > r0) {
              kernel.dot_q8k_rows(w.Row(r0), w.row_bytes, r1 - r0, buffer.data(), cols, &y(i0, r0));
              continue;
            }
            for (int64_t r = r0; r < r1; ++r) {
              const uint8_t* row = w.Row(r);
              for (int64_t i = 0; i < m; ++i)
                y(i0 + i, r) = kernel.dot_q8k(row, buffer.data() + i * blocks, cols);
            }
          }
        },
        min_rows);
  }
}

// Whether MatVec takes w's integer path under `tiling`: the kernels whose dot_q8k (and
// dot_q8k_rows, where set) it runs, or null.
const quant::internal::TypeKernels* Q8KKernelsFor(const WeightView& w, const MatMulTiling& tiling) {
  const quant::internal::TypeKernels* kernels = quant::internal::Find(TableFor(tiling), w.type);
  if (!tiling.int8_activations || kernels == nullptr || kernels->dot_q8k == nullptr ||
      w.cols % 256 != 0 || w.cols / 256 > kQ8KBufferBlocks) {
    return nullptr;
  }
  return kernels;
}

// MatVecQ8K over weights that share x, when it is the path MatMulTiled gives each of them alone
// (a decode step's K-quant projections); false, doing nothing, otherwise.
bool MatVecQ8KSameInput(std::span<const WeightView* const> ws, MatView<const float> x,
                        std::span<const MatView<float>> ys, ThreadPool& pool,
                        const MatMulTiling& tiling) {
  if (ws.empty() || ws.size() > kMaxSameInput || ws.size() != ys.size() || x.rows == 0 ||
      x.rows >= tiling.small_batch) {
    return false;
  }
  std::array<const quant::internal::TypeKernels*, kMaxSameInput> kernels{};
  for (size_t i = 0; i < ws.size(); ++i) {
    const WeightView& w = *ws[i];
    if (w.rows == 0 || w.cols != ws[0]->cols) return false;
    if (tiling.int8 != nullptr && quant::internal::FindQ8Gemm(*tiling.int8, w.type) != nullptr) {
      return false;
    }
    kernels[i] = Q8KKernelsFor(w, tiling);
    if (kernels[i] == nullptr) return false;
  }
  MatVecQ8K(ws, x, ys, pool, TableFor(tiling).quantize_q8k,
            std::span<const quant::internal::TypeKernels* const>(kernels.data(), ws.size()));
  return true;
}

// x copied to a per-thread buffer whose rows start on 64-byte lines, so that the multi-row
// dot's activation loads never straddle two cache lines (the weights are read in place).
// Reused between calls: a warm decode step allocates nothing.
MatView<const float> AlignedRows(MatView<const float> x) {
  thread_local std::vector<float> buffer;
  const int64_t stride = (x.cols + 15) / 16 * 16;
  const auto need = static_cast<size_t>(x.rows * stride + 16);
  if (buffer.size() < need) buffer.resize(need);
  const auto misalign = reinterpret_cast<uintptr_t>(buffer.data()) % 64 / sizeof(float);
  float* base = buffer.data() + (misalign == 0 ? 0 : 16 - misalign);
  for (int64_t i = 0; i < x.rows; ++i) std::copy_n(x.Row(i), x.cols, base + i * stride);
  return MatView<const float>(base, x.rows, x.cols, stride);
}

void MatVec(const WeightView& w, MatView<const float> x, MatView<float> y, ThreadPool& pool,
            const MatMulTiling& tiling) {
  const quant::internal::TypeKernels* kernels = quant::internal::Find(TableFor(tiling), w.type);
  Check(kernels != nullptr, "MatMul: element type is not computable");
  if (const quant::internal::TypeKernels* q8k = Q8KKernelsFor(w, tiling); q8k != nullptr) {
    const WeightView* const ws[] = {&w};
    const MatView<float> ys[] = {y};
    const quant::internal::TypeKernels* const q8k_kernels[] = {q8k};
    MatVecQ8K(ws, x, ys, pool, TableFor(tiling).quantize_q8k, q8k_kernels);
    return;
  }
  const quant::internal::DotFn dot = kernels->dot;
  const quant::internal::DotRowsFn dot_rows = x.rows > 1 ? kernels->dot_rows : nullptr;
  if (dot_rows != nullptr) x = AlignedRows(x);
  // Chunks of at least ~64 KiB of weights keep the pool's hand-off cost negligible; small
  // matrices run on the calling thread.
  const int64_t min_rows =
      std::max<int64_t>(1, (int64_t{1} << 16) / std::max<size_t>(1, w.row_bytes));
  pool.ParallelFor(
      w.rows,
      [&](int64_t begin, int64_t end, int) {
        if (dot_rows != nullptr) {
          // Each weight row against every x row in one pass (the same bits as one dot each).
          dot_rows(w.Row(begin), w.row_bytes, end - begin, x.data, x.stride,
                   static_cast<int>(x.rows), w.cols, &y(0, begin), y.stride);
          return;
        }
        for (int64_t r = begin; r < end; ++r) {
          const uint8_t* row = w.Row(r);
          for (int64_t i = 0; i < x.rows; ++i) y(i, r) = dot(row, x.Row(i), w.cols);
        }
      },
      min_rows);
}

void GemmBlas(const WeightView& w, MatView<const float> x, MatView<float> y, ThreadPool& pool,
              const MatMulTiling& tiling) {
  UseSingleThreadedBlas();
  const quant::internal::TypeKernels* kernels = quant::internal::Find(TableFor(tiling), w.type);
  Check(kernels != nullptr, "MatMul: element type is not computable");
  const int64_t block = quant::internal::BlockSize(w.type);
  const int64_t panel_rows = std::max<int64_t>(1, tiling.panel_rows);
  const int64_t panel_cols = std::min(w.cols, std::max(block, tiling.panel_cols / block * block));
  const int64_t n_panels = (w.rows + panel_rows - 1) / panel_rows;
  const bool direct = w.type == GgmlType::kF32 && w.row_bytes % sizeof(float) == 0;
  const auto m = static_cast<int>(x.rows);
  std::vector<std::vector<float>> scratch(static_cast<size_t>(pool.size()));
  pool.ParallelFor(n_panels, [&](int64_t begin, int64_t end, int thread) {
    std::vector<float>& panel = scratch[static_cast<size_t>(thread)];
    for (int64_t p = begin; p < end; ++p) {
      const int64_t r0 = p * panel_rows;
      const auto rows = static_cast<int>(std::min(panel_rows, w.rows - r0));
      if (direct) {
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, m, rows, static_cast<int>(w.cols),
                    1.0f, x.data, static_cast<int>(x.stride),
                    reinterpret_cast<const float*>(w.Row(r0)),
                    static_cast<int>(w.row_bytes / sizeof(float)), 0.0f, y.data + r0,
                    static_cast<int>(y.stride));
        continue;
      }
      panel.resize(static_cast<size_t>(panel_rows * panel_cols));
      for (int64_t c0 = 0; c0 < w.cols; c0 += panel_cols) {
        const int64_t cols = std::min(panel_cols, w.cols - c0);
        const size_t offset = quant::RowBytes(w.type, c0);
        for (int r = 0; r < rows; ++r) {
          kernels->dequantize(w.Row(r0 + r) + offset, panel.data() + r * cols, cols);
        }
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, m, rows, static_cast<int>(cols), 1.0f,
                    x.data + c0, static_cast<int>(x.stride), panel.data(), static_cast<int>(cols),
                    c0 == 0 ? 0.0f : 1.0f, y.data + r0, static_cast<int>(y.stride));
      }
    }
  });
}

// x rows [t0, t0 + tokens) as blocks of `group` tokens, each [cols][group] with zero padding.
void PackActivations(MatView<const float> x, int64_t t0, int64_t tokens, int group,
                     std::vector<float>& packed, ThreadPool& pool) {
  const int64_t groups = (tokens + group - 1) / group;
  packed.assign(static_cast<size_t>(groups * x.cols * group), 0.0f);
  pool.ParallelFor(groups, [&](int64_t begin, int64_t end, int) {
    for (int64_t g = begin; g < end; ++g) {
      float* dst = packed.data() + g * x.cols * group;
      const int64_t count = std::min<int64_t>(group, tokens - g * group);
      for (int64_t t = 0; t < count; ++t) {
        const float* src = x.Row(t0 + g * group + t);
        for (int64_t k = 0; k < x.cols; ++k) dst[k * group + t] = src[k];
      }
    }
  });
}

// Per panel task: for each column chunk, dequantise the panel's rows (F32 rows are used in place)
// and run the tile kernel over every token block, accumulating into acc = [groups][rows][group];
// then write acc out transposed into y.
void GemmPacked(const WeightView& w, MatView<const float> x, MatView<float> y, ThreadPool& pool,
                const MatMulTiling& tiling) {
  const quant::internal::KernelTable& table = TableFor(tiling);
  const quant::internal::TypeKernels* kernels = quant::internal::Find(table, w.type);
  Check(kernels != nullptr, "MatMul: element type is not computable");
  const int group = table.gemm_group;
  const int tile_rows = table.gemm_rows;
  const int64_t block = quant::internal::BlockSize(w.type);
  // Panels of whole tiles, small enough that every thread gets about two of them.
  const auto round_up = [](int64_t v, int64_t m) { return (v + m - 1) / m * m; };
  const int64_t share = round_up((w.rows + 2 * pool.size() - 1) / (2 * pool.size()), tile_rows);
  const int64_t panel_rows =
      std::max<int64_t>(tile_rows, std::min(tiling.panel_rows / tile_rows * tile_rows, share));
  const int64_t panel_cols = std::min(w.cols, std::max(block, tiling.panel_cols / block * block));
  const int64_t token_block = std::max<int64_t>(group, tiling.token_block / group * group);
  const int64_t n_panels = (w.rows + panel_rows - 1) / panel_rows;
  const bool direct = w.type == GgmlType::kF32 && w.row_bytes % sizeof(float) == 0;

  struct Scratch {
    std::vector<float> panel;  // [panel_rows, panel_cols] dequantised weights
    std::vector<float> acc;    // [groups, panel_rows, group] partial products
  };
  std::vector<Scratch> scratch(static_cast<size_t>(pool.size()));
  std::vector<float> packed;
  for (int64_t t0 = 0; t0 < x.rows; t0 += token_block) {
    const int64_t tokens = std::min(token_block, x.rows - t0);
    const int64_t groups = (tokens + group - 1) / group;
    PackActivations(x, t0, tokens, group, packed, pool);
    pool.ParallelFor(n_panels, [&](int64_t begin, int64_t end, int thread) {
      Scratch& s = scratch[static_cast<size_t>(thread)];
      s.acc.resize(static_cast<size_t>(groups * panel_rows * group));
      if (!direct) s.panel.resize(static_cast<size_t>(panel_rows * panel_cols));
      for (int64_t p = begin; p < end; ++p) {
        const int64_t r0 = p * panel_rows;
        const int64_t rows = std::min(panel_rows, w.rows - r0);
        for (int64_t c0 = 0; c0 < w.cols; c0 += panel_cols) {
          const int64_t cols = std::min(panel_cols, w.cols - c0);
          const float* panel;
          int64_t ldw;
          if (direct) {
            panel = reinterpret_cast<const float*>(w.Row(r0)) + c0;
            ldw = static_cast<int64_t>(w.row_bytes / sizeof(float));
          } else {
            const size_t offset = quant::RowBytes(w.type, c0);
            const size_t chunk_bytes = quant::RowBytes(w.type, cols);
            for (int64_t r = 0; r < rows; ++r) {
              // Each row's chunk is a short stream (1 KiB of F16) that the hardware prefetchers
              // pick up too late: fetch the chunk two rows ahead while this one converts.
              if (r + 2 < rows) {
                const uint8_t* ahead = w.Row(r0 + r + 2) + offset;
                for (size_t b = 0; b < chunk_bytes; b += 64) __builtin_prefetch(ahead + b);
              }
              kernels->dequantize(w.Row(r0 + r) + offset, s.panel.data() + r * cols, cols);
            }
            panel = s.panel.data();
            ldw = cols;
          }
          for (int64_t g = 0; g < groups; ++g) {
            const float* xp = packed.data() + (g * w.cols + c0) * group;
            const auto valid = static_cast<int>(std::min<int64_t>(group, tokens - g * group));
            for (int64_t j0 = 0; j0 < rows; j0 += tile_rows) {
              table.gemm_tile(xp, valid, panel + j0 * ldw, ldw,
                              static_cast<int>(std::min<int64_t>(tile_rows, rows - j0)), cols,
                              s.acc.data() + (g * panel_rows + j0) * group, c0 > 0);
            }
          }
        }
        for (int64_t g = 0; g < groups; ++g) {
          const int64_t valid = std::min<int64_t>(group, tokens - g * group);
          for (int64_t t = 0; t < valid; ++t) {
            float* out = y.Row(t0 + g * group + t) + r0;
            const float* src = s.acc.data() + g * panel_rows * group + t;
            for (int64_t j = 0; j < rows; ++j) out[j] = src[j * group];
          }
        }
      }
    });
  }
}

}  // namespace

void MatMulTiled(const WeightView& w, MatView<const float> x, MatView<float> y, ThreadPool& pool,
                 const MatMulTiling& tiling) {
  CheckShapes(w, x, y);
  if (x.rows == 0 || w.rows == 0) return;
  if (w.cols == 0) {
    for (int64_t i = 0; i < y.rows; ++i) std::fill_n(y.Row(i), y.cols, 0.0f);
    return;
  }
  if (tiling.int8 != nullptr && MatMulInt8(w, x, y, pool, *tiling.int8)) return;
  if (x.rows < tiling.small_batch) {
    MatVec(w, x, y, pool, tiling);
  } else if (tiling.use_blas) {
    GemmBlas(w, x, y, pool, tiling);
  } else {
    GemmPacked(w, x, y, pool, tiling);
  }
}

}  // namespace internal

void MatMul(const WeightView& w, MatView<const float> x, MatView<float> y, ThreadPool& pool) {
  internal::MatMulTiling tiling;
  tiling.int8 = &quant::internal::BestInt8Kernels();
  internal::MatMulTiled(w, x, y, pool, tiling);
}

void MatMulSameInput(std::span<const WeightView* const> w, MatView<const float> x,
                     std::span<const MatView<float>> y, ThreadPool& pool) {
  Check(w.size() == y.size(), "MatMulSameInput: one output per weight");
  bool fuse = x.rows > 0;
  for (size_t i = 0; i < w.size(); ++i) {
    internal::CheckShapes(*w[i], x, y[i]);
    fuse = fuse && w[i]->rows > 0 && w[i]->cols > 0;
  }
  if (fuse && internal::MatMulInt8SameInput(w, x, y, pool, quant::internal::BestInt8Kernels()))
    return;
  internal::MatMulTiling tiling;
  tiling.int8 = &quant::internal::BestInt8Kernels();
  if (fuse && internal::MatVecQ8KSameInput(w, x, y, pool, tiling)) return;
  for (size_t i = 0; i < w.size(); ++i) MatMul(*w[i], x, y[i], pool);
}

void GetRow(const WeightView& w, int64_t row, float* out) {
  Check(row >= 0 && row < w.rows, "GetRow: row out of range");
  quant::DequantizeRow(w.type, w.Row(row), out, w.cols);
}

}  // namespace primekv
