// Small helpers shared by scorers.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <initializer_list>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <type_traits>
#include <utility>
#include <vector>

#include "primekv/attention/attention.h"
#include "primekv/util/mat.h"
#include "primekv/press/press.h"

namespace primekv::press_internal {

inline double Dot(const float* a, const float* b, int64_t n) { return DotF64(a, b, n); }
inline double Norm(const float* a, int64_t n) { return NormF64(a, n); }
inline double Dot(std::span<const float> a, std::span<const float> b) {
  return DotF64(a.data(), b.data(), static_cast<int64_t>(a.size()));
}
inline double Norm(std::span<const float> a) { return Norm(a.data(), std::ssize(a)); }

// Sets the given rows to max(score) + 1 so they survive any top-k (they still count).
inline void Protect(std::vector<float>& s, std::span<const int32_t> rows) {
  if (s.empty()) return;
  const float top = *std::max_element(s.begin(), s.end()) + 1.0f;
  for (int32_t r : rows) s[static_cast<size_t>(r)] = top;
}
// Protects the first min(n, count) rows (attention sinks).
void ProtectFirst(std::vector<float>& s, int count);

// Softmax probabilities of the window queries of one query head over KV head h's entries,
// causal by position, in double: p(i, j) for window query i and entry j.
Mat<double> WindowAttention(const LayerInput& in, int query_head, int h);

// Rows of `e` whose position is one of the window positions.
std::vector<int32_t> WindowRows(const LayerInput& in, const HeadEntries& e);

// cos(k_i, kbar) for each row of keys [n, d], kbar the mean of the unit-normalised keys
// (KeyDiff's anchor; PrimeKV's key=cosine).
std::vector<double> CosineToMeanKey(MatView<const float> keys);

}  // namespace primekv::press_internal

namespace primekv::press_internal {

// Largest window, sink or lag a press parameter may name (tokens).
inline constexpr int kMaxPressLength = 1 << 24;

// Reads typed parameters of press `press` and remembers which keys were used, so unknown keys
// are reported. Numbers must be finite and in range; integers must be written as integers.
// Every key read is recorded with the value it took, given or fallback, in canonical text
// (integers in decimal, reals in their shortest round-trip form, words as listed): Resolved()
// is the press's full parameter set, so a changed default changes it.
class ParamReader {
 public:
  ParamReader(const PressParams& p, std::string press) : params_(p), press_(std::move(press)) {}
  int Integer(const std::string& key, int fallback, int lo, int hi);
  int64_t Integer64(const std::string& key, int64_t fallback, int64_t lo, int64_t hi);
  double Real(const std::string& key, double fallback, double lo, double hi);
  std::string Text(const std::string& key, const std::string& fallback);
  // One of a fixed set of words, mapped to its value; any other word is an error that lists
  // the choices.
  template <typename T>
  T Choice(const std::string& key, const std::string& fallback,
           std::span<const std::pair<std::string_view, T>> choices) {
    std::vector<std::string_view> names;
    for (const auto& c : choices) names.push_back(c.first);
    return choices[ChoiceIndex(key, fallback, names)].second;
  }
  // Marks `key` as known without recording a value (another reader of the same parameters
  // reads it: PyramidKV's budget passes "kernel" on to SnapKV's scorer).
  void Defer(const std::string& key) { used_.push_back(key); }
  // Error naming the press and the first bad or unknown key; OK otherwise.
  Status Finish() const;
  // Each key read so far with its effective value.
  const PressParams& Resolved() const { return resolved_; }

 private:
  // An error (the first one recorded is the one Finish reports) unless `ok`.
 public:
  void Require(bool ok, const std::string& message) {
    if (!ok) Fail(message);
  }

 private:
  void Fail(const std::string& message);
  // True for a value that parsed and is in range; otherwise the error is recorded.
  bool Accept(const std::string& key, const std::string& text, bool parsed, bool in_range,
              std::string_view kind, const std::string& range);
  // The value of `key` (nullptr when absent), and `key` recorded as known.
  const std::string* Lookup(const std::string& key);
  // Index of the word in `names` (0, with the error recorded, when it is none of them).
  size_t ChoiceIndex(const std::string& key, const std::string& fallback,
                     std::span<const std::string_view> names);
  const PressParams& params_;
  std::string press_;
  std::vector<std::string> used_;
  PressParams resolved_;
  std::string error_;
};

// A scorer whose KV heads are scored independently: Score runs ScoreHead for each.
class HeadScorer : public Scorer {
 public:
  void Score(const LayerInput& in, HeadScores& out) const final {
    for (int h = 0; h < in.n_kv_heads(); ++h) ScoreHead(in, h, out[h]);
  }
  // s: KV head h's scores, sized to its entries and zero-filled.
  virtual void ScoreHead(const LayerInput& in, int h, std::vector<float>& s) const = 0;
};

// The factory of scorer S, which reads its parameters from a ParamReader in its constructor
// (or takes none): unknown or bad parameters are errors naming the press.
template <typename S>
Result<std::unique_ptr<Scorer>> MakeScorer(const PressParams& p, const std::string& press) {
  ParamReader r(p, press);
  std::unique_ptr<Scorer> s;
  if constexpr (std::is_constructible_v<S, ParamReader&>) {
    s = std::make_unique<S>(r);
  } else {
    s = std::make_unique<S>();
  }
  PRIMEKV_RETURN_IF_ERROR(r.Finish());
  s->set_resolved_params(r.Resolved());
  return s;
}

}  // namespace primekv::press_internal
