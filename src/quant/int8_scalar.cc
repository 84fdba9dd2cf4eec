// Plain C++ twins of the integer-dot kernels: the portable fallback and the reference that
// every SIMD version is tested against (tests/quant/int8_gemm_test.cc).
#include <cmath>
#include <cstring>

#include "primekv/quant.h"
#include "quant/int8_gemm.h"
#include "quant/kernels.h"

namespace primekv::quant::internal {
namespace {

void QuantizeQ8(const float* x, int64_t n, int8_t* q, float* d, int32_t* sum) {
  for (int64_t b = 0; b < n / kQ8Block; ++b, x += kQ8Block, q += kQ8Block) {
    float amax = 0.0f;
    for (int j = 0; j < kQ8Block; ++j) amax = std::fmax(amax, std::fabs(x[j]));
    const float scale = amax / 127.0f;
    const float inv = scale > 0.0f ? 1.0f / scale : 0.0f;
    int32_t s = 0;
    for (int j = 0; j < kQ8Block; ++j) {
      const float v = std::nearbyint(x[j] * inv);  // ties to even, as the SIMD conversions
      const int i = std::isnan(v) ? 0 : static_cast<int>(std::fmax(-127.0f, std::fmin(127.0f, v)));
      q[j] = static_cast<int8_t>(i);
      s += i;
    }
    d[b] = scale;
    sum[b] = s;
  }
}

// Element j of a block as a signed integer weight.
int Q8_0Weight(const uint8_t* block, int j) { return static_cast<int8_t>(block[2 + j]); }
int Q4_0Weight(const uint8_t* block, int j) {
  const uint8_t byte = block[2 + (j & 15)];
  return (j < 16 ? (byte & 0x0F) : (byte >> 4)) - 8;
}

template <int kBlockBytes, int (*kWeight)(const uint8_t*, int)>
void Gemm(const uint8_t* w, size_t row_bytes, int64_t rows, const Q8Rows& a, float* out,
          int64_t ldo) {
  const int64_t blocks = a.blocks();
  // Weight rows outermost: each is read once for every token.
  for (int64_t r = 0; r < rows; ++r) {
    for (int64_t t = 0; t < a.rows; ++t) {
      const int8_t* aq = a.q + t * a.stride;
      const float* ad = a.d + t * a.block_stride;
      const uint8_t* p = w + static_cast<size_t>(r) * row_bytes;
      float acc = 0.0f;
      for (int64_t b = 0; b < blocks; ++b, p += kBlockBytes) {
        int32_t dot = 0;
        for (int j = 0; j < kQ8Block; ++j) dot += kWeight(p, j) * aq[b * kQ8Block + j];
        acc += F16ToF32(LoadU16(p)) * ad[b] * static_cast<float>(dot);
      }
      out[t * ldo + r] = acc;
    }
  }
}

}  // namespace

const Int8Kernels& ScalarInt8Kernels() {
  static const Int8Kernels table{Isa::kScalar, QuantizeQ8, Gemm<kQ8_0BlockBytes, Q8_0Weight>,
                                 Gemm<kQ4_0BlockBytes, Q4_0Weight>};
  return table;
}

}  // namespace primekv::quant::internal
