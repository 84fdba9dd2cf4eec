// Row kernels and MatMul per weight type.
//   bm_quant --benchmark_filter=DotRow      in-cache kernel speed per ISA (bytes of weights/s);
//                                           DotRowQ8K: the same with int8 activations
//   bm_quant --benchmark_filter=DotRows     one weight row against 1-5 activation rows: the
//                                           multi-row dot vs a loop of single dots
//   bm_quant --benchmark_filter=MatVec      MatMul n = 1, 4096 x 4096 (weights mostly in L3)
//   bm_quant --benchmark_filter=MatVecDram  MatMul n = 1 over ~1 GiB of weights (DRAM-bound)
//   bm_quant --benchmark_filter=BM_Gemm/    MatMul n = 128, 4096 x 4096 (FLOP/s), built-in
//                                           kernel vs OpenBLAS
//   bm_quant --benchmark_filter=Int8        the integer-dot path (quant/int8_gemm.h) per ISA:
//                                           Int8Gemm n = 128 and Int8MatVec n = 1, 4096 x 4096;
//                                           Int8FewTokens n = 2, 3, 5, 8, 15
//   bm_quant --benchmark_filter=Peak        one core's AVX-512 FMA and VNNI peak (CPU time)
// Sweeps behind MatMul's defaults: GemmTiling (panel sizes), SmallBatch (dot vs GEMM path),
// BlasThreads (one F32 sgemm on OpenBLAS's own threads).
#include <benchmark/benchmark.h>
#include <cblas.h>

#include <cstring>
#include <random>

#if defined(__x86_64__)
#include <immintrin.h>
#endif
#include <vector>

#include "primekv/quant/matmul.h"
#include "primekv/quant/quant.h"
#include "quant/int8_gemm.h"
#include "quant/kernels.h"
#include "quant/matmul_internal.h"

