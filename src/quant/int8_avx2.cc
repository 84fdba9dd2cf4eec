// AVX2 integer-dot kernels (no VNNI). vpmaddubsw needs one unsigned operand: Q4_0's nibbles
// (w + 8) are unsigned already; Q8_0's products are formed as |w| * (a with w's sign) (vpsignb),
// which keeps every pair sum within int16 (|w| <= 128, |a| <= 127). vpmaddwd with ones then adds
// pairs to int32.
//
// Below 16 tokens (decode): a stream kernel per type (StreamDecode), one 32-element block per
// ymm. From 16 tokens on (prefill): 8 weight rows are repacked so that one ymm holds four
// consecutive weights of each row (lane = row), and a token's four activation bytes, broadcast,
// advance all 8 rows at once (GemmPacked); the conversion and scaling then happen once per 8
// rows, token and block. Q4_0 even adds a block's eight vpmaddubsw results in int16 (each lane
// at most 16 * 15 * 127 = 30480) and widens once per block.
#include <cstdint>
#include <cstring>
#include <type_traits>
#include <utility>
#include <vector>

#include "quant/int8_gemm.h"
#include "quant/kernels.h"

#if defined(__x86_64__)
#include <immintrin.h>

#include "primekv/quant/simd/target_avx2_begin.inc"

namespace primekv::quant::internal {
namespace {

// 8 rows x 32 bytes (one block of each) as 8 vectors, vector kk = dword kk of every row.
void Transpose8x8Dwords(const __m256i (&r)[8], __m256i (&out)[8]) {
  __m256i t[8], u[8];
  for (int i = 0; i < 8; i += 2) {
    t[i] = _mm256_unpacklo_epi32(r[i], r[i + 1]);
    t[i + 1] = _mm256_unpackhi_epi32(r[i], r[i + 1]);
  }
  for (int i = 0; i < 8; i += 4) {
    u[i] = _mm256_unpacklo_epi64(t[i], t[i + 2]);          // dwords 0 | 4 of rows i .. i + 3
    u[i + 1] = _mm256_unpackhi_epi64(t[i], t[i + 2]);      // 1 | 5
    u[i + 2] = _mm256_unpacklo_epi64(t[i + 1], t[i + 3]);  // 2 | 6
    u[i + 3] = _mm256_unpackhi_epi64(t[i + 1], t[i + 3]);  // 3 | 7
  }
  for (int c = 0; c < 4; ++c) {
    out[c] = _mm256_permute2x128_si256(u[c], u[c + 4], 0x20);
    out[c + 4] = _mm256_permute2x128_si256(u[c], u[c + 4], 0x31);
  }
}

// One block's 32 weights in element order: Q8_0 as signed bytes, Q4_0 as its nibbles (w + 8).
struct Q8_0Panel {
  static constexpr int kBytes = kQ8_0BlockBytes;
  static __m256i Block(const uint8_t* p) {
    return _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p + 2));
  }
};
struct Q4_0Panel {
  static constexpr int kBytes = kQ4_0BlockBytes;
  static __m256i Block(const uint8_t* p) {
    const __m128i bytes = _mm_loadu_si128(reinterpret_cast<const __m128i*>(p + 2));
    return _mm256_and_si256(_mm256_set_m128i(_mm_srli_epi16(bytes, 4), bytes),
                            _mm256_set1_epi8(0x0F));
  }
};

constexpr int kPanelRows = 8;
// Tokens per tile: 2 x 4 accumulators and the weight vectors fit the 16 ymm registers (5 tokens
// were as fast for Q8_0 and 6% slower for Q4_0, 6 tokens 10% slower for Q4_0; Zen 5, 1 thread).
constexpr int kPanelTokens = 4;
struct PackedPanel {
  std::vector<uint8_t> q;  // [blocks][8 dwords][8 rows][4 bytes]
  std::vector<float> d;    // [blocks][8 rows]: weight scales, 0 for missing rows
};

