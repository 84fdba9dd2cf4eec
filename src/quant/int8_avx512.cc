// AVX-512 VNNI integer-dot kernels: vpdpbusd multiplies 64 unsigned weight bytes with 64 signed
// activation bytes and adds each group of four products into one of 16 int32 lanes, so one
// instruction covers two 32-element blocks (lanes 0-7 block b, lanes 8-15 block b + 1).
//
// vpdpbusd wants one unsigned operand. The weights are made unsigned by an offset (Q8_0: w + 128,
// one xor per weight vector; Q4_0: its nibbles are already w + 8) and the offset times the
// activation block sum is subtracted by starting the accumulator at -offset * sum (lane 0 and
// lane 8), so the correction costs nothing per (row, token) pair.
//
// Q8_0 below 16 tokens: a micro-kernel keeps a 4 rows x 4 tokens tile of float accumulators in
// registers; per pair and two blocks: vpdpbusd, a conversion, a scale product and an FMA. Decode
// (up to kStreamTokens tokens) has a stream kernel per type, four blocks per step with software
// prefetch (StreamQ8_0, the same bits as the tiles; StreamQ4_0). From 16 tokens on, both repack
// 16-row panels (GemmPacked).
#include <algorithm>
#include <cstdint>
#include <cstring>
#include <type_traits>
#include <vector>

#include "quant/int8_gemm.h"
#include "quant/kernels.h"
#include "quant/kquants.h"

#if defined(__x86_64__)
#include <immintrin.h>

#include "primekv/quant/simd/target_avx512vnni_begin.inc"

namespace primekv::quant::internal {
namespace {

constexpr int kTileRows = 4;
constexpr int kTileTokens = 4;

// Lanes 0-7 from element 0 of v, lanes 8-15 from element 1.
__m512i PairIndex() { return _mm512_setr_epi32(0, 0, 0, 0, 0, 0, 0, 0, 1, 1, 1, 1, 1, 1, 1, 1); }

// The fp16 scales of blocks at p and (if kTwo) p + kBytes, spread as lanes 0-7 and 8-15.
template <int kBytes, bool kTwo>
__m512 WeightScales(const uint8_t* p, __m512i pair) {
  const uint32_t bits = uint32_t{LoadU16(p)} | (kTwo ? uint32_t{LoadU16(p + kBytes)} << 16 : 0u);
  const __m128 s = _mm_cvtph_ps(_mm_cvtsi32_si128(static_cast<int>(bits)));
  return _mm512_permutexvar_ps(pair, _mm512_castps128_ps512(s));
}

// A weight format's block size and the offset (1 << kOffsetShift) that makes its quants unsigned.
template <int kBlockBytes, int kShift>
struct WeightFormat {
  static constexpr int kBytes = kBlockBytes;
  static constexpr int kOffsetShift = kShift;
};

struct Q8_0Weights : WeightFormat<kQ8_0BlockBytes, 7> {  // offset 128
  template <bool kTwo>
  static __m512i Quants(const uint8_t* p) {
    const __m256i lo = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p + 2));
    const __m256i hi = kTwo ? _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p + 2 + kBytes))
                            : _mm256_setzero_si256();
    const __m512i both = _mm512_inserti64x4(_mm512_castsi256_si512(lo), hi, 1);
    // w + 128 as unsigned; a missing second block stays 0 (no products).
    return _mm512_maskz_xor_epi32(kTwo ? 0xFFFF : 0x00FF, both, _mm512_set1_epi8(-128));
  }
  // One block's 32 weights + 128, in element order.
  static __m256i Unsigned32(const uint8_t* p) {
    return _mm256_xor_si256(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(p + 2)),
                            _mm256_set1_epi8(-128));
  }
};

struct Q4_0Weights : WeightFormat<kQ4_0BlockBytes, 3> {  // offset 8
  template <bool kTwo>
  static __m512i Quants(const uint8_t* p) {
    const __m128i b0 = _mm_loadu_si128(reinterpret_cast<const __m128i*>(p + 2));
    const __m128i b1 = kTwo ? _mm_loadu_si128(reinterpret_cast<const __m128i*>(p + 2 + kBytes))
                            : _mm_setzero_si128();
    const __m256i bytes = _mm256_inserti128_si256(_mm256_castsi128_si256(b0), b1, 1);
    // [b0, b1, b0 >> 4, b1 >> 4] -> [b0, b0 >> 4, b1, b1 >> 4]: elements 0-15, 16-31 of each.
    const __m512i z =
        _mm512_inserti64x4(_mm512_castsi256_si512(bytes), _mm256_srli_epi16(bytes, 4), 1);
    return _mm512_and_si512(_mm512_shuffle_i64x2(z, z, _MM_SHUFFLE(3, 1, 2, 0)),
                            _mm512_set1_epi8(0x0F));
  }
  // One block's 32 nibbles (weights + 8), in element order.
  static __m256i Unsigned32(const uint8_t* p) {
    const __m128i bytes = _mm_loadu_si128(reinterpret_cast<const __m128i*>(p + 2));
    const __m128i low = _mm_set1_epi8(0x0F);
    return _mm256_inserti128_si256(_mm256_castsi128_si256(_mm_and_si128(bytes, low)),
                                   _mm_and_si128(_mm_srli_epi16(bytes, 4), low), 1);
  }
};

// Blocks b and (if kTwo) b + 1 of one tile into its accumulators.
template <class W, int kRows, int kTokens, bool kTwo>
[[gnu::always_inline]] inline void Step(const uint8_t* w, size_t row_bytes, const Q8Rows& a,
                                        int64_t t0, int64_t b, __m512i pair,
                                        __m512 (&acc)[kRows][kTokens]) {
  __m512i u[kRows];
  __m512 ws[kRows];
  for (int r = 0; r < kRows; ++r) {
    const uint8_t* p = w + static_cast<size_t>(r) * row_bytes + b * W::kBytes;
    u[r] = W::template Quants<kTwo>(p);
    ws[r] = WeightScales<W::kBytes, kTwo>(p, pair);
  }
  for (int t = 0; t < kTokens; ++t) {
    const int64_t row = t0 + t;
    const __m512i q = _mm512_loadu_si512(a.q + row * a.stride + b * kQ8Block);
    const float* d = a.d + row * a.block_stride + b;
    const int32_t* s = a.sum + row * a.block_stride + b;
    const __m512 as = _mm512_permutexvar_ps(
        pair, _mm512_castps128_ps512(
                  _mm_castsi128_ps(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(d)))));
    const __m512i sums = _mm512_maskz_permutexvar_epi32(
        0x0101, pair, _mm512_castsi128_si512(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(s))));
    const __m512i init =
        _mm512_sub_epi32(_mm512_setzero_si512(), _mm512_slli_epi32(sums, W::kOffsetShift));
    for (int r = 0; r < kRows; ++r) {
      const __m512i dot = _mm512_dpbusd_epi32(init, u[r], q);
      acc[r][t] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(dot), _mm512_mul_ps(ws[r], as), acc[r][t]);
    }
  }
}

