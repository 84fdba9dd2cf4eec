// AVX2 integer-dot kernels (no VNNI): one 32-element block per ymm. vpmaddubsw needs one
// unsigned operand, so each product is formed as |w| * (a with w's sign) (vpsignb), which keeps
// every pair sum within int16 (|w| <= 128, |a| <= 127); vpmaddwd with ones then adds pairs to
// int32. A 2 rows x 3 tokens tile fits the 16 ymm registers (batches from 16 tokens). Below 16
// tokens (decode), a stream kernel per type (StreamDecode).
#include <cstdint>
#include <cstring>
#include <type_traits>
#include <utility>

#include "quant/int8_gemm.h"
#include "quant/kernels.h"

#if defined(__x86_64__)
#include <immintrin.h>

#include "quant/target_avx2_begin.inc"

namespace primekv::quant::internal {
namespace {

constexpr int kTileRows = 2;
constexpr int kTileTokens = 3;

struct Q8_0Weights {
  static constexpr int kBytes = kQ8_0BlockBytes;
  static __m256i Signed(const uint8_t* p) {
    return _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p + 2));
  }
};

struct Q4_0Weights {
  static constexpr int kBytes = kQ4_0BlockBytes;
  static __m256i Signed(const uint8_t* p) {
    const __m128i bytes = _mm_loadu_si128(reinterpret_cast<const __m128i*>(p + 2));
    const __m128i low = _mm_set1_epi8(0x0F);
    const __m256i nibbles =
        _mm256_inserti128_si256(_mm256_castsi128_si256(_mm_and_si128(bytes, low)),
                                _mm_and_si128(_mm_srli_epi16(bytes, 4), low), 1);
    return _mm256_sub_epi8(nibbles, _mm256_set1_epi8(8));
  }
};

template <class W, int kRows, int kTokens>
void Micro(const uint8_t* w, size_t row_bytes, const Q8Rows& a, int64_t t0, float* out,
           int64_t ldo) {
  const __m256i ones = _mm256_set1_epi16(1);
  const int64_t blocks = a.blocks();
  __m256 acc[kRows][kTokens];
  for (int r = 0; r < kRows; ++r)
    for (int t = 0; t < kTokens; ++t) acc[r][t] = _mm256_setzero_ps();
  for (int64_t b = 0; b < blocks; ++b) {
    __m256i wq[kRows], wabs[kRows];
    float ws[kRows];
    for (int r = 0; r < kRows; ++r) {
      const uint8_t* p = w + static_cast<size_t>(r) * row_bytes + b * W::kBytes;
      wq[r] = W::Signed(p);
      wabs[r] = _mm256_abs_epi8(wq[r]);
      ws[r] = _cvtsh_ss(LoadU16(p));
    }
    for (int t = 0; t < kTokens; ++t) {
      const int64_t row = t0 + t;
      const __m256i q =
          _mm256_loadu_si256(reinterpret_cast<const __m256i*>(a.q + row * a.stride + b * kQ8Block));
      const float ad = a.d[row * a.block_stride + b];
      for (int r = 0; r < kRows; ++r) {
        const __m256i pairs = _mm256_maddubs_epi16(wabs[r], _mm256_sign_epi8(q, wq[r]));
        const __m256i dot = _mm256_madd_epi16(pairs, ones);
        acc[r][t] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(dot), _mm256_set1_ps(ws[r] * ad), acc[r][t]);
      }
    }
  }
  for (int r = 0; r < kRows; ++r) {
    for (int t = 0; t < kTokens; ++t) {
      const __m128 s4 =
          _mm_add_ps(_mm256_castps256_ps128(acc[r][t]), _mm256_extractf128_ps(acc[r][t], 1));
      const __m128 s2 = _mm_add_ps(s4, _mm_movehl_ps(s4, s4));
      out[t * ldo + r] = _mm_cvtss_f32(_mm_add_ss(s2, _mm_movehdup_ps(s2)));
    }
  }
}

template <class W, int kRows>
void MicroTokens(const uint8_t* w, size_t row_bytes, const Q8Rows& a, int64_t t0, int tokens,
                 float* out, int64_t ldo) {
  WithCount<kTileTokens>(
      tokens, [&](auto kTokens) { Micro<W, kRows, kTokens()>(w, row_bytes, a, t0, out, ldo); });
}