template <class W>
void PackPanel(const uint8_t* w, size_t row_bytes, int rows, int64_t blocks, PackedPanel& out) {
  if (out.q.size() < static_cast<size_t>(blocks) * 256) out.q.resize(blocks * 256);
  if (out.d.size() < static_cast<size_t>(blocks) * kPanelRows) out.d.resize(blocks * kPanelRows);
  for (int64_t b = 0; b < blocks; ++b) {
    __m256i r[8], t[8];
    for (int i = 0; i < kPanelRows; ++i) {
      const uint8_t* p = w + static_cast<size_t>(i) * row_bytes + b * W::kBytes;
      r[i] = i < rows ? W::Block(p) : _mm256_setzero_si256();
      out.d[b * kPanelRows + i] = i < rows ? _cvtsh_ss(LoadU16(p)) : 0.0f;
    }
    Transpose8x8Dwords(r, t);
    uint8_t* dst = out.q.data() + b * 256;
    for (int kk = 0; kk < 8; ++kk)
      _mm256_storeu_si256(reinterpret_cast<__m256i*>(dst + kk * 32), t[kk]);
  }
}

int32_t LoadI32(const int8_t* p) {
  int32_t v;
  std::memcpy(&v, p, sizeof(v));
  return v;
}

// kTokens tokens against one packed panel over all blocks; per row and token the float result is
// sum over blocks, in order, of fma(float(int32 dot), d_w * d_a, acc): Q8PanelTwin's bits (and the
// AVX-512 VNNI panels').
template <class W, int kTokens>
void PanelTile(const PackedPanel& panel, int64_t blocks, const Q8Rows& a, int64_t t0, int rows,
               float* out, int64_t ldo) {
  const __m256i ones = _mm256_set1_epi16(1);
  __m256 acc[kTokens];
  for (int t = 0; t < kTokens; ++t) acc[t] = _mm256_setzero_ps();
  const int8_t* q = a.q + t0 * a.stride;
  const float* d = a.d + t0 * a.block_stride;
  const int32_t* sum = a.sum + t0 * a.block_stride;
  for (int64_t b = 0; b < blocks; ++b) {
    const uint8_t* pq = panel.q.data() + b * 256;
    __m256i dot[kTokens];
    if constexpr (std::is_same_v<W, Q4_0Panel>) {
      __m256i pairs[kTokens];
      for (int t = 0; t < kTokens; ++t) pairs[t] = _mm256_setzero_si256();
      for (int kk = 0; kk < 8; ++kk) {
        const __m256i wv = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(pq + kk * 32));
        for (int t = 0; t < kTokens; ++t) {
          const __m256i x = _mm256_set1_epi32(LoadI32(q + t * a.stride + b * kQ8Block + 4 * kk));
          pairs[t] = _mm256_add_epi16(pairs[t], _mm256_maddubs_epi16(wv, x));
        }
      }
      for (int t = 0; t < kTokens; ++t) {
        dot[t] = _mm256_add_epi32(_mm256_madd_epi16(pairs[t], ones),
                                  _mm256_set1_epi32(-8 * sum[t * a.block_stride + b]));
      }
    } else {
      for (int t = 0; t < kTokens; ++t) dot[t] = _mm256_setzero_si256();
      for (int kk = 0; kk < 8; ++kk) {
        const __m256i wv = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(pq + kk * 32));
        const __m256i aw = _mm256_abs_epi8(wv);
        for (int t = 0; t < kTokens; ++t) {
          const __m256i x = _mm256_set1_epi32(LoadI32(q + t * a.stride + b * kQ8Block + 4 * kk));
          dot[t] = _mm256_add_epi32(
              dot[t], _mm256_madd_epi16(_mm256_maddubs_epi16(aw, _mm256_sign_epi8(x, wv)), ones));
        }
      }
    }
    const __m256 dw = _mm256_loadu_ps(panel.d.data() + b * kPanelRows);
    for (int t = 0; t < kTokens; ++t) {
      acc[t] =
          _mm256_fmadd_ps(_mm256_cvtepi32_ps(dot[t]),
                          _mm256_mul_ps(dw, _mm256_set1_ps(d[t * a.block_stride + b])), acc[t]);
    }
  }
  if (rows == kPanelRows) {
    for (int t = 0; t < kTokens; ++t) _mm256_storeu_ps(out + t * ldo, acc[t]);
  } else {
    const __m256i mask =
        _mm256_cmpgt_epi32(_mm256_set1_epi32(rows), _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7));
    for (int t = 0; t < kTokens; ++t) _mm256_maskstore_ps(out + t * ldo, mask, acc[t]);
  }
}