namespace primekv {
namespace {

constexpr GgmlType kTypes[] = {
    GgmlType::kF32,  GgmlType::kF16,  GgmlType::kBF16, GgmlType::kQ8_0,   GgmlType::kQ4_0,
    GgmlType::kQ4_1, GgmlType::kQ5_0, GgmlType::kQ5_1, GgmlType::kIQ4_NL, GgmlType::kQ2_K,
    GgmlType::kQ3_K, GgmlType::kQ4_K, GgmlType::kQ5_K, GgmlType::kQ6_K,   GgmlType::kIQ4_XS};
constexpr const char* kTypeNames[] = {"F32",  "F16",  "BF16", "Q8_0",   "Q4_0",
                                      "Q4_1", "Q5_0", "Q5_1", "IQ4_NL", "Q2_K",
                                      "Q3_K", "Q4_K", "Q5_K", "Q6_K",   "IQ4_XS"};
// Indices into kTypes: the original five, and all fifteen.
const std::vector<int64_t> kBaseTypes = {0, 1, 2, 3, 4};
const std::vector<int64_t> kAllTypes = {0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14};

std::vector<float> RandomFloats(int64_t n, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::normal_distribution<float> dist(0.0f, 1.0f);
  std::vector<float> v(static_cast<size_t>(n));
  for (auto& x : v) x = dist(rng);
  return v;
}

// rows x cols weights: 64 distinct random rows, repeated (memory traffic is what matters).
struct BenchWeight {
  std::vector<uint8_t> bytes;
  WeightView view;
};

BenchWeight MakeWeight(GgmlType type, int64_t rows, int64_t cols) {
  BenchWeight w;
  const size_t row_bytes = quant::RowBytes(type, cols);
  w.bytes.resize(row_bytes * static_cast<size_t>(rows));
  const int64_t distinct = std::min<int64_t>(rows, 64);
  const std::vector<float> src = RandomFloats(distinct * cols, 7);
  for (int64_t r = 0; r < distinct; ++r) {
    quant::QuantizeRow(type, src.data() + r * cols, w.bytes.data() + r * row_bytes, cols);
  }
  for (int64_t r = distinct; r < rows; ++r) {
    std::memcpy(w.bytes.data() + r * row_bytes, w.bytes.data() + (r % distinct) * row_bytes,
                row_bytes);
  }
  w.view = WeightView{type, rows, cols, row_bytes, w.bytes.data()};
  return w;
}

// The float kernel table of `isa`, or null when this CPU cannot run it.
const quant::internal::KernelTable* SupportedTable(quant::internal::Isa isa) {
  for (const auto* t : quant::internal::SupportedKernels()) {
    if (t->isa == isa) return t;
  }
  return nullptr;
}

// Args: type index, ISA (0 scalar, 1 avx2, 2 avx512). One 4096-element row, in L1/L2.
void BM_DotRow(benchmark::State& state) {
  const auto type_index = static_cast<size_t>(state.range(0));
  const auto isa = static_cast<quant::internal::Isa>(state.range(1));
  const quant::internal::KernelTable* table = SupportedTable(isa);
  if (table == nullptr) {
    state.SkipWithError("ISA not supported on this CPU");
    return;
  }
  const GgmlType type = kTypes[type_index];
  const int64_t n = 4096;
  const BenchWeight w = MakeWeight(type, 1, n);
  const std::vector<float> x = RandomFloats(n, 3);
  const quant::internal::DotFn dot = quant::internal::Find(*table, type)->dot;
  for (auto _ : state) {
    benchmark::DoNotOptimize(dot(w.bytes.data(), x.data(), n));
  }
  state.SetBytesProcessed(state.iterations() * static_cast<int64_t>(w.view.row_bytes));
  state.SetLabel(std::string(kTypeNames[type_index]) + " " + quant::internal::IsaName(isa));
}
BENCHMARK(BM_DotRow)->ArgsProduct({kAllTypes, {0, 1, 2, 3}});

// A batched decode step's dots: one weight row (in L1) against `rows` activation rows, as the
// old loop of single dots (way 0) or one multi-row dot (way 1, DotRowsFn). Args: type index
// (0 F32, 1 F16, 2 BF16), ISA, rows, n, way. Time per call; compare way 0 and 1 at equal rows.
void BM_DotRows(benchmark::State& state) {
  const auto type_index = static_cast<size_t>(state.range(0));
  const auto isa = static_cast<quant::internal::Isa>(state.range(1));
  const quant::internal::KernelTable* table = SupportedTable(isa);
  if (table == nullptr) {
    state.SkipWithError("ISA not supported on this CPU");
    return;
  }
  const int rows = static_cast<int>(state.range(2));
  const int64_t n = state.range(3);
  const BenchWeight w = MakeWeight(kTypes[type_index], 1, n);
  const std::vector<float> x = RandomFloats(rows * n, 3);
  const quant::internal::TypeKernels& k = *quant::internal::Find(*table, kTypes[type_index]);
  std::vector<float> out(static_cast<size_t>(rows));
  for (auto _ : state) {
    if (state.range(4) == 1) {
      k.dot_rows(w.bytes.data(), w.view.row_bytes, 1, x.data(), n, rows, n, out.data(), 1);
    } else {
      for (int i = 0; i < rows; ++i) out[i] = k.dot(w.bytes.data(), x.data() + i * n, n);
    }
    benchmark::DoNotOptimize(out.data());
    benchmark::ClobberMemory();
  }
  state.SetLabel(std::string(kTypeNames[type_index]) + " " + quant::internal::IsaName(isa) +
                 (state.range(4) == 1 ? " multi-row" : " single dots"));
}
BENCHMARK(BM_DotRows)->ArgsProduct({{0, 1}, {1, 2}, {1, 4, 5}, {256, 4096}, {0, 1}});

// As BM_DotRow with int8 activations (Q8_K blocks, quantised outside the loop) for the
// 256-element formats; ISA 3 is AVX-512 VNNI.
void BM_DotRowQ8K(benchmark::State& state) {
  const auto type_index = static_cast<size_t>(state.range(0));
  const auto isa = static_cast<quant::internal::Isa>(state.range(1));
  const quant::internal::KernelTable* table = SupportedTable(isa);
  if (table == nullptr) {
    state.SkipWithError("ISA not supported on this CPU");
    return;
  }
  const GgmlType type = kTypes[type_index];
  const int64_t n = 4096;
  const BenchWeight w = MakeWeight(type, 1, n);
  const std::vector<float> x = RandomFloats(n, 3);
  std::vector<quant::internal::Q8KBlock> xq(n / 256);
  quant::internal::QuantizeQ8K(x.data(), xq.data(), n);
  const quant::internal::DotQ8KFn dot = quant::internal::Find(*table, type)->dot_q8k;
  for (auto _ : state) {
    benchmark::DoNotOptimize(dot(w.bytes.data(), xq.data(), n));
  }
  state.SetBytesProcessed(state.iterations() * static_cast<int64_t>(w.view.row_bytes));
  state.SetLabel(std::string(kTypeNames[type_index]) + " " + quant::internal::IsaName(isa));
}
BENCHMARK(BM_DotRowQ8K)->ArgsProduct({{9, 10, 11, 12, 13, 14}, {0, 1, 2, 3}});

void RunMatVec(benchmark::State& state, int64_t rows, int64_t cols) {
  const auto type_index = static_cast<size_t>(state.range(0));
  ThreadPool pool(static_cast<int>(state.range(1)));
  const BenchWeight w = MakeWeight(kTypes[type_index], rows, cols);
  const std::vector<float> x = RandomFloats(cols, 3);
  std::vector<float> y(static_cast<size_t>(rows));
  for (auto _ : state) {
    MatMul(w.view, MatView<const float>(x.data(), 1, cols), MatView<float>(y.data(), 1, rows),
           pool);
    benchmark::ClobberMemory();
  }
  state.SetBytesProcessed(state.iterations() * static_cast<int64_t>(w.bytes.size()));
  state.SetLabel(kTypeNames[type_index]);
}

// Args: type index, threads.
void BM_MatVec(benchmark::State& state) { RunMatVec(state, 4096, 4096); }
BENCHMARK(BM_MatVec)->ArgsProduct({kAllTypes, {1, 2}})->UseRealTime();

void BM_MatVecDram(benchmark::State& state) {
  const size_t row_bytes = quant::RowBytes(kTypes[state.range(0)], 4096);
  RunMatVec(state, static_cast<int64_t>((size_t{1} << 30) / row_bytes), 4096);
}
BENCHMARK(BM_MatVecDram)->ArgsProduct({kAllTypes, {1, 2}})->UseRealTime();

void RunGemm(benchmark::State& state, GgmlType type, int64_t n, int threads,
             const internal::MatMulTiling& tiling) {
  const int64_t rows = 4096, cols = 4096;
  ThreadPool pool(threads);
  const BenchWeight w = MakeWeight(type, rows, cols);
  const std::vector<float> x = RandomFloats(n * cols, 3);
  std::vector<float> y(static_cast<size_t>(n * rows));
  for (auto _ : state) {
    internal::MatMulTiled(w.view, MatView<const float>(x.data(), n, cols),
                          MatView<float>(y.data(), n, rows), pool, tiling);
    benchmark::ClobberMemory();
  }
  state.counters["FLOP/s"] = benchmark::Counter(2.0 * static_cast<double>(n * rows * cols),
                                                benchmark::Counter::kIsIterationInvariantRate);
}

// Args: type index, threads, GEMM (0 built-in kernel, 1 dequantised panels through cblas_sgemm).
void BM_Gemm(benchmark::State& state) {
  internal::MatMulTiling tiling;
  tiling.use_blas = state.range(2) == 1;
  RunGemm(state, kTypes[state.range(0)], 128, static_cast<int>(state.range(1)), tiling);
  state.SetLabel(std::string(kTypeNames[state.range(0)]) + (tiling.use_blas ? " blas" : ""));
}
BENCHMARK(BM_Gemm)->ArgsProduct({kAllTypes, {1, 2}, {0, 1}})->UseRealTime();

// The integer-dot path. Args: type index (3 Q8_0, 4 Q4_0), threads, ISA (0 scalar, 1 avx2,
// 2 avx512vnni), n. Skipped for an ISA this CPU lacks.
void BM_Int8(benchmark::State& state) {
  const quant::internal::Int8Kernels* tables[] = {&quant::internal::ScalarInt8Kernels(),
                                                  quant::internal::Avx2Int8Kernels(),
                                                  quant::internal::Avx512VnniInt8Kernels()};
  const quant::internal::Int8Kernels* table = tables[state.range(2)];
  if (table == nullptr || !quant::internal::CpuHasIsa(table->isa)) {
    state.SkipWithError("ISA not supported on this CPU");
    return;
  }
  internal::MatMulTiling tiling;
  tiling.int8 = table;
  RunGemm(state, kTypes[state.range(0)], state.range(3), static_cast<int>(state.range(1)), tiling);
  state.SetLabel(std::string(kTypeNames[state.range(0)]) + " " +
                 quant::internal::IsaName(table->isa));
}
BENCHMARK(BM_Int8)
    ->Name("BM_Int8Gemm")
    ->ArgsProduct({{3, 4}, {1, 2}, {1, 2}, {128}})
    ->UseRealTime();
BENCHMARK(BM_Int8)
    ->Name("BM_Int8MatVec")
    ->ArgsProduct({{3, 4}, {1, 2}, {1, 2}, {1}})
    ->UseRealTime();
// A decode batch (kDecodeBatchRows = 5 tokens at most) and the small batches below the packed
// GEMM's 16 tokens, 1 thread.
BENCHMARK(BM_Int8)
    ->Name("BM_Int8FewTokens")
    ->ArgsProduct({{3, 4}, {1}, {1, 2}, {2, 3, 5, 8, 15}})
    ->UseRealTime();

// The same over ~1 GiB of weights (DRAM-bound, as a decode step). Args as BM_Int8, n = 1.
void BM_Int8Dram(benchmark::State& state) {
  const quant::internal::Int8Kernels* tables[] = {&quant::internal::ScalarInt8Kernels(),
                                                  quant::internal::Avx2Int8Kernels(),
                                                  quant::internal::Avx512VnniInt8Kernels()};
  const quant::internal::Int8Kernels* table = tables[state.range(2)];
  if (table == nullptr || !quant::internal::CpuHasIsa(table->isa)) {
    state.SkipWithError("ISA not supported on this CPU");
    return;
  }
  const GgmlType type = kTypes[state.range(0)];
  const int64_t cols = 4096;
  const int64_t rows = static_cast<int64_t>((size_t{1} << 30) / quant::RowBytes(type, cols));
  ThreadPool pool(static_cast<int>(state.range(1)));
  const BenchWeight w = MakeWeight(type, rows, cols);
  const std::vector<float> x = RandomFloats(cols, 3);
  std::vector<float> y(static_cast<size_t>(rows));
  internal::MatMulTiling tiling;
  tiling.int8 = table;
  for (auto _ : state) {
    internal::MatMulTiled(w.view, MatView<const float>(x.data(), 1, cols),
                          MatView<float>(y.data(), 1, rows), pool, tiling);
    benchmark::ClobberMemory();
  }
  state.SetBytesProcessed(state.iterations() * static_cast<int64_t>(w.bytes.size()));
  state.SetLabel(std::string(kTypeNames[state.range(0)]) + " " +
                 quant::internal::IsaName(table->isa));
}
BENCHMARK(BM_Int8Dram)->ArgsProduct({{3, 4}, {1, 2}, {1, 2}})->UseRealTime();

// Peak arithmetic of one core, for the kernels' share of it: 12 independent chains of AVX-512
// FMAs (32 flops each) or of vpdpbusd (64 multiply-adds = 128 ops each), in registers.
#if defined(__x86_64__)
__attribute__((target("avx512f"))) float PeakFma(int64_t iters) {
  __m512 acc[12];
  for (int i = 0; i < 12; ++i) acc[i] = _mm512_set1_ps(static_cast<float>(i));
  const __m512 a = _mm512_set1_ps(0.999f), b = _mm512_set1_ps(1e-3f);
  for (int64_t it = 0; it < iters; ++it)
    for (int i = 0; i < 12; ++i) acc[i] = _mm512_fmadd_ps(acc[i], a, b);
  __m512 s = acc[0];
  for (int i = 1; i < 12; ++i) s = _mm512_add_ps(s, acc[i]);
  alignas(64) float lanes[16];  // (no reduce intrinsics: GCC 12 bug 105593 warns in them)
  _mm512_store_ps(lanes, s);
  return lanes[0] + lanes[15];
}
__attribute__((target("avx512f,avx512vnni"))) int PeakVnni(int64_t iters) {
  __m512i acc[12];
  for (int i = 0; i < 12; ++i) acc[i] = _mm512_set1_epi32(i);
  const __m512i a = _mm512_set1_epi8(3), b = _mm512_set1_epi8(-2);
  for (int64_t it = 0; it < iters; ++it)
    for (int i = 0; i < 12; ++i) acc[i] = _mm512_dpbusd_epi32(acc[i], a, b);
  __m512i s = acc[0];
  for (int i = 1; i < 12; ++i) s = _mm512_add_epi32(s, acc[i]);
  alignas(64) int lanes[16];
  _mm512_store_si512(lanes, s);
  return lanes[0] + lanes[15];
}

// Arg: 0 FMA (FLOP/s), 1 vpdpbusd (int8 ops/s). Skipped where the CPU lacks it.
void BM_Peak(benchmark::State& state) {
  const bool vnni = state.range(0) == 1;
  if (!__builtin_cpu_supports("avx512f") || (vnni && !__builtin_cpu_supports("avx512vnni"))) {
    state.SkipWithError("ISA not supported on this CPU");
    return;
  }
  constexpr int64_t kIters = 1 << 20;
  for (auto _ : state) {
    int64_t iters = kIters;
    benchmark::DoNotOptimize(iters);  // keeps the call from being hoisted out of the loop
    if (vnni) {
      benchmark::DoNotOptimize(PeakVnni(iters));
    } else {
      benchmark::DoNotOptimize(PeakFma(iters));
    }
  }
  state.counters[vnni ? "int8 op/s" : "FLOP/s"] = benchmark::Counter(
      (vnni ? 128.0 : 32.0) * 12 * kIters, benchmark::Counter::kIsIterationInvariantRate);
}
BENCHMARK(BM_Peak)->Arg(0)->Arg(1);
#endif

// Args: type index, panel rows, panel cols (K chunk); built-in kernel, 2 threads, n = 128.
void BM_GemmTiling(benchmark::State& state) {
  internal::MatMulTiling tiling;
  tiling.panel_rows = state.range(1);
  tiling.panel_cols = state.range(2);
  RunGemm(state, kTypes[state.range(0)], 128, 2, tiling);
  state.SetLabel(kTypeNames[state.range(0)]);
}
BENCHMARK(BM_GemmTiling)
    ->ArgsProduct({{0, 3}, {48, 96, 192, 384}, {256, 512, 1024, 2048}})
    ->UseRealTime();

// Args: type index, n, path (0 dots, 1 GEMM); 2 threads.
void BM_SmallBatch(benchmark::State& state) {
  internal::MatMulTiling tiling;
  tiling.small_batch = state.range(2) == 0 ? 1 << 30 : 1;
  RunGemm(state, kTypes[state.range(0)], state.range(1), 2, tiling);
  state.SetLabel(std::string(kTypeNames[state.range(0)]) + (state.range(2) ? " gemm" : " dots"));
}
BENCHMARK(BM_SmallBatch)->ArgsProduct({{0, 3, 4}, {2, 3, 4, 6, 8, 16}, {0, 1}})->UseRealTime();

// One F32 sgemm (n = 128, 4096 x 4096) on OpenBLAS's own threads; compare with BM_Gemm/0/T/1.
// Arg: OpenBLAS threads. Restores the single-threaded setting MatMul relies on.
void BM_BlasThreads(benchmark::State& state) {
  const int64_t n = 128, rows = 4096, cols = 4096;
  const BenchWeight w = MakeWeight(GgmlType::kF32, rows, cols);
  const std::vector<float> x = RandomFloats(n * cols, 3);
  std::vector<float> y(static_cast<size_t>(n * rows));
  openblas_set_num_threads(static_cast<int>(state.range(0)));
  for (auto _ : state) {
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, static_cast<int>(n),
                static_cast<int>(rows), static_cast<int>(cols), 1.0f, x.data(),
                static_cast<int>(cols), reinterpret_cast<const float*>(w.bytes.data()),
                static_cast<int>(cols), 0.0f, y.data(), static_cast<int>(rows));
    benchmark::ClobberMemory();
  }
  openblas_set_num_threads(1);
  state.counters["FLOP/s"] = benchmark::Counter(2.0 * static_cast<double>(n * rows * cols),
                                                benchmark::Counter::kIsIterationInvariantRate);
}
BENCHMARK(BM_BlasThreads)->Arg(1)->Arg(2)->UseRealTime();

// OpenBLAS picks its kernels from the CPU model at load time; an unknown model gets a generic
// core (e.g. "Prescott"), which the BLAS numbers above then reflect.
const bool kContextAdded = [] {
  benchmark::AddCustomContext("openblas_core", openblas_get_corename());
  benchmark::AddCustomContext("quant_isa",
                              quant::internal::IsaName(quant::internal::BestKernels().isa));
  return true;
}();

}  // namespace
}  // namespace primekv
