// The read-bandwidth probe of `primekv bench`: a word sum per thread at the memory's speed,
// picked at run time (AVX2, or its scalar twin), timed over a region.
#include "primekv/quant/bandwidth.h"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <vector>

#include "primekv/quant/cpu.h"

#if defined(__x86_64__)
#include <immintrin.h>
#endif

namespace primekv::quant {

uint64_t SumWordsScalar(const uint64_t* p, size_t n) {
  uint64_t s0 = 0, s1 = 0, s2 = 0, s3 = 0;
  size_t i = 0;
  for (; i + 4 <= n; i += 4) {
    s0 += p[i];
    s1 += p[i + 1];
    s2 += p[i + 2];
    s3 += p[i + 3];
  }
  for (; i < n; ++i) s0 += p[i];
  return s0 ^ s1 ^ s2 ^ s3;
}

#if defined(__x86_64__)
namespace {

// AVX2: four 32-byte loads per 128 bytes into four accumulators, with a prefetch 8 KiB ahead
// (the decode kernels' distance). On an Intel Xeon VM whose hardware prefetchers fetch little,
// 2 KiB ahead (non-temporal) read 8 GB/s per core where this reads 14 (docs/performance.md).
// Only called after the CPU check in SumWords.
__attribute__((target("avx2"))) uint64_t SumWordsAvx2(const uint64_t* p, size_t n) {
  constexpr size_t kAhead = 8192 / sizeof(uint64_t);
  __m256i a0 = _mm256_setzero_si256(), a1 = a0, a2 = a0, a3 = a0;
  size_t i = 0;
  for (; i + 16 <= n; i += 16) {
    if (i + kAhead + 16 <= n) {  // the last 8 KiB have nothing left to prefetch
      _mm_prefetch(reinterpret_cast<const char*>(p + i + kAhead), _MM_HINT_T0);
      _mm_prefetch(reinterpret_cast<const char*>(p + i + kAhead + 8), _MM_HINT_T0);
    }
    a0 = _mm256_add_epi64(a0, _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p + i)));
    a1 = _mm256_add_epi64(a1, _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p + i + 4)));
    a2 = _mm256_add_epi64(a2, _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p + i + 8)));
    a3 = _mm256_add_epi64(a3, _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p + i + 12)));
  }
  const __m256i sum = _mm256_add_epi64(_mm256_add_epi64(a0, a1), _mm256_add_epi64(a2, a3));
  alignas(32) uint64_t lanes[4];
  _mm256_store_si256(reinterpret_cast<__m256i*>(lanes), sum);
  return (lanes[0] ^ lanes[1] ^ lanes[2] ^ lanes[3]) + SumWordsScalar(p + i, n - i);
}

}  // namespace
#endif

uint64_t SumWords(const uint64_t* p, size_t n) {
#if defined(__x86_64__)
  if (CpuHasIsa(Isa::kAvx2)) return SumWordsAvx2(p, n);
#endif
  return SumWordsScalar(p, n);
}

double MeasureBandwidth(std::span<const uint8_t> region, ThreadPool& pool, int passes) {
  using Clock = std::chrono::steady_clock;
  const size_t words = region.size() / sizeof(uint64_t);
  const auto* base = reinterpret_cast<const uint64_t*>(region.data());
  const int64_t n_threads = pool.size();
  std::vector<uint64_t> sinks(static_cast<size_t>(n_threads));
  double best = 0;
  for (int pass = 0; pass < passes; ++pass) {
    const auto t0 = Clock::now();
    pool.ParallelFor(
        n_threads,
        [&](int64_t b, int64_t e, int) {
          for (int64_t part = b; part < e; ++part) {
            const size_t lo = words * static_cast<size_t>(part) / static_cast<size_t>(n_threads);
            const size_t hi =
                words * static_cast<size_t>(part + 1) / static_cast<size_t>(n_threads);
            sinks[static_cast<size_t>(part)] += SumWords(base + lo, hi - lo);
          }
        },
        1);
    const double s = std::chrono::duration<double>(Clock::now() - t0).count();
    best = std::max(best, static_cast<double>(words * sizeof(uint64_t)) / s);
  }
  uint64_t all = 0;
  for (uint64_t s : sinks) all ^= s;
  if (all == 42) std::fputs("", stderr);  // keeps the sums observable
  return best;
}

double MeasureHeapBandwidth(int mib, ThreadPool& pool) {
  const size_t words = static_cast<size_t>(mib) * (size_t{1} << 20) / sizeof(uint64_t);
  std::vector<uint64_t> buf(words);
  pool.ParallelFor(static_cast<int64_t>(words), [&](int64_t b, int64_t e, int) {
    for (int64_t i = b; i < e; ++i) buf[static_cast<size_t>(i)] = static_cast<uint64_t>(i);
  });
  const std::span<const uint8_t> bytes(reinterpret_cast<const uint8_t*>(buf.data()),
                                       words * sizeof(uint64_t));
  return MeasureBandwidth(bytes, pool, 8);
}

}  // namespace primekv::quant
