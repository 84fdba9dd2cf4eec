#include "primekv/attention/softmax_kernels.h"

#include <cmath>
#include <cstdint>
#include <cstring>
#include <initializer_list>

#if defined(__x86_64__)
#include <immintrin.h>
#endif

#include "primekv/quant/cpu.h"
#include "primekv/quant/quant.h"

namespace primekv::attention_internal {
namespace {

// The polynomial's constants: ln 2 split in a part exact in float and a remainder, and
// Taylor-like coefficients of e^r fitted on [-ln2/2, ln2/2].
constexpr float kLog2e = 1.44269504088896341f;
constexpr float kLn2Hi = 0.693359375f;
constexpr float kLn2Lo = -2.12194440e-4f;
constexpr float kC2 = 0.5f;
constexpr float kC3 = 1.6666665459e-1f;
constexpr float kC4 = 4.1665795894e-2f;
constexpr float kC5 = 8.3334519073e-3f;
constexpr float kC6 = 1.3981999507e-3f;
constexpr float kC7 = 1.9875691500e-4f;
constexpr float kMinX = -86.0f;  // below, the result is taken as 0 (keeps 2^n * p normal)
constexpr float kMaxX = 88.3f;

float ScalarRowMax(const float* s, int n, float init) {
  float m = init;
  for (int j = 0; j < n; ++j) m = s[j] > m ? s[j] : m;
  return m;
}

float ScalarExpSum(float* s, int n, float m) {
  float sum = 0.0f;
  for (int j = 0; j < n; ++j) {
    s[j] = ExpApprox(s[j] - m);
    sum += s[j];
  }
  return sum;
}

void ScalarScale(float* a, int n, float f) {
  for (int j = 0; j < n; ++j) a[j] *= f;
}

float Widen(float x) { return x; }
float Widen(uint16_t h) { return quant::F16ToF32(h); }

// alpha * q K^T over keys stored as float or as f16 halves: every ISA's Scores and ScoresF16
// fall back to it.
template <typename Key>
void ScalarScores(const float* q, int rows, const Key* k, int count, int d, float alpha, float* s,
                  int lds) {
  for (int r = 0; r < rows; ++r) {
    for (int j = 0; j < count; ++j) {
      float dot = 0.0f;
      for (int c = 0; c < d; ++c) dot += q[r * d + c] * Widen(k[j * d + c]);
      s[r * lds + j] = alpha * dot;
    }
  }
}

// Rows first .. first + kGroup - 1 of `base`, `stride` apart; a group cut short at n < kGroup
// rows repeats its last row, so that a kernel's loops keep constant bounds (it stores only its
// own n results).
template <int kGroup, typename T>
void GroupRows(const T* base, int first, int n, int64_t stride, const T* (&rows)[kGroup]) {
  for (int i = 0; i < kGroup; ++i) rows[i] = base + (first + (i < n ? i : n - 1)) * stride;
}

void ScalarPvF16(const float* p, int rows, int ldp, const uint16_t* v, int count, int d,
                 float* acc) {
  for (int j = 0; j < count; ++j) {
    for (int c = 0; c < d; ++c) {
      const float x = quant::F16ToF32(v[j * d + c]);
      for (int r = 0; r < rows; ++r) acc[r * d + c] += p[r * ldp + j] * x;
    }
  }
}

}  // namespace

float ExpApprox(float x) {
  if (!(x >= kMinX)) return 0.0f;  // also NaN -> 0 (never produced by finite scores)
  if (x > kMaxX) x = kMaxX;
  // Plain multiply-adds: std::fma would be a libm call in this (baseline ISA) translation unit.
  const float n = std::nearbyint(x * kLog2e);
  const float r = (x - n * kLn2Hi) - n * kLn2Lo;
  float p = kC7 * r + kC6;
  p = p * r + kC5;
  p = p * r + kC4;
  p = p * r + kC3;
  p = p * r + kC2;
  p = p * r + 1.0f;
  p = p * r + 1.0f;
  const auto e = static_cast<int32_t>(n);
  uint32_t bits;
  std::memcpy(&bits, &p, sizeof(bits));
  bits += static_cast<uint32_t>(e) << 23;
  std::memcpy(&p, &bits, sizeof(p));
  return p;
}

const SoftmaxKernels& ScalarSoftmax() {
  static const SoftmaxKernels k{"scalar",    ScalarRowMax,        ScalarExpSum,
                                ScalarScale, ScalarScores<float>, ScalarScores<uint16_t>,
                                ScalarPvF16};
  return k;
}

#if defined(__x86_64__)

}  // namespace primekv::attention_internal