// Each 8-row panel is packed once per call and shared by every token.
template <class W>
void GemmPacked(const uint8_t* w, size_t row_bytes, int64_t rows, const Q8Rows& a, float* out,
                int64_t ldo) {
  thread_local PackedPanel panel;
  const int64_t blocks = a.blocks();
  for (int64_t r0 = 0; r0 < rows; r0 += kPanelRows) {
    const int rn = static_cast<int>(rows - r0 < kPanelRows ? rows - r0 : kPanelRows);
    PackPanel<W>(w + static_cast<size_t>(r0) * row_bytes, row_bytes, rn, blocks, panel);
    int64_t t0 = 0;
    for (; t0 + kPanelTokens <= a.rows; t0 += kPanelTokens)
      PanelTile<W, kPanelTokens>(panel, blocks, a, t0, rn, out + t0 * ldo + r0, ldo);
    if (t0 < a.rows) {
      WithCount<kPanelTokens>(static_cast<int>(a.rows - t0), [&](auto kTokens) {
        PanelTile<W, kTokens()>(panel, blocks, a, t0, rn, out + t0 * ldo + r0, ldo);
      });
    }
  }
}

// Decode (up to kStreamTokens tokens): one row at a time, even and odd blocks into two
// accumulators per token (one accumulator made every block wait for the previous block's FMA:
// four cycles per block), a prefetch kPrefetchAhead bytes ahead once per 64 bytes or so.
// Q8_0Avx2DecodeTwin (int8_scalar.cc) does the same arithmetic in the same order (Q4_0: its own
// kernel below).
constexpr int kPrefetchAhead = 8192;
constexpr int kDecodeMaxTokens = 15;  // below 16 tokens, every token gets its decode bits

// The lanes as halves, pairs and the last two (the twins' order).
float SumLanes(__m256 v) {
  const __m128 s4 = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  const __m128 s2 = _mm_add_ps(s4, _mm_movehl_ps(s4, s4));
  return _mm_cvtss_f32(_mm_add_ss(s2, _mm_movehdup_ps(s2)));
}

// A block's int32 lanes: lane l = sum of w * q over elements 4l .. 4l + 3.
struct Q8_0Decode {
  static constexpr int kBytes = kQ8_0BlockBytes;
  static constexpr int kStep = 2;  // blocks per prefetch
  struct Block {
    __m256i w, abs;
  };
  static Block Load(const uint8_t* p) {
    const __m256i w = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p + 2));
    return {w, _mm256_abs_epi8(w)};
  }
  static __m256i Dot(const Block& b, __m256i q, int32_t) {
    return _mm256_madd_epi16(_mm256_maddubs_epi16(b.abs, _mm256_sign_epi8(q, b.w)),
                             _mm256_set1_epi16(1));
  }
};

// Q4_0 decode: two blocks per ymm. Per call, each token's activations are laid out once in
// pairs of blocks to match (Q4Pair): the low nibbles (elements 0-15) of blocks 2p and 2p + 1 face
// one vector, the high nibbles (16-31) another, and the two vpmaddubsw results add in int16 (each
// lane at most 4 * 15 * 127). Lanes 0-3 then hold block 2p's int32 sums, lanes 4-7 block 2p + 1's,
// with -8 * sum in lanes 0 and 4 from the layout, so a pair costs per token two vpmaddubsw, two
// adds, a vpmaddwd, a conversion, a product and an FMA; the nibble unpacking and the two fp16
// scales are shared by the tokens. Even and odd pairs go to two accumulators.
// Q4_0Avx2DecodeTwin (int8_scalar.cc) does the same arithmetic in the same order.
struct alignas(32) Q4Pair {
  int8_t lo[32];    // elements 0-15 of block 2p, then of block 2p + 1
  int8_t hi[32];    // elements 16-31
  int32_t init[8];  // lanes 0 and 4: -8 * sum of blocks 2p and 2p + 1
  float scale[8];   // lanes 0-3: d of block 2p; 4-7: of block 2p + 1
};
static_assert(sizeof(Q4Pair) == 128);

