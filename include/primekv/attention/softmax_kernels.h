// Internal: the element-wise part of the online softmax, per ISA with a scalar twin. At depth
// the exponentials dominate prefill attention (one per query row and visible key), so they run
// as a vector polynomial rather than one libm call each.
#pragma once

#include <cstdint>

namespace primekv::attention_internal {

// exp(x) for x <= 88: Cody-Waite reduction to 2^n * e^r with |r| <= ln2 / 2 and a degree-6
// polynomial for e^r (cephes expf coefficients); relative error below 3e-7. Inputs below
// -86 (e^-86 ~ 4e-38) give 0.
float ExpApprox(float x);

struct SoftmaxKernels {
  const char* isa = "scalar";
  // max(init, s[0..n)).
  float (*row_max)(const float* s, int n, float init) = nullptr;
  // s[j] = exp(s[j] - m) for j < n (ExpApprox); returns the sum of the new s.
  float (*exp_sum)(float* s, int n, float m) = nullptr;
  // a[0..n) *= f.
  void (*scale)(float* a, int n, float f) = nullptr;
  // s[r * lds + j] = alpha * q[r * d + c] . k[j * d + c] summed over c < d, for r < rows and
  // j < count, with keys as rows (no transposed copy): the decode step, where a few query
  // rows meet each page once and a transpose would cost more than the products.
  void (*scores)(const float* q, int rows, const float* k, int count, int d, float alpha, float* s,
                 int lds) = nullptr;
  // The decode step over an f16 cache, reading the page in place (IEEE half, converted in
  // registers) rather than through a float copy of it: `scores` with f16 key rows, and
  // acc[r * d + c] += sum over j < count of p[r * ldp + j] * v[j * d + c] for r < rows.
  // Null where the table has none (the caller converts the page and uses the float kernels).
  void (*scores_f16)(const float* q, int rows, const uint16_t* k, int count, int d, float alpha,
                     float* s, int lds) = nullptr;
  void (*pv_f16)(const float* p, int rows, int ldp, const uint16_t* v, int count, int d,
                 float* acc) = nullptr;
};

const SoftmaxKernels& ScalarSoftmax();
const SoftmaxKernels* Avx2Softmax();    // null off x86-64
const SoftmaxKernels* Avx512Softmax();  // null off x86-64
bool CpuRunsSoftmax(const SoftmaxKernels& k);
// The fastest this CPU runs; decided once.
const SoftmaxKernels& BestSoftmax();

}  // namespace primekv::attention_internal