// One tile: kRows weight rows x kTokens activation rows over all blocks.
template <class W, int kRows, int kTokens>
void Micro(const uint8_t* w, size_t row_bytes, const Q8Rows& a, int64_t t0, float* out,
           int64_t ldo) {
  const __m512i pair = PairIndex();
  const int64_t blocks = a.blocks();
  __m512 acc[kRows][kTokens];
  for (int r = 0; r < kRows; ++r)
    for (int t = 0; t < kTokens; ++t) acc[r][t] = _mm512_setzero_ps();
  int64_t b = 0;
  for (; b + 2 <= blocks; b += 2) Step<W, kRows, kTokens, true>(w, row_bytes, a, t0, b, pair, acc);
  if (b < blocks) Step<W, kRows, kTokens, false>(w, row_bytes, a, t0, b, pair, acc);
  for (int r = 0; r < kRows; ++r)
    for (int t = 0; t < kTokens; ++t) out[t * ldo + r] = _mm512_reduce_add_ps(acc[r][t]);
}

template <class W, int kRows>
void MicroTokens(const uint8_t* w, size_t row_bytes, const Q8Rows& a, int64_t t0, int tokens,
                 float* out, int64_t ldo) {
  WithCount<kTileTokens>(
      tokens, [&](auto kTokens) { Micro<W, kRows, kTokens()>(w, row_bytes, a, t0, out, ldo); });
}

// Batches (prefill): 16 weight rows are repacked so that one vector holds four consecutive
// weights of each row (lane = row). vpdpbusd against four activation bytes broadcast to every
// lane then advances 16 rows at once, and after eight steps each lane holds a whole block's
// dot product for its row: the conversion and scaling happen once per 16 rows and block, not
// per (row, token) pair as in Micro. The repacking is paid once per 16 rows and call, and
// shared by every token.
constexpr int kPanelRows = 16;
constexpr int kPanelTokens = 16;
constexpr int kPackMinTokens = 16;  // below this, Micro (no repacking) is faster

struct PackedPanel {
  std::vector<uint8_t> q;  // [blocks][8][16 rows][4 bytes]: unsigned weights (w + offset)
  std::vector<float> d;    // [blocks][16 rows]: weight scales, 0 for missing rows
};

// Rows r and r + 8 of the panel share a vector (halves), then an 8 x 8 transpose of dwords
// inside each half leaves dword kk of every row in vector kk, lane = row.
template <class W>
void PackPanel(const uint8_t* w, size_t row_bytes, int rows, int64_t blocks, PackedPanel& out) {
  if (out.q.size() < static_cast<size_t>(blocks) * 512) out.q.resize(blocks * 512);
  if (out.d.size() < static_cast<size_t>(blocks) * kPanelRows) out.d.resize(blocks * kPanelRows);
  const __m512i lo_idx = _mm512_setr_epi64(0, 1, 8, 9, 4, 5, 12, 13);
  const __m512i hi_idx = _mm512_setr_epi64(2, 3, 10, 11, 6, 7, 14, 15);
  for (int64_t b = 0; b < blocks; ++b) {
    const auto row = [&](int r) {
      return r < rows ? W::Unsigned32(w + static_cast<size_t>(r) * row_bytes + b * W::kBytes)
                      : _mm256_setzero_si256();
    };
    __m512i z[8];
    for (int i = 0; i < 8; ++i)
      z[i] = _mm512_inserti64x4(_mm512_castsi256_si512(row(i)), row(i + 8), 1);
    __m512i t[8], u[8];
    for (int i = 0; i < 8; i += 2) {
      t[i] = _mm512_unpacklo_epi32(z[i], z[i + 1]);
      t[i + 1] = _mm512_unpackhi_epi32(z[i], z[i + 1]);
    }
    for (int i = 0; i < 8; i += 4) {
      u[i] = _mm512_unpacklo_epi64(t[i], t[i + 2]);
      u[i + 1] = _mm512_unpackhi_epi64(t[i], t[i + 2]);
      u[i + 2] = _mm512_unpacklo_epi64(t[i + 1], t[i + 3]);
      u[i + 3] = _mm512_unpackhi_epi64(t[i + 1], t[i + 3]);
    }
    // u[c] (c < 4) holds rows 0-3 of columns c and c + 4 (128-bit lanes 0/1; rows 8-11 in 2/3),
    // u[c + 4] rows 4-7 (and 12-15).
    uint8_t* dst = out.q.data() + b * 512;
    for (int c = 0; c < 4; ++c) {
      _mm512_storeu_si512(dst + c * 64, _mm512_permutex2var_epi64(u[c], lo_idx, u[c + 4]));
      _mm512_storeu_si512(dst + (c + 4) * 64, _mm512_permutex2var_epi64(u[c], hi_idx, u[c + 4]));
    }
    for (int r = 0; r < kPanelRows; ++r) {
      out.d[b * kPanelRows + r] =
          r < rows ? _cvtsh_ss(LoadU16(w + static_cast<size_t>(r) * row_bytes + b * W::kBytes))
                   : 0.0f;
    }
  }
}

int32_t LoadI32(const int8_t* p) {
  int32_t v;
  std::memcpy(&v, p, sizeof(v));
  return v;
}

