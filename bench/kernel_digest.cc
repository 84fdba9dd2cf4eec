// Prints a 64-bit digest of every kernel's output on fixed inputs, one line per (family, ISA)
// that this CPU runs. A refactor of the kernels that must keep results bit-identical is checked
// by running this before and after and comparing the lines (diff). Not a test: the digests
// depend on the compiler and its flags, so they are compared between two builds of one setup.
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <random>
#include <vector>

#include "primekv/attention/softmax_kernels.h"
#include "primekv/quant/dense.h"
#include "primekv/util/dtype.h"
#include "primekv/quant/quant.h"
#include "primekv/util/thread_pool.h"
#include "quant/int8_gemm.h"
#include "quant/int8_matmul.h"
#include "quant/kernels.h"

namespace primekv {
namespace {

using quant::internal::KernelTable;
using quant::internal::TypeKernels;

// FNV-1a over the bytes of everything added.
struct Digest {
  uint64_t h = 1469598103934665603ull;
  void Add(const void* p, size_t n) {
    const auto* b = static_cast<const uint8_t*>(p);
    for (size_t i = 0; i < n; ++i) h = (h ^ b[i]) * 1099511628211ull;
  }
  template <class T>
  void Add(const std::vector<T>& v) {
    Add(v.data(), v.size() * sizeof(T));
  }
  void Add(float f) { Add(&f, sizeof(f)); }
};

std::vector<float> Floats(uint64_t seed, size_t n, float scale) {
  std::mt19937_64 rng(seed);
  std::uniform_real_distribution<float> u(-scale, scale);
  std::vector<float> v(n);
  for (float& f : v) f = u(rng);
  return v;
}

void Print(const char* family, const char* isa, const Digest& d) {
  std::printf("%-12s %-11s %016llx\n", family, isa, static_cast<unsigned long long>(d.h));
}

// Dots, dequantisation, quantisation and int8-activation dots of one type in one table.
void DigestType(const KernelTable& table, GgmlType type, Digest& d) {
  const TypeKernels* k = quant::internal::Find(table, type);
  const TypeKernels* ref = quant::internal::Find(quant::internal::ScalarKernels(), type);
  const int block = quant::internal::BlockSize(type);
  for (int64_t n : {int64_t{256}, int64_t{1024 + 256}, int64_t{4096}}) {
    if (block == 1) n += 13;  // odd tails for the plain types
    const std::vector<float> x = Floats(static_cast<uint64_t>(n), static_cast<size_t>(n), 2.0f);
    const std::vector<float> w = Floats(static_cast<uint64_t>(n) + 1, static_cast<size_t>(n), 1.5f);
    std::vector<uint8_t> row(quant::RowBytes(type, n));
    ref->quantize(w.data(), row.data(), n);
    d.Add(k->dot(row.data(), x.data(), n));
    std::vector<float> out(static_cast<size_t>(n));
    k->dequantize(row.data(), out.data(), n);
    d.Add(out);
    if (k->quantize != nullptr) {
      std::vector<uint8_t> q(row.size());
      k->quantize(w.data(), q.data(), n);
      d.Add(q);
    }
    if (k->dot_q8k != nullptr && n % 256 == 0) {
      std::vector<quant::internal::Q8KBlock> xq(static_cast<size_t>(n / 256));
      quant::internal::QuantizeQ8K(x.data(), xq.data(), n);
      d.Add(xq.data(), xq.size() * sizeof(xq[0]));
      d.Add(k->dot_q8k(row.data(), xq.data(), n));
    }
  }
}

void DigestGemmTile(const KernelTable& table, Digest& d) {
  const int group = table.gemm_group;
  const int64_t kc = 37;
  const std::vector<float> xp = Floats(11, static_cast<size_t>(kc * group), 1.0f);
  const std::vector<float> w = Floats(12, static_cast<size_t>(table.gemm_rows * 64), 1.0f);
  for (int rows = 1; rows <= table.gemm_rows; ++rows) {
    for (int tokens : {1, group / 2, group}) {
      for (bool accumulate : {false, true}) {
        std::vector<float> acc = Floats(13, static_cast<size_t>(rows * group), 1.0f);
        table.gemm_tile(xp.data(), tokens, w.data(), 64, rows, kc, acc.data(), accumulate);
        // Lanes past `tokens` in a skipped vector are unspecified; digest the real ones.
        for (int j = 0; j < rows; ++j) d.Add(acc.data() + j * group, sizeof(float) * tokens);
      }
    }
  }
}

void DigestFloatTables() {
  static constexpr GgmlType kTypes[] = {
      GgmlType::kF32,  GgmlType::kF16,  GgmlType::kBF16, GgmlType::kQ8_0,   GgmlType::kQ4_0,
      GgmlType::kQ4_1, GgmlType::kQ5_0, GgmlType::kQ5_1, GgmlType::kIQ4_NL, GgmlType::kQ2_K,
      GgmlType::kQ3_K, GgmlType::kQ4_K, GgmlType::kQ5_K, GgmlType::kQ6_K,   GgmlType::kIQ4_XS};
  for (const KernelTable* table : quant::internal::SupportedKernels()) {
    const char* isa = quant::internal::IsaName(table->isa);
    for (GgmlType type : kTypes) {
      Digest d;
      DigestType(*table, type, d);
      char family[32];
      std::snprintf(family, sizeof(family), "row.%s", TypeInfo(type)->name.data());
      Print(family, isa, d);
    }
    Digest g;
    DigestGemmTile(*table, g);
    Print("gemm_tile", isa, g);
  }
}

void DigestInt8Tables() {
  ThreadPool pool(1);
  const int64_t rows = 37, tokens = 5, cols = 512;
  const std::vector<float> x = Floats(21, static_cast<size_t>(tokens * cols), 2.0f);
  const std::vector<float> w = Floats(22, static_cast<size_t>(rows * cols), 1.0f);
  for (const auto* table : quant::internal::SupportedInt8Kernels()) {
    std::vector<int8_t> q;
    std::vector<float> dq;
    std::vector<int32_t> sum;
    quant::internal::Q8Rows a;
    internal::QuantizeActivations(MatView<const float>(x.data(), tokens, cols), *table, q, dq, sum,
                                  a, pool);
    Digest d;
    d.Add(q);
    d.Add(dq);
    d.Add(sum);
    for (GgmlType type : {GgmlType::kQ8_0, GgmlType::kQ4_0}) {
      const size_t row_bytes = quant::RowBytes(type, cols);
      std::vector<uint8_t> wq(row_bytes * rows);
      for (int64_t r = 0; r < rows; ++r) {
        quant::QuantizeRow(type, w.data() + r * cols, wq.data() + r * row_bytes, cols);
      }
      std::vector<float> out(static_cast<size_t>(tokens * rows));
      quant::internal::FindQ8Gemm(*table, type)(wq.data(), row_bytes, rows, a, out.data(), rows);
      d.Add(out);
    }
    Print("int8_gemm", quant::internal::IsaName(table->isa), d);
  }
}

void DigestSoftmax() {
  namespace ai = attention_internal;
  for (const ai::SoftmaxKernels* k :
       {&ai::ScalarSoftmax(), ai::Avx2Softmax(), ai::Avx512Softmax()}) {
    if (k == nullptr || !ai::CpuRunsSoftmax(*k)) continue;
    Digest d;
    for (int n : {1, 7, 16, 37, 300}) {
      std::vector<float> s = Floats(static_cast<uint64_t>(31 + n), static_cast<size_t>(n), 20.0f);
      const float m = k->row_max(s.data(), n, -1e30f);
      d.Add(m);
      d.Add(k->exp_sum(s.data(), n, m));
      d.Add(s);
      k->scale(s.data(), n, 0.37f);
      d.Add(s);
    }
    for (int dim : {16, 20, 64}) {
      const int rows = 3, count = 37, lds = 40;
      const std::vector<float> q = Floats(41, static_cast<size_t>(rows * dim), 1.0f);
      const std::vector<float> kk = Floats(42, static_cast<size_t>(count * dim), 1.0f);
      std::vector<float> s(static_cast<size_t>(rows * lds), 0.0f);
      k->scores(q.data(), rows, kk.data(), count, dim, 0.125f, s.data(), lds);
      d.Add(s);
    }
    Print("softmax", k->isa, d);
  }
}

void DigestDense() {
  Digest d;
  for (int m : {1, 4, 9}) {
    for (int n : {5, 32, 70}) {
      const int k = 23;
      const std::vector<float> a = Floats(51, static_cast<size_t>(m * k), 1.0f);
      const std::vector<float> b = Floats(52, static_cast<size_t>(k * n), 1.0f);
      for (float beta : {0.0f, 1.0f, 0.5f}) {
        std::vector<float> c = Floats(53, static_cast<size_t>(m * n), 1.0f);
        dense::GemmNN(m, n, k, 0.75f, a.data(), k, b.data(), n, beta, c.data(), n);
        d.Add(c);
        c = Floats(53, static_cast<size_t>(m * n), 1.0f);
        dense::GemmTN(m, n, k, 0.75f, a.data(), m, b.data(), n, beta, c.data(), n);
        d.Add(c);
      }
    }
  }
  Print("dense", "best", d);
}

}  // namespace
}  // namespace primekv

int main() {
  primekv::DigestFloatTables();
  primekv::DigestInt8Tables();
  primekv::DigestSoftmax();
  primekv::DigestDense();
  return 0;
}