// clang-format off
#include "primekv/quant/simd/target_avx2_begin.inc"
#include "primekv/quant/simd/simd_avx2.inc"
// clang-format on

namespace primekv::attention_internal::avx2 {

#include "attention/softmax_simd.inc"

namespace {

// Horizontal sums of 8 vectors, as one vector (lane j = sum of a[j]).
__m256 SumEach8(const __m256 (&a)[8]) {
  const __m256 h0 = _mm256_hadd_ps(a[0], a[1]);
  const __m256 h1 = _mm256_hadd_ps(a[2], a[3]);
  const __m256 h2 = _mm256_hadd_ps(a[4], a[5]);
  const __m256 h3 = _mm256_hadd_ps(a[6], a[7]);
  const __m256 g0 = _mm256_hadd_ps(h0, h1);  // 128-bit half i: a[0..3]'s sums over half i
  const __m256 g1 = _mm256_hadd_ps(h2, h3);
  return _mm256_add_ps(_mm256_permute2f128_ps(g0, g1, 0x20), _mm256_permute2f128_ps(g0, g1, 0x31));
}

// 8 keys at a time: one accumulator per key over d, then the 8 sums in one vector. A last group
// of fewer keys repeats its last key in the missing slots (every loop stays unrolled, in
// registers) and stores only its own.
void Scores(const float* q, int rows, const float* k, int count, int d, float alpha, float* s,
            int lds) {
  if (d % 8 != 0) return ScalarScores(q, rows, k, count, d, alpha, s, lds);
  const __m256 va = _mm256_set1_ps(alpha);
  for (int j0 = 0; j0 < count; j0 += 8) {
    const int n = count - j0 < 8 ? count - j0 : 8;
    const float* kj[8];
    GroupRows(k, j0, n, d, kj);
    for (int r = 0; r < rows; ++r) {
      const float* qr = q + static_cast<int64_t>(r) * d;
      __m256 acc[8];
      for (int jj = 0; jj < 8; ++jj) acc[jj] = _mm256_setzero_ps();
      for (int c = 0; c < d; c += 8) {
        const __m256 qv = _mm256_loadu_ps(qr + c);
        for (int jj = 0; jj < 8; ++jj)
          acc[jj] = _mm256_fmadd_ps(qv, _mm256_loadu_ps(kj[jj] + c), acc[jj]);
      }
      const __m256 v = _mm256_mul_ps(va, SumEach8(acc));
      float* out = s + static_cast<int64_t>(r) * lds + j0;
      if (n == 8) {
        _mm256_storeu_ps(out, v);
      } else {
        alignas(32) float tmp[8];
        _mm256_store_ps(tmp, v);
        for (int jj = 0; jj < n; ++jj) out[jj] = tmp[jj];
      }
    }
  }
}

}  // namespace
}  // namespace primekv::attention_internal::avx2

// clang-format off
#include "primekv/quant/simd/target_end.inc"
#include "primekv/quant/simd/target_avx512_begin.inc"
#include "primekv/quant/simd/simd_avx512.inc"
// clang-format on

