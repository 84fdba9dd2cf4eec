// Internal: per-ISA row kernels behind quant.h, selected once at run time.
// The scalar table is the plain twin of every SIMD kernel; tests run all tables that the CPU
// supports against an independent reference.
#pragma once

#include <cmath>
#include <cstdint>
#include <cstring>
#include <initializer_list>
#include <span>
#include <type_traits>
#include <vector>

#include "primekv/util/dtype.h"
#include "primekv/quant/cpu.h"

namespace primekv::quant::internal {

// Block layouts of the quantised formats (ggml's, sizes from the type table in
// primekv/util/dtype.h): an fp16 scale d, then the quants.
inline constexpr int kQ8_0Block = TypeInfo(GgmlType::kQ8_0)->block_size;  // d, then 32 int8;
inline constexpr int kQ8_0BlockBytes =                                    // value = d * q
    static_cast<int>(TypeInfo(GgmlType::kQ8_0)->block_bytes);
// d, then 16 bytes; element j is the low nibble of byte j, element j + 16 the high one;
// value = d * (q - 8).
inline constexpr int kQ4_0Block = TypeInfo(GgmlType::kQ4_0)->block_size;
inline constexpr int kQ4_0BlockBytes = static_cast<int>(TypeInfo(GgmlType::kQ4_0)->block_bytes);

// The 16-bit little-endian word at p (an fp16 / bf16 value or scale), from any alignment.
inline uint16_t LoadU16(const uint8_t* p) {
  uint16_t v;
  std::memcpy(&v, p, sizeof(v));
  return v;
}

// round(v) (halves away from zero) clamped to [lo, hi], for the scalar quantisers; NaN (from
// inf/inf) becomes 0 so no float->int conversion is UB.
inline int RoundClamp(float v, int lo, int hi) {
  if (std::isnan(v)) return 0;
  const float r = std::round(v);
  if (r < static_cast<float>(lo)) return lo;
  if (r > static_cast<float>(hi)) return hi;
  return static_cast<int>(r);
}

// Calls f(std::integral_constant<int, k>{}) with k = n clamped to [1, kMax]: a run-time count
// (rows or tokens of a tile) as a compile-time one, for kernels unrolled over it.
template <int kMax, class F>
void WithCount(int n, F&& f) {
  if constexpr (kMax > 1) {
    if (n < kMax) return WithCount<kMax - 1>(n, f);
  }
  f(std::integral_constant<int, kMax>{});
}

using quant::Isa;
using quant::IsaName;

using DotFn = float (*)(const void* row, const float* x, int64_t n);
// `w_rows` weight rows (row j at w + j * row_bytes) against `rows` activation rows
// (x + i * x_stride): out[i * out_stride + j] is the same bits as DotFn(row j, x + i * x_stride,
// n). Each weight row is loaded (and converted) once for up to a register file's worth of
// activation rows, each with its own accumulators, so a decode batch costs less than that many
// single dots; the loop over weight rows sits inside, with no call per row.
using DotRowsFn = void (*)(const void* w, size_t row_bytes, int64_t w_rows, const float* x,
                           int64_t x_stride, int rows, int64_t n, float* out, int64_t out_stride);

// 256 activations rounded to 8 bits, as llama.cpp's Q8_K: x[i] ~ d * qs[i], with the sums of
// each 16 quants and of each 32 (Q4_K's and Q5_K's sub-blocks, whose offset terms then take one
// vpmaddwd). The int8-activation dot products of the 256-element weight formats read it.
struct Q8KBlock {
  float d;
  int8_t qs[256];
  int16_t bsums[16];
  int16_t bsum32[8];  // bsums[2j] + bsums[2j + 1]: the sums of the 32-element sub-blocks
};
// Sets bsum32 from bsums; every quantiser calls it last.
inline void FillBsum32(Q8KBlock& b) {
  for (int j = 0; j < 8; ++j)
    b.bsum32[j] = static_cast<int16_t>(b.bsums[2 * j] + b.bsums[2 * j + 1]);
}
// Rounds n (a multiple of 256) activations as llama.cpp's quantize_row_q8_K: the element of
// largest magnitude maps to -127 (d = max / -127), the others round to nearest, ties to even.
void QuantizeQ8K(const float* x, Q8KBlock* out, int64_t n);
using QuantizeQ8KFn = void (*)(const float* x, Q8KBlock* out, int64_t n);
// sum_i w[i] * d * qs[i] for one encoded weight row and n / 256 activation blocks.
using DotQ8KFn = float (*)(const void* row, const Q8KBlock* x, int64_t n);
// out[r] = dot_q8k(first_row + r * row_bytes, x, n) for r < rows, with the same bits: consecutive
// rows of one matrix in one call, so a decode product sets its constants up once per share.
using DotQ8KRowsFn = void (*)(const void* first_row, size_t row_bytes, int64_t rows,
                              const Q8KBlock* x, int64_t n, float* out);
using DequantizeFn = void (*)(const void* src, float* dst, int64_t n);
using QuantizeFn = void (*)(const float* src, void* dst, int64_t n);

struct TypeKernels {
  DotFn dot = nullptr;
  DequantizeFn dequantize = nullptr;
  QuantizeFn quantize = nullptr;
  DotQ8KFn dot_q8k = nullptr;           // int8 activations; only the 256-element block formats
  DotRowsFn dot_rows = nullptr;         // several activation rows at once; F32, F16 and BF16
  DotQ8KRowsFn dot_q8k_rows = nullptr;  // dot_q8k over consecutive rows, where it pays
};

// One tile of the prefill GEMM: acc[j][t] (+)= sum_k w[j * ldw + k] * xp[k * group + t] for
// j < rows (<= gemm_rows) weight rows and the `group` tokens of a packed activation block
// xp = [kc][group] (tokens beyond the real ones are zero). acc is [rows][group]; it is
// overwritten unless `accumulate`. `tokens` (<= group) lets a kernel skip all-padding vectors.
using GemmTileFn = void (*)(const float* xp, int tokens, const float* w, int64_t ldw, int rows,
                            int64_t kc, float* acc, bool accumulate);

struct KernelTable {
  Isa isa = Isa::kScalar;
  TypeKernels f32, f16, bf16, q8_0, q4_0;
  // kquants.h: the K-quants, IQ4 and the older 32-element formats.
  TypeKernels q4_1, q5_0, q5_1, iq4_nl, q2_k, q3_k, q4_k, q5_k, q6_k, iq4_xs;
  // The activations of the dot_q8k kernels; every table's gives QuantizeQ8K's bits. It runs on
  // the calling thread before a decode product fans out, so a scalar one idles the other cores.
  QuantizeQ8KFn quantize_q8k = QuantizeQ8K;
  GemmTileFn gemm_tile = nullptr;
  int gemm_group = 0;  // tokens per packed activation block
  int gemm_rows = 0;   // most weight rows per tile
};

const KernelTable& ScalarKernels();
// Null when this build has no such table (non-x86 targets).
const KernelTable* Avx2Kernels();
const KernelTable* Avx512Kernels();
const KernelTable* Avx512VnniKernels();

using quant::CpuFeatures;
using quant::CpuHasIsa;
using quant::DetectCpu;

// The scalar table, then each of `simd` (null where this build has none) that `runs` accepts,
// in the given order (the fastest last). For the float and the int8 tables.
template <class Table>
std::vector<const Table*> UsableTables(const Table& scalar,
                                       std::initializer_list<const Table*> simd,
                                       bool (*runs)(const Table&)) {
  std::vector<const Table*> tables = {&scalar};
  for (const Table* t : simd) {
    if (t != nullptr && runs(*t)) tables.push_back(t);
  }
  return tables;
}

// Tables usable on this CPU, scalar first and the fastest last.
std::span<const KernelTable* const> SupportedKernels();
// The fastest supported table; decided once per process.
const KernelTable& BestKernels();

// Kernels of `type` in `table`, or null for a type quant cannot compute.
const TypeKernels* Find(const KernelTable& table, GgmlType type);

// Block size (elements) and block bytes of the computable types (from the type table); 0 for
// the others.
int BlockSize(GgmlType type);
int BlockBytes(GgmlType type);

}  // namespace primekv::quant::internal