// Per block: the panel's eight weight vectors stay in registers while each token's eight
// broadcast dwords run through them; one accumulator per token.
template <int kTokens>
void PanelTile(const PackedPanel& panel, int64_t blocks, int shift, const Q8Rows& a, int64_t t0,
               int rows, float* out, int64_t ldo) {
  __m512 acc[kTokens];
  for (int t = 0; t < kTokens; ++t) acc[t] = _mm512_setzero_ps();
  const int8_t* q = a.q + t0 * a.stride;
  const float* d = a.d + t0 * a.block_stride;
  const int32_t* sum = a.sum + t0 * a.block_stride;
  for (int64_t b = 0; b < blocks; ++b) {
    const uint8_t* pq = panel.q.data() + b * 512;
    __m512i wv[8];
    for (int kk = 0; kk < 8; ++kk) wv[kk] = _mm512_loadu_si512(pq + kk * 64);
    const __m512 dw = _mm512_loadu_ps(panel.d.data() + b * kPanelRows);
    for (int t = 0; t < kTokens; ++t) {
      const int8_t* qt = q + t * a.stride + b * kQ8Block;
      // The offset's share, -offset * sum(q), as the starting value.
      __m512i dot = _mm512_set1_epi32(-(sum[t * a.block_stride + b] << shift));
      for (int kk = 0; kk < 8; ++kk) {
        dot = _mm512_dpbusd_epi32(dot, wv[kk], _mm512_set1_epi32(LoadI32(qt + 4 * kk)));
      }
      const __m512 scale = _mm512_mul_ps(dw, _mm512_set1_ps(d[t * a.block_stride + b]));
      acc[t] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(dot), scale, acc[t]);
    }
  }
  const auto mask = static_cast<__mmask16>((1u << rows) - 1);
  for (int t = 0; t < kTokens; ++t) _mm512_mask_storeu_ps(out + t * ldo, mask, acc[t]);
}

template <class W>
void GemmPacked(const uint8_t* w, size_t row_bytes, int64_t rows, const Q8Rows& a, float* out,
                int64_t ldo) {
  thread_local PackedPanel panel;
  const int64_t blocks = a.blocks();
  for (int64_t r0 = 0; r0 < rows; r0 += kPanelRows) {
    const int rn = static_cast<int>(rows - r0 < kPanelRows ? rows - r0 : kPanelRows);
    PackPanel<W>(w + static_cast<size_t>(r0) * row_bytes, row_bytes, rn, blocks, panel);
    int64_t t0 = 0;
    const auto tile = [&](auto tokens) {
      for (; t0 + tokens() <= a.rows; t0 += tokens()) {
        PanelTile<tokens()>(panel, blocks, W::kOffsetShift, a, t0, rn, out + t0 * ldo + r0, ldo);
      }
    };
    tile(std::integral_constant<int, kPanelTokens>{});
    tile(std::integral_constant<int, 4>{});
    tile(std::integral_constant<int, 1>{});
  }
}

// Q4_0 decode (up to kStreamTokens tokens), four blocks per step. The 72 bytes of four blocks
// come in as one 64-byte and one 8-byte load (two overlapping 64-byte loads, at 0 and 8, ran at
// half the speed from DRAM); one word permute gathers their 64 quant bytes, block i in 128-bit lane
// i, so that the low nibbles (elements 0-15) and the high nibbles (elements 16-31) each fill one
// vector, and another puts each block's fp16 scale under its lane's four int32 sums. The
// activations are laid out to match once per call (Q4Acts), with the offset term -8 * sum in lane
// 4i and each block's scale spread over its lane, so a step costs per token two vpdpbusd, a
// conversion, a product and an FMA. Even and odd steps go to two accumulators; one reduction per
// row and token at the end. Q4_0DecodeTwin (int8_scalar.cc) does the same arithmetic in the same
// order. One row at a time: two rows per pass (sharing the activation loads) took 10% less time
// in cache but 1.5x as long from DRAM (two interleaved streams defeat the prefetchers).
struct alignas(64) Q4Acts {
  int8_t lo[64];     // elements 0-15 of the four blocks
  int8_t hi[64];     // elements 16-31
  float scale[16];   // lane l: d of block l / 4
  int32_t init[16];  // lane 4i: -8 * sum of block i, 0 elsewhere
};
static_assert(sizeof(Q4Acts) == 256);
static_assert(kQ4_0GroupBlocks == 4);

void PrepareQ4Acts(const Q8Rows& a, int64_t groups, Q4Acts* out) {
  const int64_t blocks = a.blocks();
  const __m512i lo_idx = _mm512_setr_epi64(0, 1, 4, 5, 8, 9, 12, 13);
  const __m512i hi_idx = _mm512_setr_epi64(2, 3, 6, 7, 10, 11, 14, 15);
  const __m512i spread = _mm512_setr_epi32(0, 0, 0, 0, 1, 1, 1, 1, 2, 2, 2, 2, 3, 3, 3, 3);
  for (int64_t t = 0; t < a.rows; ++t) {
    for (int64_t g = 0; g < groups; ++g) {
      const int64_t b0 = g * kQ4_0GroupBlocks;
      const int nb = static_cast<int>(blocks - b0 < 4 ? blocks - b0 : 4);
      // Bytes and entries of the blocks that exist; the rest read as zero.
      const __mmask64 m0 = nb >= 2 ? ~__mmask64{0} : (__mmask64{1} << (32 * nb)) - 1;
      const __mmask64 m1 = nb == 4 ? ~__mmask64{0} : nb == 3 ? 0xFFFFFFFFull : 0;
      const auto mb = static_cast<__mmask16>((1u << nb) - 1);
      const int8_t* q = a.q + t * a.stride + b0 * kQ8Block;
      const __m512i q0 = _mm512_maskz_loadu_epi8(m0, q);
      const __m512i q1 = _mm512_maskz_loadu_epi8(m1, q + 64);
      Q4Acts& o = out[t * groups + g];
      _mm512_store_si512(o.lo, _mm512_permutex2var_epi64(q0, lo_idx, q1));
      _mm512_store_si512(o.hi, _mm512_permutex2var_epi64(q0, hi_idx, q1));
      const __m512 d = _mm512_maskz_loadu_ps(mb, a.d + t * a.block_stride + b0);
      _mm512_store_ps(o.scale, _mm512_permutexvar_ps(spread, d));
      const __m512i s = _mm512_maskz_loadu_epi32(mb, a.sum + t * a.block_stride + b0);
      const __m512i first = _mm512_maskz_permutexvar_epi32(0x1111, spread, s);
      _mm512_store_si512(o.init,
                         _mm512_sub_epi32(_mm512_setzero_si512(), _mm512_slli_epi32(first, 3)));
    }
  }
}

