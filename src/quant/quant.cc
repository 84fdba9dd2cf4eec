// Public row API of quant.h: argument checks, then the best kernel table for this CPU.
#include "primekv/quant/quant.h"

#include "quant/kernels.h"

namespace primekv::quant {
namespace {

const internal::TypeKernels& KernelsFor(GgmlType type, int64_t n) {
  const internal::TypeKernels* kernels = internal::Find(internal::BestKernels(), type);
  Check(kernels != nullptr, "quant: element type is not computable");
  Check(n >= 0 && n % internal::BlockSize(type) == 0,
        "quant: row length is not a multiple of the block size");
  return *kernels;
}

}  // namespace

size_t RowBytes(GgmlType type, int64_t n) {
  const int block = internal::BlockSize(type);
  Check(block > 0, "RowBytes: element type is not computable");
  Check(n >= 0 && n % block == 0, "RowBytes: row length is not a multiple of the block size");
  return static_cast<size_t>(n / block) * static_cast<size_t>(internal::BlockBytes(type));
}

void DequantizeRow(GgmlType type, const void* src, float* dst, int64_t n) {
  KernelsFor(type, n).dequantize(src, dst, n);
}

void QuantizeRow(GgmlType type, const float* src, void* dst, int64_t n) {
  KernelsFor(type, n).quantize(src, dst, n);
}

float DotRow(GgmlType type, const void* row, const float* x, int64_t n) {
  return KernelsFor(type, n).dot(row, x, n);
}

}  // namespace primekv::quant
