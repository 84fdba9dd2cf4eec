// Chooses the kernel table for this CPU once per process.
#include <vector>

#if defined(__x86_64__)
#include <cpuid.h>
#endif

#include "quant/kernels.h"
#include "quant/kquants.h"

namespace primekv::quant::internal {

const char* IsaName(Isa isa) {
  switch (isa) {
    case Isa::kScalar:
      return "scalar";
    case Isa::kAvx2:
      return "avx2";
    case Isa::kAvx512:
      return "avx512";
    case Isa::kAvx512Vnni:
      return "avx512vnni";
  }
  return "?";
}

// From cpuid and xgetbv directly: GCC's and Clang's __builtin_cpu_supports differ in which
// feature names they accept (Clang 14 has no "f16c").
CpuFeatures DetectCpu() {
  CpuFeatures f;
#if defined(__x86_64__)
  unsigned eax, ebx, ecx, edx;
  if (!__get_cpuid(1, &eax, &ebx, &ecx, &edx)) return f;
  const bool fma = ecx & (1u << 12);
  const bool osxsave = ecx & (1u << 27);
  const bool avx = ecx & (1u << 28);
  const bool f16c = ecx & (1u << 29);
  if (!osxsave || !avx) return f;
  unsigned xcr0_lo, xcr0_hi;
  __asm__("xgetbv" : "=a"(xcr0_lo), "=d"(xcr0_hi) : "c"(0));
  const bool os_ymm = (xcr0_lo & 0x6u) == 0x6u;
  const bool os_zmm = (xcr0_lo & 0xE6u) == 0xE6u;
  if (!__get_cpuid_count(7, 0, &eax, &ebx, &ecx, &edx)) return f;
  const bool avx2 = ebx & (1u << 5);
  const bool avx512f = ebx & (1u << 16);
  const bool avx512bw = ebx & (1u << 30);
  const bool avx512vl = ebx & (1u << 31);
  f.avx2 = os_ymm && avx2 && fma && f16c;
  f.avx512 = f.avx2 && os_zmm && avx512f && avx512bw && avx512vl;
  f.avx512vnni = f.avx512 && (ecx & (1u << 11));
#endif
  return f;
}

namespace {

std::vector<const KernelTable*> DetectTables() {
  std::vector<const KernelTable*> tables = {&ScalarKernels()};
#if defined(__x86_64__)
  const CpuFeatures cpu = DetectCpu();
  if (cpu.avx2 && Avx2Kernels() != nullptr) tables.push_back(Avx2Kernels());
  if (cpu.avx512 && Avx512Kernels() != nullptr) tables.push_back(Avx512Kernels());
  if (cpu.avx512vnni && Avx512VnniKernels() != nullptr) tables.push_back(Avx512VnniKernels());
#endif
  return tables;
}

}  // namespace

std::span<const KernelTable* const> SupportedKernels() {
  static const std::vector<const KernelTable*> tables = DetectTables();
  return tables;
}

const KernelTable& BestKernels() {
  static const KernelTable* const best = SupportedKernels().back();
  return *best;
}

const TypeKernels* Find(const KernelTable& table, GgmlType type) {
  switch (type) {
    case GgmlType::kF32:
      return &table.f32;
    case GgmlType::kF16:
      return &table.f16;
    case GgmlType::kBF16:
      return &table.bf16;
    case GgmlType::kQ8_0:
      return &table.q8_0;
    case GgmlType::kQ4_0:
      return &table.q4_0;
    case GgmlType::kQ4_1:
      return &table.q4_1;
    case GgmlType::kQ5_0:
      return &table.q5_0;
    case GgmlType::kQ5_1:
      return &table.q5_1;
    case GgmlType::kIQ4_NL:
      return &table.iq4_nl;
    case GgmlType::kQ2_K:
      return &table.q2_k;
    case GgmlType::kQ3_K:
      return &table.q3_k;
    case GgmlType::kQ4_K:
      return &table.q4_k;
    case GgmlType::kQ5_K:
      return &table.q5_k;
    case GgmlType::kQ6_K:
      return &table.q6_k;
    case GgmlType::kIQ4_XS:
      return &table.iq4_xs;
    default:
      return nullptr;
  }
}

int BlockSize(GgmlType type) {
  switch (type) {
    case GgmlType::kF32:
    case GgmlType::kF16:
    case GgmlType::kBF16:
      return 1;
    case GgmlType::kQ8_0:
      return kQ8_0Block;
    case GgmlType::kQ4_0:
      return kQ4_0Block;
    default:
      return BlockOf(type).elements;
  }
}

int BlockBytes(GgmlType type) {
  switch (type) {
    case GgmlType::kF32:
      return 4;
    case GgmlType::kF16:
    case GgmlType::kBF16:
      return 2;
    case GgmlType::kQ8_0:
      return kQ8_0BlockBytes;
    case GgmlType::kQ4_0:
      return kQ4_0BlockBytes;
    default:
      return BlockOf(type).bytes;
  }
}

}  // namespace primekv::quant::internal
