// The memory's read bandwidth, measured as the decode kernels read their weights: a contiguous
// share of a region per thread, streamed with the row kernels' prefetch distance. `primekv bench`
// compares a decode step's bytes per token with it.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>

#include "primekv/util/thread_pool.h"

namespace primekv::quant {

// The sum of n words, at the memory's speed: the AVX2 loop where the CPU runs it (CpuHasIsa),
// the scalar twin otherwise. Four partial sums combined by xor: a sink that keeps the reads
// observable, not a checksum. For n a multiple of 16 both give the same value.
uint64_t SumWords(const uint64_t* p, size_t n);
// The scalar twin: four independent chains.
uint64_t SumWordsScalar(const uint64_t* p, size_t n);

// Read bandwidth in bytes/s: the best of `passes` passes summing `region`, one contiguous share
// per thread of the pool (as a decode matvec reads its rows). The region should be far larger
// than the last-level cache.
double MeasureBandwidth(std::span<const uint8_t> region, ThreadPool& pool, int passes);
// The same over a heap buffer of `mib` MiB, written first so every page is resident (8 passes).
double MeasureHeapBandwidth(int mib, ThreadPool& pool);

}  // namespace primekv::quant
