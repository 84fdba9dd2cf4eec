// What the CPU offers and which kernel table runs: the run-time dispatch every SIMD kernel
// (quant's row kernels, attention's softmax tables) decides from. The SIMD building blocks that
// those kernels share are in primekv/quant/simd/.
#pragma once

namespace primekv::quant {

// kAvx512Vnni: the AVX-512 table with VNNI integer dot products for int8 activations.
// kAmxInt8: the int8 table whose batch products (prefill) run on AMX tiles; everything else
// in it is the AVX-512 VNNI code, so it needs that too.
enum class Isa { kScalar, kAvx2, kAvx512, kAvx512Vnni, kAmxInt8 };
const char* IsaName(Isa isa);

// What this CPU (and the OS's saved register state) offers, from cpuid and xgetbv; all false
// off x86-64. Every kernel dispatch (float tables, int8 tables) decides from this one reading.
struct CpuFeatures {
  bool avx2 = false;    // with FMA and F16C, and the OS saving ymm state
  bool avx512 = false;  // F, BW and VL, and the OS saving zmm state
  bool avx512vnni = false;
  // AMX-TILE and AMX-INT8 with the OS saving tile state and granting this process the tile
  // data (Linux asks each process to request it: arch_prctl ARCH_REQ_XCOMP_PERM).
  bool amx_int8 = false;
};
CpuFeatures DetectCpu();
// Whether this CPU (and OS) runs code of `isa`; decided once per process.
bool CpuHasIsa(Isa isa);
// The instruction set of the row-kernel table in use (PRIMEKV_MAX_ISA caps it).
Isa BestKernelIsa();
// The instruction set of the int8 table in use (Q8_0 and Q4_0 weights' products).
Isa BestInt8Isa();

}  // namespace primekv::quant