// Decode (up to kStreamTokens tokens): one row at a time, even and odd blocks into two
// accumulators per token (one accumulator made every block wait for the previous block's FMA:
// four cycles per block), a prefetch kPrefetchAhead bytes ahead once per 64 bytes or so.
// Q8_0Avx2DecodeTwin and Q4_0Avx2DecodeTwin (int8_scalar.cc) do the same arithmetic in the same
// order.
constexpr int kPrefetchAhead = 8192;
constexpr int kDecodeMaxTokens = 15;  // below 16 tokens, every token gets its decode bits

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

// The nibbles (w + 8, unsigned) go straight into vpmaddubsw; lane 0 then adds -8 * sum of the
// block's activations (exact: all in int32).
struct Q4_0Decode {
  static constexpr int kBytes = kQ4_0BlockBytes;
  static constexpr int kStep = 4;
  struct Block {
    __m256i nibbles;
  };
  static Block Load(const uint8_t* p) {
    const __m128i bytes = _mm_loadu_si128(reinterpret_cast<const __m128i*>(p + 2));
    return {_mm256_and_si256(_mm256_set_m128i(_mm_srli_epi16(bytes, 4), bytes),
                             _mm256_set1_epi8(0x0F))};
  }
  static __m256i Dot(const Block& b, __m256i q, int32_t sum) {
    const __m256i dot = _mm256_madd_epi16(_mm256_maddubs_epi16(b.nibbles, q), _mm256_set1_epi16(1));
    return _mm256_add_epi32(dot, _mm256_zextsi128_si256(_mm_cvtsi32_si128(-8 * sum)));
  }
};

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
      _mm_prefetch(reinterpret_cast<const char*>(p + b * D::kBytes + kPrefetchAhead), _MM_HINT_T0);
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
    for (int t = 0; t < kTokens; ++t) {
      const __m256 v = _mm256_add_ps(acc[0][t], acc[1][t]);
      const __m128 s4 = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
      const __m128 s2 = _mm_add_ps(s4, _mm_movehl_ps(s4, s4));
      out[t * ldo + r] = _mm_cvtss_f32(_mm_add_ss(s2, _mm_movehdup_ps(s2)));
    }
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

template <class W>
void Gemm(const uint8_t* w, size_t row_bytes, int64_t rows, const Q8Rows& a, float* out,
          int64_t ldo) {
  if (a.rows <= kDecodeMaxTokens) {
    return Decode<std::conditional_t<std::is_same_v<W, Q8_0Weights>, Q8_0Decode, Q4_0Decode>>(
        w, row_bytes, rows, a, out, ldo);
  }
  // Chunks of 64 tokens keep their activations in L2 while a 2-row tile stays in L1.
  for (int64_t c0 = 0; c0 < a.rows; c0 += 64) {
    const int64_t c1 = a.rows - c0 < 64 ? a.rows : c0 + 64;
    for (int64_t r0 = 0; r0 < rows; r0 += kTileRows) {
      const uint8_t* wr = w + static_cast<size_t>(r0) * row_bytes;
      for (int64_t t0 = c0; t0 < c1; t0 += kTileTokens) {
        const int tn = static_cast<int>(c1 - t0 < kTileTokens ? c1 - t0 : kTileTokens);
        float* o = out + t0 * ldo + r0;
        if (rows - r0 >= 2) {
          MicroTokens<W, 2>(wr, row_bytes, a, t0, tn, o, ldo);
        } else {
          MicroTokens<W, 1>(wr, row_bytes, a, t0, tn, o, ldo);
        }
      }
    }
  }
}

}  // namespace
}  // namespace primekv::quant::internal

#include "quant/target_end.inc"

namespace primekv::quant::internal {

// The scalar quantiser serves here: it is O(n k) against the product's O(n k rows).
const Int8Kernels* Avx2Int8Kernels() {
  static const Int8Kernels table{Isa::kAvx2, ScalarInt8Kernels().quantize, Gemm<Q8_0Weights>,
                                 Gemm<Q4_0Weights>};
  return &table;
}

}  // namespace primekv::quant::internal

#endif  // x86-64
