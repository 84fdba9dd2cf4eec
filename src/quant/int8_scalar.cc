// Plain C++ twins of the integer-dot kernels: the portable fallback and the reference that
// every SIMD version is tested against (tests/quant/int8_gemm_test.cc).
#include <cmath>
#include <cstring>
#include <vector>

#include "primekv/quant/quant.h"
#include "quant/int8_gemm.h"
#include "quant/kernels.h"
#include "quant/kquants.h"

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
    d[b] = RoundScaleToF16(scale);
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

// Lanes of a 16-float vector added in SumLanes' order (int8_avx512.cc).
float SumLanes(const float (&v)[16]) {
  float s8[8], s4[4];
  for (int i = 0; i < 8; ++i) s8[i] = v[i] + v[i + 8];
  for (int i = 0; i < 4; ++i) s4[i] = s8[i] + s8[i + 4];
  const float s2_0 = s4[0] + s4[2];
  const float s2_1 = s4[1] + s4[3];
  return s2_0 + s2_1;
}

}  // namespace

void Q4_0DecodeTwin(const uint8_t* w, size_t row_bytes, int64_t rows, const Q8Rows& a, float* out,
                    int64_t ldo) {
  const int64_t blocks = a.blocks();
  const int64_t steps = (blocks + kQ4_0GroupBlocks - 1) / kQ4_0GroupBlocks;
  for (int64_t r = 0; r < rows; ++r) {
    const uint8_t* row = w + static_cast<size_t>(r) * row_bytes;
    for (int64_t t = 0; t < a.rows; ++t) {
      const int8_t* aq = a.q + t * a.stride;
      const float* ad = a.d + t * a.block_stride;
      const int32_t* as = a.sum + t * a.block_stride;
      float acc[2][16] = {};
      for (int64_t g = 0; g < steps; ++g) {
        for (int l = 0; l < 16; ++l) {
          const int64_t b = g * kQ4_0GroupBlocks + l / 4;
          if (b >= blocks) continue;  // lanes of missing blocks add +0
          const uint8_t* p = row + b * kQ4_0BlockBytes;
          const int8_t* x = aq + b * kQ8Block;
          int32_t dot = l % 4 == 0 ? -8 * as[b] : 0;
          for (int j = 4 * (l % 4); j < 4 * (l % 4) + 4; ++j) {
            dot += (p[2 + j] & 0x0F) * x[j] + (p[2 + j] >> 4) * x[16 + j];
          }
          const float scale = F16ToF32(LoadU16(p)) * ad[b];
          acc[g & 1][l] = std::fma(static_cast<float>(dot), scale, acc[g & 1][l]);
        }
      }
      float sum[16];
      for (int l = 0; l < 16; ++l) sum[l] = acc[0][l] + acc[1][l];
      out[t * ldo + r] = SumLanes(sum);
    }
  }
}

void Q8_0DecodeTwin(const uint8_t* w, size_t row_bytes, int64_t rows, const Q8Rows& a, float* out,
                    int64_t ldo) {
  const int64_t blocks = a.blocks();
  const int64_t pairs = (blocks + 1) / 2;
  for (int64_t r = 0; r < rows; ++r) {
    const uint8_t* row = w + static_cast<size_t>(r) * row_bytes;
    for (int64_t t = 0; t < a.rows; ++t) {
      const int8_t* aq = a.q + t * a.stride;
      const float* ad = a.d + t * a.block_stride;
      const int32_t* as = a.sum + t * a.block_stride;
      float acc[16] = {};
      for (int64_t p = 0; p < pairs; ++p) {
        for (int l = 0; l < 16; ++l) {
          const int64_t b = 2 * p + l / 8;
          if (b >= blocks) {
            acc[l] += 0.0f;  // no quants and a zero scale: the SIMD lane's fma(0, 0, acc)
            continue;
          }
          const uint8_t* blk = row + b * kQ8_0BlockBytes;
          const int8_t* x = aq + b * kQ8Block;
          int32_t dot = l % 8 == 0 ? -128 * as[b] : 0;
          for (int j = 4 * (l % 8); j < 4 * (l % 8) + 4; ++j) {
            dot += (static_cast<int8_t>(blk[2 + j]) + 128) * x[j];
          }
          const float scale = F16ToF32(LoadU16(blk)) * ad[b];
          acc[l] = std::fma(static_cast<float>(dot), scale, acc[l]);
        }
      }
      out[t * ldo + r] = SumLanes(acc);
    }
  }
}