// A missing last block reads as zeros: Q8Rows pads q to 64 bytes and d, sum to an even count.
void PrepareQ4Pairs(const Q8Rows& a, int64_t pairs, Q4Pair* out) {
  for (int64_t t = 0; t < a.rows; ++t) {
    for (int64_t p = 0; p < pairs; ++p) {
      const int8_t* q = a.q + t * a.stride + 2 * p * kQ8Block;
      const auto half = [&](int offset) {
        return _mm_loadu_si128(reinterpret_cast<const __m128i*>(q + offset));
      };
      Q4Pair& o = out[t * pairs + p];
      _mm256_store_si256(reinterpret_cast<__m256i*>(o.lo), _mm256_set_m128i(half(32), half(0)));
      _mm256_store_si256(reinterpret_cast<__m256i*>(o.hi), _mm256_set_m128i(half(48), half(16)));
      const int32_t* sum = a.sum + t * a.block_stride + 2 * p;
      const float* d = a.d + t * a.block_stride + 2 * p;
      _mm256_store_si256(reinterpret_cast<__m256i*>(o.init),
                         _mm256_setr_epi32(-8 * sum[0], 0, 0, 0, -8 * sum[1], 0, 0, 0));
      _mm256_store_ps(o.scale, _mm256_setr_ps(d[0], d[0], d[0], d[0], d[1], d[1], d[1], d[1]));
    }
  }
}

template <int kTokens>
void StreamQ4_0(const uint8_t* w, size_t row_bytes, int64_t rows, int64_t blocks,
                const Q4Pair* acts, int64_t pairs, float* out, int64_t ldo) {
  const __m256i low = _mm256_set1_epi8(0x0F);
  const __m256i ones = _mm256_set1_epi16(1);
  const __m256i spread = _mm256_setr_epi32(0, 0, 0, 0, 1, 1, 1, 1);
  const int64_t full = blocks / 2;
  for (int64_t r = 0; r < rows; ++r) {
    const uint8_t* row = w + static_cast<size_t>(r) * row_bytes;
    __m256 acc[2][kTokens];
    for (int k = 0; k < 2; ++k)
      for (int t = 0; t < kTokens; ++t) acc[k][t] = _mm256_setzero_ps();
    // Pair p into accumulator k = p % 2 (a constant here: a runtime index kept acc in memory).
    const auto step = [&](auto k, int64_t p, __m256i bytes, uint32_t scale_bits) {
      const __m256i wl = _mm256_and_si256(bytes, low);
      const __m256i wh = _mm256_and_si256(_mm256_srli_epi16(bytes, 4), low);
      const __m256 ws = _mm256_permutevar8x32_ps(
          _mm256_castps128_ps256(_mm_cvtph_ps(_mm_cvtsi32_si128(static_cast<int>(scale_bits)))),
          spread);
      for (int t = 0; t < kTokens; ++t) {
        const Q4Pair& x = acts[t * pairs + p];
        const __m256i sums = _mm256_add_epi16(
            _mm256_maddubs_epi16(wl, _mm256_load_si256(reinterpret_cast<const __m256i*>(x.lo))),
            _mm256_maddubs_epi16(wh, _mm256_load_si256(reinterpret_cast<const __m256i*>(x.hi))));
        const __m256i dot =
            _mm256_add_epi32(_mm256_madd_epi16(sums, ones),
                             _mm256_load_si256(reinterpret_cast<const __m256i*>(x.init)));
        acc[k()][t] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(dot),
                                      _mm256_mul_ps(ws, _mm256_load_ps(x.scale)), acc[k()][t]);
      }
    };
    const auto full_step = [&](auto k, int64_t p) {
      const uint8_t* pb = row + 2 * p * kQ4_0BlockBytes;
      const __m256i bytes =
          _mm256_loadu2_m128i(reinterpret_cast<const __m128i*>(pb + kQ4_0BlockBytes + 2),
                              reinterpret_cast<const __m128i*>(pb + 2));
      step(k, p, bytes, uint32_t{LoadU16(pb)} | uint32_t{LoadU16(pb + kQ4_0BlockBytes)} << 16);
    };
    constexpr std::integral_constant<int, 0> kEven{};
    constexpr std::integral_constant<int, 1> kOdd{};
    int64_t p = 0;
    for (; p + 2 <= full; p += 2) {  // 72 bytes: one prefetch
      _mm_prefetch(reinterpret_cast<const char*>(row + 2 * p * kQ4_0BlockBytes + kPrefetchAhead),
                   _MM_HINT_NTA);
      full_step(kEven, p);
      full_step(kOdd, p + 1);
    }
    if (p < full) full_step(kEven, p++);
    if (blocks % 2 != 0) {  // a last block alone: the second half's lanes add +0
      const uint8_t* pb = row + 2 * p * kQ4_0BlockBytes;
      const __m256i bytes =
          _mm256_zextsi128_si256(_mm_loadu_si128(reinterpret_cast<const __m128i*>(pb + 2)));
      if (p % 2 == 0) {
        step(kEven, p, bytes, LoadU16(pb));
      } else {
        step(kOdd, p, bytes, LoadU16(pb));
      }
    }
    for (int t = 0; t < kTokens; ++t)
      out[t * ldo + r] = SumLanes(_mm256_add_ps(acc[0][t], acc[1][t]));
  }
}

