// A small owning row-major matrix for scratch (scores, Gram matrices, rotations), so scorer
// code indexes m(r, c) and passes MatView instead of doing index arithmetic by hand.
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <span>
#include <vector>

#include "primekv/util/tensor.h"

namespace primekv {

template <typename T>
class Mat {
 public:
  Mat() = default;
  Mat(int64_t rows, int64_t cols, T fill = T{})
      : rows_(rows), cols_(cols), data_(static_cast<size_t>(rows * cols), fill) {}

  int64_t rows() const { return rows_; }
  int64_t cols() const { return cols_; }
  T* data() { return data_.data(); }
  const T* data() const { return data_.data(); }
  T& operator()(int64_t r, int64_t c) { return data_[static_cast<size_t>(r * cols_ + c)]; }
  const T& operator()(int64_t r, int64_t c) const {
    return data_[static_cast<size_t>(r * cols_ + c)];
  }
  T* Row(int64_t r) { return data_.data() + r * cols_; }
  const T* Row(int64_t r) const { return data_.data() + r * cols_; }
  std::span<T> RowSpan(int64_t r) { return {Row(r), static_cast<size_t>(cols_)}; }
  std::span<const T> RowSpan(int64_t r) const { return {Row(r), static_cast<size_t>(cols_)}; }
  MatView<T> view() { return {data_.data(), rows_, cols_}; }
  MatView<const T> view() const { return {data_.data(), rows_, cols_}; }
  void Fill(T v) { std::fill(data_.begin(), data_.end(), v); }
  // Reshapes, keeping the allocation when it is large enough; contents are unspecified.
  void Resize(int64_t rows, int64_t cols) {
    rows_ = rows;
    cols_ = cols;
    data_.resize(static_cast<size_t>(rows * cols));
  }

 private:
  int64_t rows_ = 0;
  int64_t cols_ = 0;
  std::vector<T> data_;
};

}  // namespace primekv
