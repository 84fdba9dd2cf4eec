// Internal: ggml's block formats beyond Q8_0/Q4_0 (the K-quants, the IQ4 types and the older
// Q4_1/Q5_0/Q5_1), decoded through one intermediate form shared by every ISA.
//
// Every one of these formats can be read as int8 quants q[i] with a float scale and offset per
// group of 16 elements:  value[i] = scale[i / 16] * q[i] - min[i / 16]  (min = 0 for the
// symmetric types, -m for Q4_1/Q5_1). scale and min are computed exactly as ggml does
// (d * sub_scale in float), and the value with one float multiply and one subtract, so a
// dequantised element is bit-identical to ggml's reference. The SIMD files replace the
// unpacking into this form (kquants_x86.inc) and the arithmetic around it.
//
// Why this form: it is also what integer dot products need. The int8-activation dots (dot_q8k,
// 256-element formats; activations rounded once per matmul into Q8KBlock, as llama.cpp's Q8_K)
// compute d_x * sum_g (scale_g * sum_i q_i qx_i - min_g * bsum_g) from the same unpacked quants,
// with maddubs/madd or VNNI for the exact inner sums. Q4_K, Q5_K and Q6_K's dots skip the
// unpacked copy and apply the group scales in integers (kquants_int8_x86.inc).
#pragma once

#include <cstdint>

#include "primekv/util/dtype.h"
#include "quant/kernels.h"

namespace primekv::quant::internal {

inline constexpr int kGroup16 = 16;      // elements per scale group of the unpacked form
inline constexpr int kSuperBlock = 256;  // QK_K: elements per K-quant / IQ4_XS block

// Block sizes (elements) and bytes, read from the type table (primekv/util/dtype.h); the
// comments give each field's place as ggml lays it out.
struct KBlock {
  int elements;
  int bytes;
};
constexpr KBlock LayoutOf(GgmlType type) {
  const GgmlTypeInfo info = *TypeInfo(type);
  return {info.block_size, static_cast<int>(info.block_bytes)};
}
inline constexpr KBlock kQ4_1 = LayoutOf(GgmlType::kQ4_1);     // d, m, qs[16]
inline constexpr KBlock kQ5_0 = LayoutOf(GgmlType::kQ5_0);     // d, qh[4], qs[16]
inline constexpr KBlock kQ5_1 = LayoutOf(GgmlType::kQ5_1);     // d, m, qh[4], qs[16]
inline constexpr KBlock kIq4Nl = LayoutOf(GgmlType::kIQ4_NL);  // d, qs[16] (into kIq4Values)
inline constexpr KBlock kQ2_K = LayoutOf(GgmlType::kQ2_K);     // scales[16], qs[64], d, dmin
inline constexpr KBlock kQ3_K = LayoutOf(GgmlType::kQ3_K);     // hmask[32], qs[64], scales[12], d
inline constexpr KBlock kQ4_K = LayoutOf(GgmlType::kQ4_K);     // d, dmin, scales[12], qs[128]
inline constexpr KBlock kQ5_K = LayoutOf(GgmlType::kQ5_K);  // d, dmin, scales[12], qh[32], qs[128]
inline constexpr KBlock kQ6_K = LayoutOf(GgmlType::kQ6_K);  // ql[128], qh[64], scales[16], d
inline constexpr KBlock kIq4Xs = LayoutOf(GgmlType::kIQ4_XS);  // d, scales_h, scales_l[4], qs[128]

// The non-linear 4-bit grid of IQ4_NL and IQ4_XS.
inline constexpr int8_t kIq4Values[16] = {-127, -104, -83, -65, -49, -35, -22, -10,
                                          1,    13,   25,  38,  53,  69,  89,  113};

// The unpacked form of one block (up to 256 elements, 16 groups).
struct Unpacked {
  alignas(64) int8_t q[kSuperBlock];
  alignas(64) float scale[kSuperBlock / kGroup16];
  alignas(64) float min[kSuperBlock / kGroup16];
};
using UnpackFn = void (*)(const uint8_t* block, Unpacked& out);

// The ten formats of this file, in one list so tables and tests iterate the same set.
inline constexpr GgmlType kBlockTypes[] = {
    GgmlType::kQ4_1, GgmlType::kQ5_0, GgmlType::kQ5_1, GgmlType::kIQ4_NL, GgmlType::kQ2_K,
    GgmlType::kQ3_K, GgmlType::kQ4_K, GgmlType::kQ5_K, GgmlType::kQ6_K,   GgmlType::kIQ4_XS};

// Whether a format's unpacked quants are never negative (Q2_K, Q4_K, Q5_K, Q4_1, Q5_1): the
// int8 dots then feed them to the unsigned operand of maddubs/vpdpbusd directly, without
// moving their signs onto the activations.
constexpr bool UnsignedQuants(GgmlType type) {
  return type == GgmlType::kQ2_K || type == GgmlType::kQ4_K || type == GgmlType::kQ5_K ||
         type == GgmlType::kQ4_1 || type == GgmlType::kQ5_1;
}

// Layout of one of kBlockTypes; {0, 0} for others.
KBlock BlockOf(GgmlType type);

// Scalar unpackers (kquants_scalar.cc); the SIMD files test theirs against these.
UnpackFn ScalarUnpack(GgmlType type);
// Only the scale and min of each group (the SIMD unpackers do the quants themselves; the
// scales are a few dozen scalar operations per block).
UnpackFn ScalarScales(GgmlType type);

// Quants only: the int8 q[] of one block, as Unpacked::q.
using QuantsFn = void (*)(const uint8_t* block, int8_t* q);

// Fill the kernels of kBlockTypes into a table.
void AddScalarBlockKernels(KernelTable& table);
void AddAvx2BlockKernels(KernelTable& table);    // x86-64 only; needs AVX2+FMA+F16C
void AddAvx512BlockKernels(KernelTable& table);  // x86-64 only; needs AVX-512 F/BW/VL
// The AVX2 quant unpacker of a type (also used by the AVX-512 table), for the kernel tests;
// null off x86-64. Calling it needs AVX2.
QuantsFn Avx2Quants(GgmlType type);

}  // namespace primekv::quant::internal
