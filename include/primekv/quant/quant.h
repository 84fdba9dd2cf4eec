// Element formats of weights: conversion, dequantisation and dot products.
// Every fast kernel here has a scalar twin in tests/quant/.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>

#include "primekv/util/dtype.h"
#include "primekv/util/status.h"

namespace primekv::quant {

float F16ToF32(uint16_t h);
uint16_t F32ToF16(float f);  // round to nearest even, overflow to inf
float Bf16ToF32(uint16_t h);
uint16_t F32ToBf16(float f);  // round to nearest even

// Bytes of a row of n elements; n must be a multiple of the type's block size.
size_t RowBytes(GgmlType type, int64_t n);

// Supported for TypeInfo(t)->computable: F32, F16, BF16, Q8_0, Q4_0, Q4_1, Q5_0, Q5_1, the
// K-quants Q2_K..Q6_K, IQ4_NL and IQ4_XS.
void DequantizeRow(GgmlType type, const void* src, float* dst, int64_t n);
void QuantizeRow(GgmlType type, const float* src, void* dst, int64_t n);
// sum_i w[i] * x[i] for one encoded weight row w and a float vector x.
float DotRow(GgmlType type, const void* row, const float* x, int64_t n);

}  // namespace primekv::quant
