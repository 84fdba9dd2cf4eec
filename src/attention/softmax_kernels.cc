#include "attention/softmax_kernels.h"

#include <cmath>
#include <cstdint>
#include <cstring>
#include <initializer_list>

#if defined(__x86_64__)
#include <immintrin.h>
#endif

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

void ScalarScores(const float* q, int rows, const float* k, int count, int d, float alpha, float* s,
                  int lds) {
  for (int r = 0; r < rows; ++r) {
    for (int j = 0; j < count; ++j) {
      float dot = 0.0f;
      for (int c = 0; c < d; ++c) dot += q[r * d + c] * k[j * d + c];
      s[r * lds + j] = alpha * dot;
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
  static const SoftmaxKernels k{"scalar", ScalarRowMax, ScalarExpSum, ScalarScale, ScalarScores};
  return k;
}

#if defined(__x86_64__)

#if defined(__clang__)
#pragma clang attribute push(__attribute__((target("avx512f,avx2,fma"))), apply_to = function)
#else
#pragma GCC push_options
#pragma GCC target("avx512f,avx2,fma")
#endif
// GCC 12's AVX-512 headers: see src/quant/kernels_avx512.cc (GCC bug 105593).
#if !defined(__clang__)
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#endif

namespace {

__m512 Exp16(__m512 x) {
  const __m512 valid = x;
  x = _mm512_min_ps(_mm512_max_ps(x, _mm512_set1_ps(kMinX)), _mm512_set1_ps(kMaxX));
  const __m512 n = _mm512_roundscale_ps(_mm512_mul_ps(x, _mm512_set1_ps(kLog2e)),
                                        _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  const __m512 r =
      _mm512_fmadd_ps(n, _mm512_set1_ps(-kLn2Lo), _mm512_fmadd_ps(n, _mm512_set1_ps(-kLn2Hi), x));
  __m512 p = _mm512_fmadd_ps(_mm512_set1_ps(kC7), r, _mm512_set1_ps(kC6));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(kC5));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(kC4));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(kC3));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(kC2));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f));
  const __m512i e = _mm512_slli_epi32(_mm512_cvtps_epi32(n), 23);
  p = _mm512_castsi512_ps(_mm512_add_epi32(_mm512_castps_si512(p), e));
  // Below kMinX (or NaN): 0, as the scalar twin.
  const __mmask16 keep = _mm512_cmp_ps_mask(valid, _mm512_set1_ps(kMinX), _CMP_GE_OQ);
  return _mm512_maskz_mov_ps(keep, p);
}

float Avx512RowMax(const float* s, int n, float init) {
  __m512 m = _mm512_set1_ps(init);
  int j = 0;
  for (; j + 16 <= n; j += 16) m = _mm512_max_ps(m, _mm512_loadu_ps(s + j));
  if (j < n) {
    const auto mask = static_cast<__mmask16>((1u << (n - j)) - 1);
    m = _mm512_mask_max_ps(m, mask, m, _mm512_maskz_loadu_ps(mask, s + j));
  }
  return _mm512_reduce_max_ps(m);
}

float Avx512ExpSum(float* s, int n, float m) {
  const __m512 vm = _mm512_set1_ps(m);
  __m512 sum = _mm512_setzero_ps();
  int j = 0;
  for (; j + 16 <= n; j += 16) {
    const __m512 e = Exp16(_mm512_sub_ps(_mm512_loadu_ps(s + j), vm));
    _mm512_storeu_ps(s + j, e);
    sum = _mm512_add_ps(sum, e);
  }
  if (j < n) {
    const auto mask = static_cast<__mmask16>((1u << (n - j)) - 1);
    const __m512 e = Exp16(_mm512_sub_ps(_mm512_maskz_loadu_ps(mask, s + j), vm));
    _mm512_mask_storeu_ps(s + j, mask, e);
    sum = _mm512_add_ps(sum, _mm512_maskz_mov_ps(mask, e));
  }
  return _mm512_reduce_add_ps(sum);
}