namespace primekv::attention_internal::avx512 {

#include "attention/softmax_simd.inc"

namespace {

// Horizontal sums of 16 vectors, as one vector (lane j = sum of a[j]).
__m512 SumEach16(const __m512 (&a)[16]) {
  __m512 b[8], c[4];
  for (int i = 0; i < 8; ++i) {
    b[i] = _mm512_add_ps(_mm512_unpacklo_ps(a[2 * i], a[2 * i + 1]),
                         _mm512_unpackhi_ps(a[2 * i], a[2 * i + 1]));
  }
  for (int i = 0; i < 4; ++i) {
    const __m512d lo =
        _mm512_unpacklo_pd(_mm512_castps_pd(b[2 * i]), _mm512_castps_pd(b[2 * i + 1]));
    const __m512d hi =
        _mm512_unpackhi_pd(_mm512_castps_pd(b[2 * i]), _mm512_castps_pd(b[2 * i + 1]));
    c[i] = _mm512_add_ps(_mm512_castpd_ps(lo), _mm512_castpd_ps(hi));
  }
  const __m512 e0 =
      _mm512_add_ps(_mm512_shuffle_f32x4(c[0], c[1], 0x88), _mm512_shuffle_f32x4(c[0], c[1], 0xDD));
  const __m512 e1 =
      _mm512_add_ps(_mm512_shuffle_f32x4(c[2], c[3], 0x88), _mm512_shuffle_f32x4(c[2], c[3], 0xDD));
  return _mm512_add_ps(_mm512_shuffle_f32x4(e0, e1, 0x88), _mm512_shuffle_f32x4(e0, e1, 0xDD));
}

// 16 keys at a time: one accumulator per key over d, then the 16 sums in one vector.
void Scores(const float* q, int rows, const float* k, int count, int d, float alpha, float* s,
            int lds) {
  if (d % 16 != 0) return ScalarScores(q, rows, k, count, d, alpha, s, lds);
  const __m512 va = _mm512_set1_ps(alpha);
  for (int j0 = 0; j0 < count; j0 += 16) {
    const int n = count - j0 < 16 ? count - j0 : 16;
    for (int r = 0; r < rows; ++r) {
      const float* qr = q + r * d;
      __m512 acc[16];
      for (int jj = 0; jj < 16; ++jj) acc[jj] = _mm512_setzero_ps();
      for (int c = 0; c < d; c += 16) {
        const __m512 qv = _mm512_loadu_ps(qr + c);
        for (int jj = 0; jj < n; ++jj) {
          acc[jj] = _mm512_fmadd_ps(qv, _mm512_loadu_ps(k + (j0 + jj) * d + c), acc[jj]);
        }
      }
      const auto mask = static_cast<__mmask16>((1u << n) - 1);
      _mm512_mask_storeu_ps(s + r * lds + j0, mask, _mm512_mul_ps(va, SumEach16(acc)));
    }
  }
}

__m512 LoadHalf16(const uint16_t* h) {
  return _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(h)));
}

// Scores over f16 keys, 4 query rows by 4 keys at a time: each 16-wide piece of a key is
// converted once for the 4 rows, the 16 sums stay in registers (every bound is a constant) and
// are reduced together. A short last group repeats its last row or key and stores only its own.
void ScoresF16(const float* q, int rows, const uint16_t* k, int count, int d, float alpha, float* s,
               int lds) {
  if (d % 16 != 0) return ScalarScores(q, rows, k, count, d, alpha, s, lds);
  const __m512 va = _mm512_set1_ps(alpha);
  for (int r0 = 0; r0 < rows; r0 += 4) {
    const int nr = rows - r0 < 4 ? rows - r0 : 4;
    const float* qr[4];
    GroupRows(q, r0, nr, d, qr);
    for (int j0 = 0; j0 < count; j0 += 4) {
      const int nj = count - j0 < 4 ? count - j0 : 4;
      const uint16_t* kj[4];
      GroupRows(k, j0, nj, d, kj);
      __m512 acc[16];  // acc[4 * r + jj]
      for (auto& a : acc) a = _mm512_setzero_ps();
      for (int c = 0; c < d; c += 16) {
        __m512 kx[4];
        for (int jj = 0; jj < 4; ++jj) kx[jj] = LoadHalf16(kj[jj] + c);
        for (int r = 0; r < 4; ++r) {
          const __m512 qv = _mm512_loadu_ps(qr[r] + c);
          for (int jj = 0; jj < 4; ++jj)
            acc[4 * r + jj] = _mm512_fmadd_ps(qv, kx[jj], acc[4 * r + jj]);
        }
      }
      alignas(64) float sums[16];
      _mm512_store_ps(sums, _mm512_mul_ps(va, SumEach16(acc)));
      for (int r = 0; r < nr; ++r)
        for (int jj = 0; jj < nj; ++jj)
          s[static_cast<int64_t>(r0 + r) * lds + j0 + jj] = sums[4 * r + jj];
    }
  }
}