// Lanes added as halves, then quarters, then pairs (the twin's order).
float SumLanes(__m512 v) {
  const __m256 s8 = _mm256_add_ps(_mm512_castps512_ps256(v),
                                  _mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(v), 1)));
  const __m128 s4 = _mm_add_ps(_mm256_castps256_ps128(s8), _mm256_extractf128_ps(s8, 1));
  const __m128 s2 = _mm_add_ps(s4, _mm_movehl_ps(s4, s4));
  return _mm_cvtss_f32(_mm_add_ss(s2, _mm_movehdup_ps(s2)));
}

// Software prefetch distance in the weight stream. On a Zen 5 EPYC, decoding the 1B-shaped Q4_0
// file at 1 thread took 16% less CPU time with it (8 KiB) than with the hardware prefetchers
// alone; 2 KiB gained 8%, 4 KiB 13%, 16 KiB 13%.
constexpr int kPrefetchAhead = 8192;

template <int kTokens>
void StreamQ4_0(const uint8_t* w, size_t row_bytes, int64_t rows, int64_t blocks,
                const Q4Acts* acts, int64_t groups, float* out, int64_t ldo) {
  // Word k of the gathered quants: block k / 8, quant word k % 8, at word 9 * block + 1 + k % 8
  // of the four blocks; words 32-35 come from the second operand (the last 8 bytes).
  alignas(64) int16_t quant_words[32];
  alignas(64) int16_t scale_words[32];
  for (int k = 0; k < 32; ++k) {
    const int src = 9 * (k / 8) + 1 + k % 8;
    quant_words[k] = static_cast<int16_t>(src);
    scale_words[k] = static_cast<int16_t>(9 * ((k % 16) / 4));
  }
  const __m512i quant_idx = _mm512_load_si512(quant_words);
  const __m512i scale_idx = _mm512_load_si512(scale_words);
  const __m512i low = _mm512_set1_epi8(0x0F);
  const int64_t full = blocks / kQ4_0GroupBlocks;
  const int tail = static_cast<int>(blocks % kQ4_0GroupBlocks);
  const __mmask64 tail_mask = (__mmask64{1} << (tail * kQ4_0BlockBytes)) - 1;
  for (int64_t r = 0; r < rows; ++r) {
    const uint8_t* p = w + static_cast<size_t>(r) * row_bytes;
    __m512 acc[2][kTokens];
    for (int k = 0; k < 2; ++k)
      for (int t = 0; t < kTokens; ++t) acc[k][t] = _mm512_setzero_ps();
    // Step g goes to accumulator k = g % 2, a constant here (a runtime index kept acc in memory).
    const auto step = [&](auto k, int64_t g, __m512i z0, __m512i z1) {
      const __m512i q = _mm512_permutex2var_epi16(z0, quant_idx, z1);
      const __m512i wl = _mm512_and_si512(q, low);
      const __m512i wh = _mm512_and_si512(_mm512_srli_epi16(q, 4), low);
      const __m512 ws =
          _mm512_cvtph_ps(_mm512_castsi512_si256(_mm512_permutexvar_epi16(scale_idx, z0)));
      for (int t = 0; t < kTokens; ++t) {
        const Q4Acts& x = acts[t * groups + g];
        __m512i dot = _mm512_load_si512(x.init);
        dot = _mm512_dpbusd_epi32(dot, wl, _mm512_load_si512(x.lo));
        dot = _mm512_dpbusd_epi32(dot, wh, _mm512_load_si512(x.hi));
        acc[k()][t] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(dot),
                                      _mm512_mul_ps(ws, _mm512_load_ps(x.scale)), acc[k()][t]);
      }
    };
    const auto full_step = [&](auto k, int64_t g) {
      const uint8_t* pg = p + g * kQ4_0GroupBlocks * kQ4_0BlockBytes;
      // Both lines of the 72 bytes, so that no line of the stream is left to a demand miss.
      _mm_prefetch(reinterpret_cast<const char*>(pg + kPrefetchAhead), _MM_HINT_NTA);
      _mm_prefetch(reinterpret_cast<const char*>(pg + kPrefetchAhead + 64), _MM_HINT_NTA);
      step(k, g, _mm512_loadu_si512(pg),
           _mm512_zextsi128_si512(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(pg + 64))));
    };
    constexpr std::integral_constant<int, 0> kEven{};
    constexpr std::integral_constant<int, 1> kOdd{};
    int64_t g = 0;
    for (; g + 2 <= full; g += 2) {
      full_step(kEven, g);
      full_step(kOdd, g + 1);
    }
    if (g < full) full_step(kEven, g++);
    if (tail != 0) {
      const __m512i z0 =
          _mm512_maskz_loadu_epi8(tail_mask, p + full * kQ4_0GroupBlocks * kQ4_0BlockBytes);
      if (full % 2 == 0) {
        step(kEven, full, z0, _mm512_setzero_si512());
      } else {
        step(kOdd, full, z0, _mm512_setzero_si512());
      }
    }
    for (int t = 0; t < kTokens; ++t)
      out[t * ldo + r] = SumLanes(_mm512_add_ps(acc[0][t], acc[1][t]));
  }
}