// Below 16 tokens: the activations laid out once, then the stream kernel in ForStreamChunks's
// chunks.
void DecodeQ4_0(const uint8_t* w, size_t row_bytes, int64_t rows, const Q8Rows& a, float* out,
                int64_t ldo) {
  thread_local std::vector<Q4Pair> acts;
  const int64_t blocks = a.blocks();
  const int64_t pairs = (blocks + 1) / 2;
  if (acts.size() < static_cast<size_t>(a.rows * pairs)) acts.resize(a.rows * pairs);
  PrepareQ4Pairs(a, pairs, acts.data());
  const auto run = [&](int64_t r0, int64_t rn, int64_t t0, int64_t tn) {
    WithCount<kStreamTokens>(static_cast<int>(tn), [&](auto kTokens) {
      StreamQ4_0<kTokens()>(w + static_cast<size_t>(r0) * row_bytes, row_bytes, rn, blocks,
                            acts.data() + t0 * pairs, pairs, out + t0 * ldo + r0, ldo);
    });
  };
  ForStreamChunks(rows, a.rows, run);
}

template <class D, int kTokens>
void StreamDecode(const uint8_t* w, size_t row_bytes, int64_t rows, const Q8Rows& a, float* out,
                  int64_t ldo) {
  const int64_t blocks = a.blocks();
  for (int64_t r = 0; r < rows; ++r) {
    const uint8_t* p = w + static_cast<size_t>(r) * row_bytes;
    __m256 acc[2][kTokens];
    for (int k = 0; k < 2; ++k)
      for (int t = 0; t < kTokens; ++t) acc[k][t] = _mm256_setzero_ps();
    // Block b into accumulator k = b % 2 (a constant here: a runtime index kept acc in memory).
    const auto step = [&](auto k, int64_t b) {
      const uint8_t* pb = p + b * D::kBytes;
      const typename D::Block wb = D::Load(pb);
      const float ws = _cvtsh_ss(LoadU16(pb));
      for (int t = 0; t < kTokens; ++t) {
        const __m256i q =
            _mm256_loadu_si256(reinterpret_cast<const __m256i*>(a.q + t * a.stride + b * kQ8Block));
        const __m256i dot = D::Dot(wb, q, a.sum[t * a.block_stride + b]);
        acc[k()][t] = _mm256_fmadd_ps(
            _mm256_cvtepi32_ps(dot), _mm256_set1_ps(ws * a.d[t * a.block_stride + b]), acc[k()][t]);
      }
    };
    constexpr std::integral_constant<int, 0> kEven{};
    constexpr std::integral_constant<int, 1> kOdd{};
    int64_t b = 0;
    for (; b + D::kStep <= blocks; b += D::kStep) {
      _mm_prefetch(reinterpret_cast<const char*>(p + b * D::kBytes + kPrefetchAhead), _MM_HINT_NTA);
      [&]<int... kI>(std::integer_sequence<int, kI...>) {
        ((kI % 2 == 0 ? step(kEven, b + kI) : step(kOdd, b + kI)), ...);
      }
      (std::make_integer_sequence<int, D::kStep>{});
    }
    for (; b < blocks; ++b) {  // kStep is even, so b % 2 is as in the loop
      if (b % 2 == 0) {
        step(kEven, b);
      } else {
        step(kOdd, b);
      }
    }
    for (int t = 0; t < kTokens; ++t)
      out[t * ldo + r] = SumLanes(_mm256_add_ps(acc[0][t], acc[1][t]));
  }
}