namespace {

// The AVX2 decode kernels' order: lanes[l] of block b gives the int32 of lane l, into accumulator
// b % 2; then the accumulators lane by lane, and the lanes as halves, pairs and the last two.
template <class LaneDots>
void Avx2DecodeTwin(const uint8_t* w, size_t row_bytes, int64_t rows, const Q8Rows& a,
                    int block_bytes, LaneDots lane_dots, float* out, int64_t ldo) {
  const int64_t blocks = a.blocks();
  for (int64_t r = 0; r < rows; ++r) {
    const uint8_t* row = w + static_cast<size_t>(r) * row_bytes;
    for (int64_t t = 0; t < a.rows; ++t) {
      const int8_t* aq = a.q + t * a.stride;
      const float* ad = a.d + t * a.block_stride;
      const int32_t* as = a.sum + t * a.block_stride;
      float acc[2][8] = {};
      for (int64_t b = 0; b < blocks; ++b) {
        const uint8_t* blk = row + b * block_bytes;
        int32_t lanes[8];
        lane_dots(blk, aq + b * kQ8Block, as[b], lanes);
        const float scale = F16ToF32(LoadU16(blk)) * ad[b];
        for (int l = 0; l < 8; ++l) {
          acc[b % 2][l] = std::fma(static_cast<float>(lanes[l]), scale, acc[b % 2][l]);
        }
      }
      float s4[4];
      for (int l = 0; l < 4; ++l) s4[l] = (acc[0][l] + acc[1][l]) + (acc[0][l + 4] + acc[1][l + 4]);
      out[t * ldo + r] = (s4[0] + s4[2]) + (s4[1] + s4[3]);
    }
  }
}

}  // namespace

void Q8_0Avx2DecodeTwin(const uint8_t* w, size_t row_bytes, int64_t rows, const Q8Rows& a,
                        float* out, int64_t ldo) {
  const auto lane_dots = [](const uint8_t* blk, const int8_t* x, int32_t, int32_t(&lanes)[8]) {
    for (int l = 0; l < 8; ++l) {
      lanes[l] = 0;
      for (int j = 4 * l; j < 4 * l + 4; ++j) lanes[l] += Q8_0Weight(blk, j) * x[j];
    }
  };
  Avx2DecodeTwin(w, row_bytes, rows, a, kQ8_0BlockBytes, lane_dots, out, ldo);
}

void Q4_0Avx2DecodeTwin(const uint8_t* w, size_t row_bytes, int64_t rows, const Q8Rows& a,
                        float* out, int64_t ldo) {
  const int64_t blocks = a.blocks();
  for (int64_t r = 0; r < rows; ++r) {
    const uint8_t* row = w + static_cast<size_t>(r) * row_bytes;
    for (int64_t t = 0; t < a.rows; ++t) {
      const int8_t* aq = a.q + t * a.stride;
      float acc[2][8] = {};
      // Block b fills lanes 4 (b % 2) .. + 3 of accumulator (b / 2) % 2; a missing last block's
      // lanes would add +0.
      for (int64_t b = 0; b < blocks; ++b) {
        const uint8_t* blk = row + b * kQ4_0BlockBytes;
        const float scale = F16ToF32(LoadU16(blk)) * a.d[t * a.block_stride + b];
        for (int l = 0; l < 4; ++l) {
          int32_t lane = l == 0 ? -8 * a.sum[t * a.block_stride + b] : 0;
          for (int j = 4 * l; j < 4 * l + 4; ++j) {
            lane += (Q4_0Weight(blk, j) + 8) * aq[b * kQ8Block + j] +
                    (Q4_0Weight(blk, j + 16) + 8) * aq[b * kQ8Block + j + 16];
          }
          float& acc_lane = acc[(b / 2) % 2][4 * (b % 2) + l];
          acc_lane = std::fma(static_cast<float>(lane), scale, acc_lane);
        }
      }
      float s4[4];
      for (int l = 0; l < 4; ++l) s4[l] = (acc[0][l] + acc[1][l]) + (acc[0][l + 4] + acc[1][l + 4]);
      out[t * ldo + r] = (s4[0] + s4[2]) + (s4[1] + s4[3]);
    }
  }
}