void Avx512Scale(float* a, int n, float f) {
  const __m512 vf = _mm512_set1_ps(f);
  int j = 0;
  for (; j + 16 <= n; j += 16) _mm512_storeu_ps(a + j, _mm512_mul_ps(_mm512_loadu_ps(a + j), vf));
  for (; j < n; ++j) a[j] *= f;
}

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
void Avx512Scores(const float* q, int rows, const float* k, int count, int d, float alpha, float* s,
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

__m256 Exp8(__m256 x) {
  const __m256 valid = x;
  x = _mm256_min_ps(_mm256_max_ps(x, _mm256_set1_ps(kMinX)), _mm256_set1_ps(kMaxX));
  const __m256 n = _mm256_round_ps(_mm256_mul_ps(x, _mm256_set1_ps(kLog2e)),
                                   _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  const __m256 r =
      _mm256_fmadd_ps(n, _mm256_set1_ps(-kLn2Lo), _mm256_fmadd_ps(n, _mm256_set1_ps(-kLn2Hi), x));
  __m256 p = _mm256_fmadd_ps(_mm256_set1_ps(kC7), r, _mm256_set1_ps(kC6));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(kC5));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(kC4));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(kC3));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(kC2));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.0f));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.0f));
  const __m256i e = _mm256_slli_epi32(_mm256_cvtps_epi32(n), 23);
  p = _mm256_castsi256_ps(_mm256_add_epi32(_mm256_castps_si256(p), e));
  return _mm256_and_ps(p, _mm256_cmp_ps(valid, _mm256_set1_ps(kMinX), _CMP_GE_OQ));
}

float Avx2RowMax(const float* s, int n, float init) {
  __m256 m = _mm256_set1_ps(init);
  int j = 0;
  for (; j + 8 <= n; j += 8) m = _mm256_max_ps(m, _mm256_loadu_ps(s + j));
  alignas(32) float lanes[8];
  _mm256_store_ps(lanes, m);
  float r = init;
  for (float v : lanes) r = v > r ? v : r;
  for (; j < n; ++j) r = s[j] > r ? s[j] : r;
  return r;
}

float Avx2ExpSum(float* s, int n, float m) {
  const __m256 vm = _mm256_set1_ps(m);
  __m256 sum = _mm256_setzero_ps();
  int j = 0;
  for (; j + 8 <= n; j += 8) {
    const __m256 e = Exp8(_mm256_sub_ps(_mm256_loadu_ps(s + j), vm));
    _mm256_storeu_ps(s + j, e);
    sum = _mm256_add_ps(sum, e);
  }
  alignas(32) float lanes[8];
  _mm256_store_ps(lanes, sum);
  float total = 0.0f;
  for (float v : lanes) total += v;
  for (; j < n; ++j) {
    s[j] = ExpApprox(s[j] - m);
    total += s[j];
  }
  return total;
}

void Avx2Scale(float* a, int n, float f) {
  const __m256 vf = _mm256_set1_ps(f);
  int j = 0;
  for (; j + 8 <= n; j += 8) _mm256_storeu_ps(a + j, _mm256_mul_ps(_mm256_loadu_ps(a + j), vf));
  for (; j < n; ++j) a[j] *= f;
}

}  // namespace

#if !defined(__clang__)
#pragma GCC diagnostic pop
#endif
#if defined(__clang__)
#pragma clang attribute pop
#else
#pragma GCC pop_options
#endif

const SoftmaxKernels* Avx2Softmax() {
  static const SoftmaxKernels k{"avx2", Avx2RowMax, Avx2ExpSum, Avx2Scale, ScalarScores};
  return &k;
}
const SoftmaxKernels* Avx512Softmax() {
  static const SoftmaxKernels k{"avx512", Avx512RowMax, Avx512ExpSum, Avx512Scale, Avx512Scores};
  return &k;
}
bool CpuRunsSoftmax(const SoftmaxKernels& k) {
  if (&k == Avx512Softmax()) return __builtin_cpu_supports("avx512f");
  if (&k == Avx2Softmax()) return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
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
