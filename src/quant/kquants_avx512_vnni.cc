// The AVX-512 VNNI table: the AVX-512 table with the int8-activation dot products of the
// 256-element formats done by vpdpbusd (one instruction for maddubs + madd). A separate file so
// that nothing else is compiled with the VNNI target.
#include <cstdint>
#include <cstring>

#include "quant/kquants.h"

#if defined(__x86_64__)
#include <immintrin.h>

#if defined(__clang__)
#pragma clang attribute push(                                                      \
    __attribute__((target("avx512f,avx512bw,avx512vl,avx512vnni,avx2,fma,f16c"))), \
    apply_to = function)
#else
#pragma GCC push_options
#pragma GCC target("avx512f,avx512bw,avx512vl,avx512vnni,avx2,fma,f16c")
#endif
#if !defined(__clang__)
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#endif

// Only the 256-element formats' unpackers of the shared file are used here.
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wunused-function"

namespace primekv::quant::internal {
namespace {

#include "quant/kquants_x86.inc"

constexpr bool kUseVnni = true;
#include "quant/kquants_q8k_avx512.inc"

}  // namespace
}  // namespace primekv::quant::internal

#pragma GCC diagnostic pop
#if !defined(__clang__)
#pragma GCC diagnostic pop
#endif
#if defined(__clang__)
#pragma clang attribute pop
#else
#pragma GCC pop_options
#endif

namespace primekv::quant::internal {

// Outside the target region, like Avx512Kernels().
const KernelTable* Avx512VnniKernels() {
  const KernelTable* base = Avx512Kernels();
  if (base == nullptr) return nullptr;
  static const KernelTable table = [base] {
    KernelTable t = *base;
    t.isa = Isa::kAvx512Vnni;
    t.q2_k.dot_q8k = DotQ8K<QuantsQ2_K, GgmlType::kQ2_K, ScalesQ2_KSimd>;
    t.q3_k.dot_q8k = DotQ8K<QuantsQ3_K, GgmlType::kQ3_K, ScalesQ3_KSimd>;
    // Q4_K keeps the AVX2 register-unpacked int8 dot (see AddAvx512BlockKernels).
    t.q5_k.dot_q8k = DotQ8K<QuantsQ5_K, GgmlType::kQ5_K, ScalesK4Simd>;
    t.q6_k.dot_q8k = DotQ8K<QuantsQ6_K, GgmlType::kQ6_K, ScalesQ6_KSimd>;
    t.iq4_xs.dot_q8k = DotQ8K<QuantsIq4Xs, GgmlType::kIQ4_XS, ScalesIq4XsSimd>;
    return t;
  }();
  return &table;
}

}  // namespace primekv::quant::internal

#else  // not x86-64

namespace primekv::quant::internal {
const KernelTable* Avx512VnniKernels() { return nullptr; }
}  // namespace primekv::quant::internal

#endif