// Q8_0 decode (up to kStreamTokens tokens): the arithmetic of Micro<Q8_0Weights, 1, kTokens> (one
// accumulator per token, two blocks per vpdpbusd, so the bits are those of the tiled path for 6-15
// tokens and of Q8_0DecodeTwin), laid out for a stream from DRAM: four blocks (136 bytes) per step,
// their fp16 scales out of two 64-byte loads with one word permute, and two prefetches
// kPrefetchAhead bytes ahead. On the 1B-shaped Q8_0 file at one thread (Zen 5) the tiled kernel
// waited on its loads for most of its time (perf), and this one decodes 20-25% faster. (Spreading
// the activation scales and offset terms over their lanes once per call instead of per step was
// slower: 192 bytes per pair and token outgrew L1 at 5 tokens, 2x the time in cache.)
template <int kTokens>
void StreamQ8_0(const uint8_t* w, size_t row_bytes, int64_t rows, const Q8Rows& a, float* out,
                int64_t ldo) {
  constexpr int kB = kQ8_0BlockBytes;
  // Words 0 and 17 of the first 64 bytes are the scales of blocks 0 and 1; words 2 and 19 of
  // the next 64 (operand index 32 + word) those of blocks 2 and 3. Eight lanes each.
  alignas(64) int16_t scale_words[32];
  for (int k = 0; k < 32; ++k) {
    constexpr int16_t kWord[4] = {0, 17, 34, 51};
    scale_words[k] = kWord[k / 8];
  }
  const __m512i scale_idx = _mm512_load_si512(scale_words);
  const __m512i pair = PairIndex();
  const __m512i flip = _mm512_set1_epi8(-128);
  const int64_t blocks = a.blocks();
  for (int64_t r = 0; r < rows; ++r) {
    const uint8_t* p = w + static_cast<size_t>(r) * row_bytes;
    __m512 acc[kTokens];
    for (int t = 0; t < kTokens; ++t) acc[t] = _mm512_setzero_ps();
    // One pair of blocks (quants u, spread weight scales ws) into every token's accumulator.
    const auto pair_step = [&](int64_t pi, __m512i u, __m512 ws) {
      for (int t = 0; t < kTokens; ++t) {
        const __m512i q = _mm512_loadu_si512(a.q + t * a.stride + pi * 2 * kQ8Block);
        const float* d = a.d + t * a.block_stride + 2 * pi;
        const int32_t* sp = a.sum + t * a.block_stride + 2 * pi;
        const __m512 as = _mm512_permutexvar_ps(
            pair, _mm512_castps128_ps512(
                      _mm_castsi128_ps(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(d)))));
        const __m512i sums = _mm512_maskz_permutexvar_epi32(
            0x0101, pair,
            _mm512_castsi128_si512(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(sp))));
        const __m512i init = _mm512_sub_epi32(_mm512_setzero_si512(), _mm512_slli_epi32(sums, 7));
        const __m512i dot = _mm512_dpbusd_epi32(init, u, q);
        acc[t] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(dot), _mm512_mul_ps(ws, as), acc[t]);
      }
    };
    const auto quants = [&](const uint8_t* pb) {
      const __m256i lo = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(pb + 2));
      const __m256i hi = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(pb + 2 + kB));
      return _mm512_xor_si512(_mm512_inserti64x4(_mm512_castsi256_si512(lo), hi, 1), flip);
    };
    int64_t b = 0;
    for (; b + 4 <= blocks; b += 4) {
      const uint8_t* pb = p + b * kB;
      // Three lines per 136 bytes: prefetches 64 bytes apart reach every line of the stream
      // (two, 68 apart, left one line in 17 to a demand miss).
      for (int line = 0; line < 4 * kB; line += 64) {
        _mm_prefetch(reinterpret_cast<const char*>(pb + kPrefetchAhead + line), _MM_HINT_NTA);
      }
      const __m512i s =
          _mm512_permutex2var_epi16(_mm512_loadu_si512(pb), scale_idx, _mm512_loadu_si512(pb + 64));
      const __m512 ws01 = _mm512_cvtph_ps(_mm512_castsi512_si256(s));
      const __m512 ws23 = _mm512_cvtph_ps(_mm512_extracti64x4_epi64(s, 1));
      pair_step(b / 2, quants(pb), ws01);
      pair_step(b / 2 + 1, quants(pb + 2 * kB), ws23);
    }
    if (b + 2 <= blocks) {
      const uint8_t* pb = p + b * kB;
      pair_step(b / 2, quants(pb), WeightScales<kB, true>(pb, pair));
      b += 2;
    }
    if (b < blocks) {
      const uint8_t* pb = p + b * kB;
      pair_step(b / 2, Q8_0Weights::Quants<false>(pb), WeightScales<kB, false>(pb, pair));
    }
    for (int t = 0; t < kTokens; ++t) out[t * ldo + r] = SumLanes(acc[t]);
  }
}

void DecodeQ8_0(const uint8_t* w, size_t row_bytes, int64_t rows, const Q8Rows& a, float* out,
                int64_t ldo) {
  WithCount<kStreamTokens>(static_cast<int>(a.rows), [&](auto kTokens) {
    StreamQ8_0<kTokens()>(w, row_bytes, rows, a, out, ldo);
  });
}

// Below kPackMinTokens tokens: the stream kernel in ForStreamChunks's chunks.
void DecodeQ4_0(const uint8_t* w, size_t row_bytes, int64_t rows, const Q8Rows& a, float* out,
                int64_t ldo) {
  thread_local std::vector<Q4Acts> acts;
  const int64_t groups = (a.blocks() + kQ4_0GroupBlocks - 1) / kQ4_0GroupBlocks;
  if (acts.size() < static_cast<size_t>(a.rows * groups)) acts.resize(a.rows * groups);
  PrepareQ4Acts(a, groups, acts.data());
  const auto run = [&](int64_t r0, int64_t rn, int64_t t0, int64_t tn) {
    WithCount<kStreamTokens>(static_cast<int>(tn), [&](auto kTokens) {
      StreamQ4_0<kTokens()>(w + static_cast<size_t>(r0) * row_bytes, row_bytes, rn, a.blocks(),
                            acts.data() + t0 * groups, groups, out + t0 * ldo + r0, ldo);
    });
  };
  ForStreamChunks(rows, a.rows, run);
}

// Q8_0 below kPackMinTokens tokens: 4 x 4 tiles.
template <class W>
void TiledRows(const uint8_t* w, size_t row_bytes, int64_t rows, const Q8Rows& a, float* out,
               int64_t ldo) {
  for (int64_t r0 = 0; r0 < rows; r0 += kTileRows) {
    const uint8_t* wr = w + static_cast<size_t>(r0) * row_bytes;
    const int64_t rn = rows - r0 < kTileRows ? rows - r0 : kTileRows;
    for (int64_t t0 = 0; t0 < a.rows; t0 += kTileTokens) {
      const int tn = static_cast<int>(a.rows - t0 < kTileTokens ? a.rows - t0 : kTileTokens);
      float* o = out + t0 * ldo + r0;
      WithCount<kTileRows>(static_cast<int>(rn), [&](auto kRows) {
        MicroTokens<W, kRows()>(wr, row_bytes, a, t0, tn, o, ldo);
      });
    }
  }
}

