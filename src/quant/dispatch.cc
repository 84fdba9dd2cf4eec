// Chooses the kernel table for this CPU once per process.
#include <cstdio>
#include <cstdlib>
#include <string_view>
#include <vector>

#if defined(__x86_64__)
#include <cpuid.h>
#endif
#if defined(__linux__) && defined(__x86_64__)
#include <sys/syscall.h>
#include <unistd.h>
#endif

#include "quant/int8_gemm.h"
#include "quant/kernels.h"
#include "quant/kquants.h"

namespace primekv::quant {

const char* IsaName(Isa isa) {
  static constexpr const char* kNames[] = {"scalar", "avx2", "avx512", "avx512vnni", "amx"};
  return kNames[static_cast<int>(isa)];
}

namespace {

// PRIMEKV_MAX_ISA=scalar|avx2|avx512|avx512vnni|amx caps what the kernels may use, so one machine
// can run and time the paths of older CPUs (an AVX2-only Zen 3 on an AVX-512 one). An unknown
// value ends the process with status 2.
CpuFeatures CapToEnvironment(CpuFeatures f) {
  const char* cap = std::getenv("PRIMEKV_MAX_ISA");
  if (cap == nullptr || *cap == '\0') return f;
  const std::string_view v(cap);
  if (v == "scalar") return CpuFeatures{};
  if (v == "avx2") return CpuFeatures{.avx2 = f.avx2};
  if (v == "avx512") return CpuFeatures{.avx2 = f.avx2, .avx512 = f.avx512};
  if (v == "avx512vnni")
    return CpuFeatures{.avx2 = f.avx2, .avx512 = f.avx512, .avx512vnni = f.avx512vnni};
  if (v == "amx") return f;
  // A bad value would silently time or test another path than asked: refuse it.
  std::fprintf(stderr,
               "primekv: PRIMEKV_MAX_ISA=%s is not one of scalar, avx2, avx512, avx512vnni, amx\n",
               cap);
  std::exit(2);
}

// Linux hands out AMX tile data per process, on request; without it the first tile instruction
// faults. The request is idempotent and cheap, so every detection makes it.
bool OsGrantsAmxTileData() {
#if defined(__linux__) && defined(__x86_64__)
  constexpr long kArchReqXcompPerm = 0x1023;
  constexpr long kXfeatureXtiledata = 18;
  return syscall(SYS_arch_prctl, kArchReqXcompPerm, kXfeatureXtiledata) == 0;
#else
  return false;
#endif
}

}  // namespace

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
  const bool amx_tile = edx & (1u << 24);
  const bool amx_int8 = edx & (1u << 25);
  const bool os_tiles = (xcr0_lo & 0x60000u) == 0x60000u;  // XTILECFG and XTILEDATA
  f.amx_int8 = f.avx512vnni && amx_tile && amx_int8 && os_tiles && OsGrantsAmxTileData();
#endif
  return CapToEnvironment(f);
}

bool CpuHasIsa(Isa isa) {
  static const CpuFeatures cpu = DetectCpu();
  switch (isa) {
    case Isa::kScalar:
      return true;
    case Isa::kAvx2:
      return cpu.avx2;
    case Isa::kAvx512:
      return cpu.avx512;
    case Isa::kAvx512Vnni:
      return cpu.avx512vnni;
    case Isa::kAmxInt8:
      return cpu.amx_int8;
  }
  return false;
}

namespace internal {

std::span<const KernelTable* const> SupportedKernels() {
  static const std::vector<const KernelTable*> tables = UsableTables(
      ScalarKernels(), {Avx2Kernels(), Avx512Kernels(), Avx512VnniKernels()},
      +[](const KernelTable& t) { return CpuHasIsa(t.isa); });
  return tables;
}

const KernelTable& BestKernels() {
  static const KernelTable* const best = SupportedKernels().back();
  return *best;
}

}  // namespace internal

Isa BestKernelIsa() { return internal::BestKernels().isa; }

Isa BestInt8Isa() { return internal::BestInt8Kernels().isa; }

namespace internal {

namespace {

struct TypeSlot {
  GgmlType type;
  TypeKernels KernelTable::*kernels;
};
constexpr TypeSlot kSlots[] = {
    {GgmlType::kF32, &KernelTable::f32},       {GgmlType::kF16, &KernelTable::f16},
    {GgmlType::kBF16, &KernelTable::bf16},     {GgmlType::kQ8_0, &KernelTable::q8_0},
    {GgmlType::kQ4_0, &KernelTable::q4_0},     {GgmlType::kQ4_1, &KernelTable::q4_1},
    {GgmlType::kQ5_0, &KernelTable::q5_0},     {GgmlType::kQ5_1, &KernelTable::q5_1},
    {GgmlType::kIQ4_NL, &KernelTable::iq4_nl}, {GgmlType::kQ2_K, &KernelTable::q2_k},
    {GgmlType::kQ3_K, &KernelTable::q3_k},     {GgmlType::kQ4_K, &KernelTable::q4_k},
    {GgmlType::kQ5_K, &KernelTable::q5_k},     {GgmlType::kQ6_K, &KernelTable::q6_k},
    {GgmlType::kIQ4_XS, &KernelTable::iq4_xs},
};

}  // namespace

const TypeKernels* Find(const KernelTable& table, GgmlType type) {
  for (const TypeSlot& slot : kSlots) {
    if (slot.type == type) return &(table.*slot.kernels);
  }
  return nullptr;
}

int BlockSize(GgmlType type) {
  const auto info = TypeInfo(type);
  return info && info->computable ? info->block_size : 0;
}

int BlockBytes(GgmlType type) {
  const auto info = TypeInfo(type);
  return info && info->computable ? static_cast<int>(info->block_bytes) : 0;
}

#if !defined(__x86_64__)
// The SIMD tables are built on x86-64 only (their files compile to nothing elsewhere).
const KernelTable* Avx2Kernels() { return nullptr; }
const KernelTable* Avx512Kernels() { return nullptr; }
const KernelTable* Avx512VnniKernels() { return nullptr; }
QuantsFn Avx2Quants(GgmlType) { return nullptr; }
const Int8Kernels* Avx2Int8Kernels() { return nullptr; }
const Int8Kernels* Avx512VnniInt8Kernels() { return nullptr; }
const Int8Kernels* AmxInt8Kernels() { return nullptr; }
#endif

}  // namespace internal
}  // namespace primekv::quant
