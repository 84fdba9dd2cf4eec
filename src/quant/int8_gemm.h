// Internal: matrix products on integer dot products. The activations are quantised once per
// product to 8-bit blocks (Q8Rows); each weight type then supplies one kernel that multiplies
// its encoded rows with such activations (Q8GemmFn). A new weight type (the K-quants) joins by
// adding its Q8GemmFn to the tables; the activation format already carries the per-block sums
// that formats with offsets or minimums need.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>

#include "primekv/quant/quant.h"
#include "primekv/util/dtype.h"
#include "quant/kernels.h"

namespace primekv::quant::internal {

inline constexpr int kQ8Block = 32;  // activation values per block
// An activation block's scale as a Q8_0 block stores it, in fp16 (the quants are rounded with the
// exact scale, as llama.cpp's quantize_row_q8_0 does): the products then carry llama.cpp's
// rounding, and its logits are matched to float precision where they were 1-2% apart.
inline float RoundScaleToF16(float scale) { return F16ToF32(F32ToF16(scale)); }
// Up to this many tokens (a decode batch, model.h's kDecodeBatchRows) the int8 kernels stream
// the weight rows: each row is read once and dotted with every token.
inline constexpr int kStreamTokens = 5;

// The decode kernels' chunking: up to kStreamTokens tokens in one call over every row; more in
// chunks of that many over panels of 16 rows that stay in cache, so every token gets the bits of
// its own one-token product. run(first row, rows, first token, tokens).
template <class Run>
void ForStreamChunks(int64_t rows, int64_t tokens, Run run) {
  if (tokens <= kStreamTokens) return run(0, rows, 0, tokens);
  constexpr int64_t kPanel = 16;
  for (int64_t r0 = 0; r0 < rows; r0 += kPanel) {
    const int64_t rn = rows - r0 < kPanel ? rows - r0 : kPanel;
    for (int64_t t0 = 0; t0 < tokens; t0 += kStreamTokens)
      run(r0, rn, t0, tokens - t0 < kStreamTokens ? tokens - t0 : kStreamTokens);
  }
}

// Activations as x[t][k] ~= d[t][k / 32] * q[t][k]: q in [-127, 127], d = max|x| / 127 over the
// block, and sum[t][b] = the sum of block b's q (for weights stored with an offset: Q4_0's
// nibbles are w + 8, and the VNNI kernels read Q8_0 as w + 128).
struct Q8Rows {
  int64_t rows = 0;
  int64_t cols = 0;              // a multiple of kQ8Block
  int64_t stride = 0;            // bytes between rows of q: cols rounded up to 64, zero-padded
  int64_t block_stride = 0;      // entries between rows of d and sum: blocks rounded up to even,
                                 // the padding entry zero
  const int8_t* q = nullptr;     // [rows][stride]
  const float* d = nullptr;      // [rows][block_stride]
  const int32_t* sum = nullptr;  // [rows][block_stride]
  int64_t blocks() const { return cols / kQ8Block; }
};

// One row: x[n] (n a multiple of 32) into q[n], d[n / 32], sum[n / 32]. Every table's version
// gives the same bits: round to nearest even of x * (1 / d), d = max|x| / 127.
using QuantizeQ8Fn = void (*)(const float* x, int64_t n, int8_t* q, float* d, int32_t* sum);

// out[t * ldo + r] = sum_k W[r][k] * A[t][k] for r < rows and t < a.rows, where W's rows are
// encoded in the kernel's weight type, row r at w + r * row_bytes.
using Q8GemmFn = void (*)(const uint8_t* w, size_t row_bytes, int64_t rows, const Q8Rows& a,
                          float* out, int64_t ldo);

// Q4_0 decode on AVX-512 VNNI takes four blocks per step (int8_avx512.cc).
inline constexpr int kQ4_0GroupBlocks = 4;

// The scalar twin of the AVX-512 VNNI Q4_0 kernel for decode and batches below 16 tokens: per row
// and token, 16 float lanes in two accumulators (even and odd steps of four blocks), lane l of a
// step taking the int32 sum of elements 4 (l % 4) .. + 3 and 16 + 4 (l % 4) .. + 3 of block
// 4 step + l / 4 plus, in lane 4i, -8 * sum, scaled by fp16(d_w) * d_a with one fused
// multiply-add; then the two accumulators lane by lane and the lanes as halves, quarters and
// pairs. The same bits as the SIMD kernel (tests/quant/int8_gemm_test.cc).
void Q4_0DecodeTwin(const uint8_t* w, size_t row_bytes, int64_t rows, const Q8Rows& a, float* out,
                    int64_t ldo);

// The scalar twin of the AVX-512 VNNI Q8_0 kernel below 16 tokens (decode, StreamQ8_0, and the
// 4 x 4 tiles): per row and token, 16 float lanes in one accumulator; per pair of blocks p, lane l
// takes the int32 sum of (w + 128) * q over elements 4 (l % 8) .. + 3 of block 2p + l / 8 plus, in
// lanes 0 and 8, -128 * sum, scaled by fp16(d_w) * d_a with one fused multiply-add (lanes of a
// missing last block add +0); then the lanes as halves, quarters and pairs. The same bits as the
// SIMD kernel (tests/quant/int8_gemm_test.cc).
void Q8_0DecodeTwin(const uint8_t* w, size_t row_bytes, int64_t rows, const Q8Rows& a, float* out,
                    int64_t ldo);

// The scalar twins of the AVX2 kernels below 16 tokens (decode): per row and token, 8 float lanes
// in two accumulators, then the two accumulators lane by lane and the lanes as halves, pairs and
// the last two. Q8_0: block b goes to accumulator b % 2, lane l taking the int32 sum of w * q over
// elements 4l .. 4l + 3. Q4_0: block b goes to lanes 4 (b % 2) .. + 3 of accumulator (b / 2) % 2,
// lane l taking the sum of (w + 8) * q over elements 4l .. 4l + 3 and 16 + 4l .. 16 + 4l + 3, plus
// -8 * sum in its first lane. Each int32 scaled by fp16(d_w) * d_a with one fused multiply-add.
// The same bits as the SIMD kernels (tests/quant/int8_gemm_test.cc).
void Q8_0Avx2DecodeTwin(const uint8_t* w, size_t row_bytes, int64_t rows, const Q8Rows& a,
                        float* out, int64_t ldo);
void Q4_0Avx2DecodeTwin(const uint8_t* w, size_t row_bytes, int64_t rows, const Q8Rows& a,
                        float* out, int64_t ldo);

// The scalar twins of the SIMD kernels from 16 tokens on (prefill: the AVX2 and AVX-512 VNNI
// packed panels): per row and token, acc = fma(float(dot_b), fp16(d_w) * d_a, acc) over the blocks
// b in order, dot_b the exact int32 dot product of the block. The same bits as the SIMD kernels
// (tests/quant/int8_gemm_test.cc).
void Q8_0PanelTwin(const uint8_t* w, size_t row_bytes, int64_t rows, const Q8Rows& a, float* out,
                   int64_t ldo);
void Q4_0PanelTwin(const uint8_t* w, size_t row_bytes, int64_t rows, const Q8Rows& a, float* out,
                   int64_t ldo);

// From this many tokens on the batch kernels of the K-quants below run (they unpack a weight
// panel once per call and need whole groups of 16 tokens to pay for it).
inline constexpr int kBatchMinTokens = 16;

struct Int8Kernels {
  Isa isa = Isa::kScalar;  // kScalar, kAvx2, kAvx512Vnni or kAmxInt8 (names, CPU check: kernels.h)
  QuantizeQ8Fn quantize = nullptr;
  Q8GemmFn q8_0 = nullptr;
  Q8GemmFn q4_0 = nullptr;
  // Batches only (a.rows >= kBatchMinTokens, cols a multiple of 256): null where decode's dot_q8k
  // and the float panels serve these types.
  Q8GemmFn batch_q3_k = nullptr;
  Q8GemmFn batch_q4_k = nullptr;
  Q8GemmFn batch_q5_k = nullptr;
  Q8GemmFn batch_q6_k = nullptr;
  Q8GemmFn batch_iq4_xs = nullptr;
};

const Int8Kernels& ScalarInt8Kernels();
// Null when this build has no such table (non-x86 targets).
const Int8Kernels* Avx2Int8Kernels();
const Int8Kernels* Avx512VnniInt8Kernels();
const Int8Kernels* AmxInt8Kernels();

// Tables usable on this CPU, scalar first and the fastest last.
std::span<const Int8Kernels* const> SupportedInt8Kernels();
const Int8Kernels& BestInt8Kernels();

// The table's kernel for weights of `type`, or null when the type has no integer path.
Q8GemmFn FindQ8Gemm(const Int8Kernels& table, GgmlType type);
// The table's batch-only kernel for `type` (K-quants), or null.
Q8GemmFn FindBatchQ8Gemm(const Int8Kernels& table, GgmlType type);

// The scalar twins of the AMX K-quant batch kernels: per row and token, over the row's groups g
// of G elements (G = 32 for Q4_K, Q5_K and IQ4_XS, whose scales come in pairs; 16 for Q3_K and
// Q6_K), dot the exact int32 sum of the unpacked quants times the activation quants, da the
// scale of the activation block holding g, acc = fma(float(dot), scale_g * da, acc) and, for
// formats with minimums (KQuantHasMins), acc = fma(-min_g, da * float(sum of that activation
// block), acc).
template <GgmlType kType>
void KQuantPanelTwin(const uint8_t* w, size_t row_bytes, int64_t rows, const Q8Rows& a, float* out,
                     int64_t ldo);
// The group size of a K-quant's batch kernel, and whether its groups have minimums.
constexpr int KQuantGroup(GgmlType type) {
  return type == GgmlType::kQ3_K || type == GgmlType::kQ6_K ? 16 : 32;
}
constexpr bool KQuantHasMins(GgmlType type) {
  return type == GgmlType::kQ4_K || type == GgmlType::kQ5_K;
}

}  // namespace primekv::quant::internal
