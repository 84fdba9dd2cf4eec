// Non-owning 2-D views and the weight-matrix view used by every matmul.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>

#include "primekv/util/dtype.h"

namespace primekv {

// Row-major view: element (r, c) is data[r * stride + c].
template <typename T>
struct MatView {
  T* data = nullptr;
  int64_t rows = 0;
  int64_t cols = 0;
  int64_t stride = 0;

  MatView() = default;
  MatView(T* d, int64_t r, int64_t c) : data(d), rows(r), cols(c), stride(c) {}
  MatView(T* d, int64_t r, int64_t c, int64_t s) : data(d), rows(r), cols(c), stride(s) {}
  template <typename U>
  MatView(const MatView<U>& o)  // NOLINT(google-explicit-constructor): T* from U* only
      : data(o.data), rows(o.rows), cols(o.cols), stride(o.stride) {}

  T* Row(int64_t r) const { return data + r * stride; }
  std::span<T> RowSpan(int64_t r) const { return {Row(r), static_cast<size_t>(cols)}; }
  T& operator()(int64_t r, int64_t c) const { return data[r * stride + c]; }
  bool empty() const { return rows == 0 || cols == 0; }
};

// A weight matrix as stored in GGUF: `rows` rows of `cols` elements (GGUF ne = [cols, rows]),
// each row encoded in `type` and `row_bytes` long. Points into the memory-mapped file.
struct WeightView {
  GgmlType type = GgmlType::kF32;
  int64_t rows = 0;
  int64_t cols = 0;
  size_t row_bytes = 0;
  const uint8_t* data = nullptr;

  const uint8_t* Row(int64_t r) const { return data + static_cast<size_t>(r) * row_bytes; }
  bool empty() const { return data == nullptr; }
};

}  // namespace primekv