template <class W>
void Gemm(const uint8_t* w, size_t row_bytes, int64_t rows, const Q8Rows& a, float* out,
          int64_t ldo) {
  if (a.rows >= kPackMinTokens) return GemmPacked<W>(w, row_bytes, rows, a, out, ldo);
  if constexpr (std::is_same_v<W, Q4_0Weights>) {
    return DecodeQ4_0(w, row_bytes, rows, a, out, ldo);
  } else {
    if (a.rows <= kStreamTokens) return DecodeQ8_0(w, row_bytes, rows, a, out, ldo);
    TiledRows<W>(w, row_bytes, rows, a, out, ldo);
  }
}

// Bit-identical to the scalar quantiser: the same max, scale, reciprocal and rounding.
void QuantizeQ8(const float* x, int64_t n, int8_t* q, float* d, int32_t* sum) {
  for (int64_t b = 0; b < n / kQ8Block; ++b, x += kQ8Block, q += kQ8Block) {
    const __m512 x0 = _mm512_loadu_ps(x);
    const __m512 x1 = _mm512_loadu_ps(x + 16);
    const float amax = _mm512_reduce_max_ps(_mm512_max_ps(_mm512_abs_ps(x0), _mm512_abs_ps(x1)));
    const float scale = amax / 127.0f;
    const float inv = scale > 0.0f ? 1.0f / scale : 0.0f;
    const __m512 vinv = _mm512_set1_ps(inv);
    const __m512i i0 = _mm512_cvtps_epi32(_mm512_mul_ps(x0, vinv));
    const __m512i i1 = _mm512_cvtps_epi32(_mm512_mul_ps(x1, vinv));
    _mm_storeu_si128(reinterpret_cast<__m128i*>(q), _mm512_cvtsepi32_epi8(i0));
    _mm_storeu_si128(reinterpret_cast<__m128i*>(q + 16), _mm512_cvtsepi32_epi8(i1));
    d[b] = RoundScaleToF16(scale);
    sum[b] = _mm512_reduce_add_epi32(_mm512_add_epi32(i0, i1));
  }
}

}  // namespace
}  // namespace primekv::quant::internal

#include "primekv/quant/simd/target_end.inc"

// Batches on AMX tiles (the kAmxInt8 table). A tile product takes 16 tokens' activations as its
// first operand ([group][16 tokens][G bytes], packed once per call with each token's scale and,
// per format, its offset share or its block sum) and a 16-row weight panel as its second
// ([group][G / 4][16 rows][4 bytes]): GemmPacked's panels for Q8_0 and Q4_0 (unsigned, w +
// offset, G = 32), and for the K-quants their unpacked signed quants with each row's scale and
// minimum per group of G (int8_gemm.h's KQuantGroup). One tdpbsud or tdpbssd per group gives
// 16 x 16 int32 dot products, scaled in the order of PanelTile and of the panel twins, whose
// bits they are. Groups alternate between two sets of tiles so that one group's product runs
// while the previous one is scaled.
#include "primekv/quant/simd/target_amx_begin.inc"

