// Small helpers shared by scorers.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "primekv/press.h"

namespace primekv::press_internal {

inline double Dot(const float* a, const float* b, int n) {
  double s = 0;
  for (int i = 0; i < n; ++i) s += static_cast<double>(a[i]) * b[i];
  return s;
}

inline double Norm(const float* a, int n) { return std::sqrt(Dot(a, a, n)); }

// Sets the given rows to max(score) + 1 so they survive any top-k (they still count).
inline void Protect(std::vector<float>& s, std::span<const int32_t> rows) {
  if (s.empty()) return;
  const float top = *std::max_element(s.begin(), s.end()) + 1.0f;
  for (int32_t r : rows) s[static_cast<size_t>(r)] = top;
}

// Softmax probabilities of the window queries of one query head over the head's entries,
// causal by position, in double: probs[i * n + j]. Keys/positions from `e`.
std::vector<double> WindowAttention(const LayerInput& in, int query_head, const HeadEntries& e);

// Rows of `e` whose position is one of the window positions.
std::vector<int32_t> WindowRows(const LayerInput& in, const HeadEntries& e);

}  // namespace primekv::press_internal

namespace primekv::press_internal {

// Largest window, sink or lag a press parameter may name (tokens).
inline constexpr int kMaxPressLength = 1 << 24;

// Reads typed parameters of press `press` and remembers which keys were used, so unknown keys
// are reported. Numbers must be finite and in range; integers must be written as integers.
class ParamReader {
 public:
  ParamReader(const PressParams& p, std::string press) : params_(p), press_(std::move(press)) {}
  int Integer(const std::string& key, int fallback, int lo, int hi);
  int64_t Integer64(const std::string& key, int64_t fallback, int64_t lo, int64_t hi);
  double Real(const std::string& key, double fallback, double lo, double hi);
  std::string Text(const std::string& key, const std::string& fallback);
  // Error naming the press and the first bad or unknown key; OK otherwise.
  Status Finish() const;

 private:
  void Fail(const std::string& message);
  const PressParams& params_;
  std::string press_;
  std::vector<std::string> used_;
  std::string error_;
};

}  // namespace primekv::press_internal