// Below 16 tokens: the stream kernel in ForStreamChunks's chunks.
template <class D>
void Decode(const uint8_t* w, size_t row_bytes, int64_t rows, const Q8Rows& a, float* out,
            int64_t ldo) {
  const auto run = [&](int64_t r0, int64_t rn, int64_t t0, int64_t tn) {
    Q8Rows part = a;
    part.rows = tn;
    part.q = a.q + t0 * a.stride;
    part.d = a.d + t0 * a.block_stride;
    part.sum = a.sum + t0 * a.block_stride;
    WithCount<kStreamTokens>(static_cast<int>(tn), [&](auto kTokens) {
      StreamDecode<D, kTokens()>(w + static_cast<size_t>(r0) * row_bytes, row_bytes, rn, part,
                                 out + t0 * ldo + r0, ldo);
    });
  };
  ForStreamChunks(rows, a.rows, run);
}

// Bit-identical to the scalar quantiser: the same max, scale, reciprocal and rounding (to
// nearest even, as vcvtps2dq under the default rounding mode).
void QuantizeQ8(const float* x, int64_t n, int8_t* q, float* d, int32_t* sum) {
  const __m256 sign = _mm256_set1_ps(-0.0f);
  const __m256i order = _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7);
  for (int64_t b = 0; b < n / kQ8Block; ++b, x += kQ8Block, q += kQ8Block) {
    __m256 v[4];
    for (int i = 0; i < 4; ++i) v[i] = _mm256_loadu_ps(x + 8 * i);
    const __m256 m8 =
        _mm256_max_ps(_mm256_max_ps(_mm256_andnot_ps(sign, v[0]), _mm256_andnot_ps(sign, v[1])),
                      _mm256_max_ps(_mm256_andnot_ps(sign, v[2]), _mm256_andnot_ps(sign, v[3])));
    __m128 m4 = _mm_max_ps(_mm256_castps256_ps128(m8), _mm256_extractf128_ps(m8, 1));
    m4 = _mm_max_ps(m4, _mm_movehl_ps(m4, m4));
    const float amax = _mm_cvtss_f32(_mm_max_ss(m4, _mm_movehdup_ps(m4)));
    const float scale = amax / 127.0f;
    const float inv = scale > 0.0f ? 1.0f / scale : 0.0f;
    const __m256 vinv = _mm256_set1_ps(inv);
    __m256i i[4];
    for (int k = 0; k < 4; ++k) i[k] = _mm256_cvtps_epi32(_mm256_mul_ps(v[k], vinv));
    // The packs work per 128-bit lane: their dwords hold elements 0-3 of i[0], i[1], i[2], i[3],
    // then elements 4-7 of each; the permute puts them back in order.
    const __m256i bytes =
        _mm256_packs_epi16(_mm256_packs_epi32(i[0], i[1]), _mm256_packs_epi32(i[2], i[3]));
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(q), _mm256_permutevar8x32_epi32(bytes, order));
    const __m256i s8 = _mm256_add_epi32(_mm256_add_epi32(i[0], i[1]), _mm256_add_epi32(i[2], i[3]));
    __m128i s4 = _mm_add_epi32(_mm256_castsi256_si128(s8), _mm256_extracti128_si256(s8, 1));
    s4 = _mm_add_epi32(s4, _mm_unpackhi_epi64(s4, s4));
    s4 = _mm_add_epi32(s4, _mm_shuffle_epi32(s4, 1));
    d[b] = RoundScaleToF16(scale);
    sum[b] = _mm_cvtsi128_si32(s4);
  }
}

void GemmQ8_0(const uint8_t* w, size_t row_bytes, int64_t rows, const Q8Rows& a, float* out,
              int64_t ldo) {
  if (a.rows <= kDecodeMaxTokens) return Decode<Q8_0Decode>(w, row_bytes, rows, a, out, ldo);
  GemmPacked<Q8_0Panel>(w, row_bytes, rows, a, out, ldo);
}

void GemmQ4_0(const uint8_t* w, size_t row_bytes, int64_t rows, const Q8Rows& a, float* out,
              int64_t ldo) {
  if (a.rows <= kDecodeMaxTokens) return DecodeQ4_0(w, row_bytes, rows, a, out, ldo);
  GemmPacked<Q4_0Panel>(w, row_bytes, rows, a, out, ldo);
}

}  // namespace
}  // namespace primekv::quant::internal

#include "primekv/quant/simd/target_end.inc"

namespace primekv::quant::internal {

const Int8Kernels* Avx2Int8Kernels() {
  static const Int8Kernels table{Isa::kAvx2, QuantizeQ8, GemmQ8_0, GemmQ4_0};
  return &table;
}

}  // namespace primekv::quant::internal

#endif  // x86-64