namespace {

// The panel kernels' order: per row and token one float, block by block in order.
template <int kBlockBytes, int (*kWeight)(const uint8_t*, int)>
void PanelTwin(const uint8_t* w, size_t row_bytes, int64_t rows, const Q8Rows& a, float* out,
               int64_t ldo) {
  const int64_t blocks = a.blocks();
  for (int64_t r = 0; r < rows; ++r) {
    const uint8_t* row = w + static_cast<size_t>(r) * row_bytes;
    for (int64_t t = 0; t < a.rows; ++t) {
      const int8_t* aq = a.q + t * a.stride;
      float acc = 0.0f;
      for (int64_t b = 0; b < blocks; ++b) {
        const uint8_t* blk = row + b * kBlockBytes;
        int32_t dot = 0;  // exact: |dot| <= 32 * 128 * 127, also as a float
        for (int j = 0; j < kQ8Block; ++j) dot += kWeight(blk, j) * aq[b * kQ8Block + j];
        const float scale = F16ToF32(LoadU16(blk)) * a.d[t * a.block_stride + b];
        acc = std::fma(static_cast<float>(dot), scale, acc);
      }
      out[t * ldo + r] = acc;
    }
  }
}

}  // namespace

void Q8_0PanelTwin(const uint8_t* w, size_t row_bytes, int64_t rows, const Q8Rows& a, float* out,
                   int64_t ldo) {
  PanelTwin<kQ8_0BlockBytes, Q8_0Weight>(w, row_bytes, rows, a, out, ldo);
}

void Q4_0PanelTwin(const uint8_t* w, size_t row_bytes, int64_t rows, const Q8Rows& a, float* out,
                   int64_t ldo) {
  PanelTwin<kQ4_0BlockBytes, Q4_0Weight>(w, row_bytes, rows, a, out, ldo);
}

template <GgmlType kType>
void KQuantPanelTwin(const uint8_t* w, size_t row_bytes, int64_t rows, const Q8Rows& a, float* out,
                     int64_t ldo) {
  constexpr int kG = KQuantGroup(kType);
  constexpr int kBlock = 256;
  const UnpackFn unpack = ScalarUnpack(kType);
  const int block_bytes = BlockBytes(kType);
  const int64_t supers = a.cols / kBlock;
  Unpacked u;
  std::vector<int8_t> q(static_cast<size_t>(a.cols));
  std::vector<float> scale(static_cast<size_t>(a.cols / kG)), min(scale.size());
  for (int64_t r = 0; r < rows; ++r) {
    for (int64_t s = 0; s < supers; ++s) {
      unpack(w + static_cast<size_t>(r) * row_bytes + s * block_bytes, u);
      std::memcpy(q.data() + s * kBlock, u.q, kBlock);
      for (int g = 0; g < kBlock / kG; ++g) {
        scale[s * (kBlock / kG) + g] = u.scale[g * kG / 16];
        min[s * (kBlock / kG) + g] = u.min[g * kG / 16];
      }
    }
    for (int64_t t = 0; t < a.rows; ++t) {
      const int8_t* qa = a.q + t * a.stride;
      float acc = 0.0f;
      for (int64_t g = 0; g < a.cols / kG; ++g) {
        int32_t dot = 0;
        for (int k = 0; k < kG; ++k) dot += int32_t{q[g * kG + k]} * qa[g * kG + k];
        const int64_t block = g * kG / kQ8Block;
        const float da = a.d[t * a.block_stride + block];
        acc = std::fma(static_cast<float>(dot), scale[g] * da, acc);
        if constexpr (KQuantHasMins(kType)) {
          acc = std::fma(-min[g], da * static_cast<float>(a.sum[t * a.block_stride + block]), acc);
        }
      }
      out[t * ldo + r] = acc;
    }
  }
}

template void KQuantPanelTwin<GgmlType::kQ3_K>(const uint8_t*, size_t, int64_t, const Q8Rows&,
                                               float*, int64_t);
template void KQuantPanelTwin<GgmlType::kQ4_K>(const uint8_t*, size_t, int64_t, const Q8Rows&,
                                               float*, int64_t);
template void KQuantPanelTwin<GgmlType::kQ5_K>(const uint8_t*, size_t, int64_t, const Q8Rows&,
                                               float*, int64_t);
template void KQuantPanelTwin<GgmlType::kQ6_K>(const uint8_t*, size_t, int64_t, const Q8Rows&,
                                               float*, int64_t);
template void KQuantPanelTwin<GgmlType::kIQ4_XS>(const uint8_t*, size_t, int64_t, const Q8Rows&,
                                                 float*, int64_t);

const Int8Kernels& ScalarInt8Kernels() {
  static const Int8Kernels table{Isa::kScalar, QuantizeQ8, Gemm<kQ8_0BlockBytes, Q8_0Weight>,
                                 Gemm<kQ4_0BlockBytes, Q4_0Weight>};
  return table;
}

}  // namespace primekv::quant::internal