namespace primekv::quant::internal {
namespace {

constexpr int kAmxTokens = 16;

// G: elements per group (one scale); kUnsigned: weights as unsigned bytes (tdpbsud) or signed
// (tdpbssd); kOffset: the weights carry an offset, removed as -(sum << shift); kMins: groups
// have minimums, removed as -min * d * sum.
template <int kGroup, bool kUnsignedWeights, bool kWithOffset, bool kWithMins>
struct AmxFormat {
  static constexpr int kG = kGroup;
  static constexpr bool kUnsigned = kUnsignedWeights;
  static constexpr bool kOffset = kWithOffset;
  static constexpr bool kMins = kWithMins;
};
using AmxOffsetFormat = AmxFormat<kQ8Block, true, true, false>;  // Q8_0 and Q4_0
template <GgmlType kType>
using AmxKFormat = AmxFormat<KQuantGroup(kType), false, false, KQuantHasMins(kType)>;

struct alignas(64) TileConfig {
  uint8_t palette = 1;
  uint8_t start_row = 0;
  uint8_t reserved[14] = {};
  uint16_t colsb[16] = {};  // bytes per row
  uint8_t rows[16] = {};
};
static_assert(sizeof(TileConfig) == 64);

// Tiles 0 and 1: int32 products (16 tokens x 16 rows); 2 and 3: activations (16 tokens x G
// bytes); 4 and 5: weights (G / 4 x 64 bytes), for even and odd groups.
template <int kG>
void ConfigureTiles() {
  TileConfig c;
  for (int t : {0, 1}) c.rows[t] = kAmxTokens, c.colsb[t] = kPanelRows * 4;
  for (int t : {2, 3}) c.rows[t] = kAmxTokens, c.colsb[t] = kG;
  for (int t : {4, 5}) c.rows[t] = kG / 4, c.colsb[t] = kPanelRows * 4;
  // Not GCC's _tile_loadconfig: its asm names only the first 8 bytes as read, and the stores to
  // the rest were dropped as dead.
  __asm__ volatile("ldtilecfg %0" : : "m"(c));
}

void ReleaseTiles() { __asm__ volatile("tilerelease" ::); }

// The tile instructions as asm of our own (GCC's macros name no memory at all). A load says
// nothing of what it reads: AmxTile starts with a compiler barrier, after which nothing writes
// its sources. A store names the 1 KiB it writes, so that the scaling reads it afterwards.
// Tile numbers are immediates of the instructions.
#define PRIMEKV_TILE_LOAD(tile, base, stride) \
  __asm__ volatile("tileloadd (%0,%1,1), %%tmm" #tile ::"r"(base), "r"(stride))
#define PRIMEKV_TILE_STORE_1K(tile, base)                                               \
  __asm__ volatile("tilestored %%tmm" #tile ", (%1,%2,1)"                               \
                   : "=m"(*reinterpret_cast<int32_t(*)[kAmxTokens * kPanelRows]>(base)) \
                   : "r"(base), "r"(int64_t{kPanelRows * 4}))
#define PRIMEKV_TILE_ZERO(tile) __asm__ volatile("tilezero %%tmm" #tile ::)
#define PRIMEKV_TILE_DP(insn, c, a, b) \
  __asm__ volatile(insn " %%tmm" #b ", %%tmm" #a ", %%tmm" #c ::)

// Every group of 16 tokens' activations, token group by token group and group by group;
// tokens past a.rows are zero.
template <int kG>
struct AmxActs {
  std::vector<int8_t> q;     // [token group][group][16 tokens][kG]
  std::vector<float> d;      // [token group][group][16 tokens]: the activation block's scale
  std::vector<int32_t> off;  // the same places: -(sum << shift) (formats with an offset)
  std::vector<float> ms;     // the same places: d * sum (formats with minimums)
};

template <class F>
void PackAmxActs(const Q8Rows& a, int64_t token_groups, int shift, AmxActs<F::kG>& out) {
  constexpr int kG = F::kG;
  const int64_t groups = a.cols / kG;
  const auto n = static_cast<size_t>(token_groups * groups * kAmxTokens);
  if (out.q.size() < n * kG) out.q.resize(n * kG);
  if (out.d.size() < n) out.d.resize(n), out.off.resize(n), out.ms.resize(n);
  for (int64_t t = 0; t < token_groups * kAmxTokens; ++t) {
    const bool valid = t < a.rows;
    const int64_t base = (t / kAmxTokens) * groups * kAmxTokens + t % kAmxTokens;
    for (int64_t g = 0; g < groups; ++g) {
      const int64_t i = base + g * kAmxTokens;
      const int64_t block = g * kG / kQ8Block;
      int8_t* q = out.q.data() + i * kG;
      if (!valid) {
        std::memset(q, 0, kG);
        out.d[i] = out.ms[i] = 0.0f;
        out.off[i] = 0;
        continue;
      }
      std::memcpy(q, a.q + t * a.stride + g * kG, kG);
      const float d = a.d[t * a.block_stride + block];
      const int32_t sum = a.sum[t * a.block_stride + block];
      out.d[i] = d;
      if constexpr (F::kOffset) out.off[i] = -(sum << shift);
      if constexpr (F::kMins) out.ms[i] = d * static_cast<float>(sum);
    }
  }
}

// One 16-row panel (quants wq, scales ws, minimums wm) against token group tg; the first
// `tokens` rows of the product go to out.
template <class F>
void AmxTile(const void* wq, const float* ws, const float* wm, int64_t groups,
             const AmxActs<F::kG>& acts, int64_t tg, int rows, int tokens, float* out,
             int64_t ldo) {
  constexpr int kG = F::kG;
  constexpr int64_t kStep = kAmxTokens * kG;  // bytes per group of either operand
  __asm__ volatile("" ::: "memory");
  const int64_t first = tg * groups * kAmxTokens;
  const int8_t* q = acts.q.data() + first * kG;
  const float* d = acts.d.data() + first;
  const int32_t* off = acts.off.data() + first;
  const float* ms = acts.ms.data() + first;
  const auto* pq = static_cast<const uint8_t*>(wq);
  const int64_t act_stride = kG, row64 = kPanelRows * 4;
  __m512 acc[kAmxTokens];
#pragma GCC unroll 16
  for (int t = 0; t < kAmxTokens; ++t) acc[t] = _mm512_setzero_ps();
  alignas(64) int32_t c[kAmxTokens * kPanelRows];
#define PRIMEKV_DP(c, a, b)                \
  do {                                     \
    if constexpr (F::kUnsigned)            \
      PRIMEKV_TILE_DP("tdpbsud", c, a, b); \
    else                                   \
      PRIMEKV_TILE_DP("tdpbssd", c, a, b); \
  } while (0)
  PRIMEKV_TILE_LOAD(2, q, act_stride);
  PRIMEKV_TILE_LOAD(4, pq, row64);
  PRIMEKV_TILE_ZERO(0);
  PRIMEKV_DP(0, 2, 4);
  for (int64_t g = 0; g < groups; ++g) {
    // Group g's products out of its tiles, then group g + 1 into the other set.
    const int8_t* qn = q + (g + 1) * kStep;
    const uint8_t* pn = pq + (g + 1) * kStep;
    if (g % 2 == 0) {
      PRIMEKV_TILE_STORE_1K(0, c);
      if (g + 1 < groups) {
        PRIMEKV_TILE_LOAD(3, qn, act_stride);
        PRIMEKV_TILE_LOAD(5, pn, row64);
        PRIMEKV_TILE_ZERO(1);
        PRIMEKV_DP(1, 3, 5);
      }
    } else {
      PRIMEKV_TILE_STORE_1K(1, c);
      if (g + 1 < groups) {
        PRIMEKV_TILE_LOAD(2, qn, act_stride);
        PRIMEKV_TILE_LOAD(4, pn, row64);
        PRIMEKV_TILE_ZERO(0);
        PRIMEKV_DP(0, 2, 4);
      }
    }
    const __m512 dw = _mm512_loadu_ps(ws + g * kPanelRows);
    const __m512 mw = F::kMins ? _mm512_loadu_ps(wm + g * kPanelRows) : _mm512_setzero_ps();
    const float* dg = d + g * kAmxTokens;
    const int32_t* og = off + g * kAmxTokens;
    const float* mg = ms + g * kAmxTokens;
#pragma GCC unroll 16
    for (int t = 0; t < kAmxTokens; ++t) {
      __m512i dot = _mm512_load_si512(c + t * kPanelRows);
      if constexpr (F::kOffset) dot = _mm512_add_epi32(dot, _mm512_set1_epi32(og[t]));
      const __m512 s = _mm512_mul_ps(dw, _mm512_set1_ps(dg[t]));
      acc[t] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(dot), s, acc[t]);
      if constexpr (F::kMins) acc[t] = _mm512_fnmadd_ps(mw, _mm512_set1_ps(mg[t]), acc[t]);
    }
  }
#undef PRIMEKV_DP
  const auto mask = static_cast<__mmask16>((1u << rows) - 1);
#pragma GCC unroll 16
  for (int t = 0; t < kAmxTokens; ++t) {
    if (t < tokens) _mm512_mask_storeu_ps(out + t * ldo, mask, acc[t]);
  }
}

#undef PRIMEKV_TILE_LOAD
#undef PRIMEKV_TILE_STORE_1K
#undef PRIMEKV_TILE_ZERO
#undef PRIMEKV_TILE_DP

// Q8_0 and Q4_0: below 16 tokens the AVX-512 VNNI kernels; from 16 on, whole groups of 16
// tokens on tiles and the rest as GemmPacked does it.
template <class W>
void GemmAmx(const uint8_t* w, size_t row_bytes, int64_t rows, const Q8Rows& a, float* out,
             int64_t ldo) {
  if (a.rows < kPackMinTokens) return Gemm<W>(w, row_bytes, rows, a, out, ldo);
  thread_local PackedPanel panel;
  thread_local AmxActs<kQ8Block> acts;
  const int64_t blocks = a.blocks();
  const int64_t token_groups = a.rows / kAmxTokens;
  PackAmxActs<AmxOffsetFormat>(a, token_groups, W::kOffsetShift, acts);
  for (int64_t r0 = 0; r0 < rows; r0 += kPanelRows) {
    const int rn = static_cast<int>(rows - r0 < kPanelRows ? rows - r0 : kPanelRows);
    PackPanel<W>(w + static_cast<size_t>(r0) * row_bytes, row_bytes, rn, blocks, panel);
    ConfigureTiles<kQ8Block>();
    for (int64_t tg = 0; tg < token_groups; ++tg) {
      AmxTile<AmxOffsetFormat>(panel.q.data(), panel.d.data(), nullptr, blocks, acts, tg, rn,
                               kAmxTokens, out + tg * kAmxTokens * ldo + r0, ldo);
    }
    ReleaseTiles();
    int64_t t0 = token_groups * kAmxTokens;
    for (; t0 + 4 <= a.rows; t0 += 4) {
      PanelTile<4>(panel, blocks, W::kOffsetShift, a, t0, rn, out + t0 * ldo + r0, ldo);
    }
    for (; t0 < a.rows; ++t0) {
      PanelTile<1>(panel, blocks, W::kOffsetShift, a, t0, rn, out + t0 * ldo + r0, ldo);
    }
  }
}

// A K-quant panel: 16 rows' unpacked quants as a tile's second operand, and per group each row's
// scale and minimum (0 for missing rows).
struct KPanel {
  std::vector<int8_t> q;     // [group][G / 4][16 rows][4]
  std::vector<float> scale;  // [group][16 rows]
  std::vector<float> min;    // [group][16 rows]
};

template <GgmlType kType>
void PackKPanel(const uint8_t* w, size_t row_bytes, int rows, int64_t cols, KPanel& out) {
  constexpr int kG = KQuantGroup(kType), kSuper = 256;
  const QuantsFn quants = Avx2Quants(kType);
  const UnpackFn scales = ScalarScales(kType), unpack = ScalarUnpack(kType);
  const int block_bytes = BlockBytes(kType);
  const int64_t groups = cols / kG;
  const auto n = static_cast<size_t>(groups * kPanelRows);
  if (out.q.size() < n * kG) out.q.resize(n * kG);
  if (out.scale.size() < n) out.scale.resize(n), out.min.resize(n);
  if (rows < kPanelRows) {
    std::memset(out.q.data(), 0, n * kG);
    std::fill_n(out.scale.data(), n, 0.0f);
    std::fill_n(out.min.data(), n, 0.0f);
  }
  Unpacked u;
  for (int r = 0; r < rows; ++r) {
    const uint8_t* row = w + static_cast<size_t>(r) * row_bytes;
    for (int64_t s = 0; s < cols / kSuper; ++s) {
      const uint8_t* block = row + s * block_bytes;
      if (quants != nullptr) {
        quants(block, u.q);
        scales(block, u);
      } else {
        unpack(block, u);
      }
      for (int j = 0; j < kSuper / kG; ++j) {
        const int64_t g = s * (kSuper / kG) + j;
        int8_t* dst = out.q.data() + g * kPanelRows * kG + r * 4;
        for (int k = 0; k < kG / 4; ++k) std::memcpy(dst + k * 64, u.q + j * kG + 4 * k, 4);
        out.scale[g * kPanelRows + r] = u.scale[j * kG / 16];
        out.min[g * kPanelRows + r] = u.min[j * kG / 16];
      }
    }
  }
}

// K-quants from 16 tokens on (FindBatchQ8Gemm): every token on tiles, the last group padded with
// zero activations.
template <GgmlType kType>
void GemmAmxK(const uint8_t* w, size_t row_bytes, int64_t rows, const Q8Rows& a, float* out,
              int64_t ldo) {
  using F = AmxKFormat<kType>;
  thread_local KPanel panel;
  thread_local AmxActs<F::kG> acts;
  const int64_t groups = a.cols / F::kG;
  const int64_t token_groups = (a.rows + kAmxTokens - 1) / kAmxTokens;
  PackAmxActs<F>(a, token_groups, 0, acts);
  for (int64_t r0 = 0; r0 < rows; r0 += kPanelRows) {
    const int rn = static_cast<int>(rows - r0 < kPanelRows ? rows - r0 : kPanelRows);
    PackKPanel<kType>(w + static_cast<size_t>(r0) * row_bytes, row_bytes, rn, a.cols, panel);
    ConfigureTiles<F::kG>();
    for (int64_t tg = 0; tg < token_groups; ++tg) {
      const auto tokens = static_cast<int>(std::min<int64_t>(kAmxTokens, a.rows - tg * kAmxTokens));
      AmxTile<F>(panel.q.data(), panel.scale.data(), panel.min.data(), groups, acts, tg, rn, tokens,
                 out + tg * kAmxTokens * ldo + r0, ldo);
    }
    ReleaseTiles();
  }
}

}  // namespace
}  // namespace primekv::quant::internal

#include "primekv/quant/simd/target_end.inc"

namespace primekv::quant::internal {

const Int8Kernels* Avx512VnniInt8Kernels() {
  static const Int8Kernels table{Isa::kAvx512Vnni, QuantizeQ8, Gemm<Q8_0Weights>,
                                 Gemm<Q4_0Weights>};
  return &table;
}

const Int8Kernels* AmxInt8Kernels() {
  static const Int8Kernels table{Isa::kAmxInt8,
                                 QuantizeQ8,
                                 GemmAmx<Q8_0Weights>,
                                 GemmAmx<Q4_0Weights>,
                                 GemmAmxK<GgmlType::kQ3_K>,
                                 GemmAmxK<GgmlType::kQ4_K>,
                                 GemmAmxK<GgmlType::kQ5_K>,
                                 GemmAmxK<GgmlType::kQ6_K>,
                                 GemmAmxK<GgmlType::kIQ4_XS>};
  return &table;
}

}  // namespace primekv::quant::internal

#endif  // x86-64