// P V over f16 values for a block of up to 4 x 16 columns from c0 (kT of them), 4 rows at a time
// in registers: each value row is converted once and added with each row's weight. A short last
// group of rows repeats its last row into an accumulator that is not stored.
template <int kT>
void PvF16Columns(const float* p, int rows, int ldp, const uint16_t* v, int count, int d, int c0,
                  float* acc) {
  for (int r0 = 0; r0 < rows; r0 += 4) {
    const int nr = rows - r0 < 4 ? rows - r0 : 4;
    const float* pr[4];
    GroupRows(p, r0, nr, ldp, pr);
    __m512 a[4 * kT];  // a[kT * r + t]
    for (int r = 0; r < 4; ++r)
      for (int t = 0; t < kT; ++t)
        a[kT * r + t] = r < nr
                            ? _mm512_loadu_ps(acc + static_cast<int64_t>(r0 + r) * d + c0 + 16 * t)
                            : _mm512_setzero_ps();
    for (int j = 0; j < count; ++j) {
      __m512 x[kT];
      for (int t = 0; t < kT; ++t) x[t] = LoadHalf16(v + static_cast<int64_t>(j) * d + c0 + 16 * t);
      for (int r = 0; r < 4; ++r) {
        const __m512 w = _mm512_set1_ps(pr[r][j]);
        for (int t = 0; t < kT; ++t) a[kT * r + t] = _mm512_fmadd_ps(w, x[t], a[kT * r + t]);
      }
    }
    for (int r = 0; r < nr; ++r)
      for (int t = 0; t < kT; ++t)
        _mm512_storeu_ps(acc + static_cast<int64_t>(r0 + r) * d + c0 + 16 * t, a[kT * r + t]);
  }
}

// P V over f16 values: 64-column blocks, then the 16-column blocks left (head_dim 96: Phi-3).
void PvF16(const float* p, int rows, int ldp, const uint16_t* v, int count, int d, float* acc) {
  if (d % 16 != 0) return ScalarPvF16(p, rows, ldp, v, count, d, acc);
  int c0 = 0;
  for (; c0 + 64 <= d; c0 += 64) PvF16Columns<4>(p, rows, ldp, v, count, d, c0, acc);
  for (; c0 < d; c0 += 16) PvF16Columns<1>(p, rows, ldp, v, count, d, c0, acc);
}

}  // namespace
}  // namespace primekv::attention_internal::avx512

#include "primekv/quant/simd/target_end.inc"

namespace primekv::attention_internal {

// Outside the target regions: building the tables must not use the ISAs' instructions.
const SoftmaxKernels* Avx2Softmax() {
  using V = simd::Avx2;
  static const SoftmaxKernels k{"avx2", avx2::RowMax<V>, avx2::ExpSum<V>, avx2::Scale<V>,
                                avx2::Scores};
  return &k;
}
const SoftmaxKernels* Avx512Softmax() {
  using V = simd::Avx512;
  static const SoftmaxKernels k{"avx512",         avx512::RowMax<V>, avx512::ExpSum<V>,
                                avx512::Scale<V>, avx512::Scores,    avx512::ScoresF16,
                                avx512::PvF16};
  return &k;
}
// The quant kernels' CPU reading: each table's target needs what DetectCpu checks for it.
bool CpuRunsSoftmax(const SoftmaxKernels& k) {
  static const quant::CpuFeatures cpu = quant::DetectCpu();
  if (&k == Avx512Softmax()) return cpu.avx512;
  if (&k == Avx2Softmax()) return cpu.avx2;
  return true;
}

#else

const SoftmaxKernels* Avx2Softmax() { return nullptr; }
const SoftmaxKernels* Avx512Softmax() { return nullptr; }
bool CpuRunsSoftmax(const SoftmaxKernels& k) { return &k == &ScalarSoftmax(); }

#endif

const SoftmaxKernels& BestSoftmax() {
  static const SoftmaxKernels* const best = [] {
    for (const SoftmaxKernels* k : {Avx512Softmax(), Avx2Softmax()}) {
      if (k != nullptr && CpuRunsSoftmax(*k)) return k;
    }
    return &ScalarSoftmax();
  }();
  return *best;
}

}  // namespace primekv::attention_internal
