// CurDKV (Sengupta et al., arXiv 2509.15038; kvpress presses/cur_press.py defaults): approximate
// CUR leverage scores of keys and values. Squared row norms |k_j|^2 and |v_j|^2 are the
// length-squared sampling probabilities of a CUR decomposition; each is normalised within
// consecutive windows of 16 entries (local approximation), the score is their product, and the
// first 4 entries (attention sinks) are protected with max + 1.
#include "press/scorer_util.h"
#include "press/scorers.h"

namespace primekv::press_internal {
namespace {

constexpr int kWindow = 16;
constexpr int kSinks = 4;

// |x_j|^2 divided by the sum over its window of kWindow rows (0 where that sum is 0).
std::vector<double> LocalLeverage(const std::vector<float>& x, int n, int d) {
  std::vector<double> s(static_cast<size_t>(n));
  for (int j = 0; j < n; ++j) {
    const float* r = x.data() + static_cast<size_t>(j) * d;
    s[static_cast<size_t>(j)] = Dot(r, r, d);
  }
  for (int w0 = 0; w0 < n; w0 += kWindow) {
    const int w1 = std::min(n, w0 + kWindow);
    double sum = 0;
    for (int j = w0; j < w1; ++j) sum += s[static_cast<size_t>(j)];
    for (int j = w0; j < w1; ++j)
      s[static_cast<size_t>(j)] = sum > 0 ? s[static_cast<size_t>(j)] / sum : 0.0;
  }
  return s;
}

class CurDkvScorer : public Scorer {
 public:
  PressNeeds Needs() const override { return {.values = true}; }

  void Score(const LayerInput& in, HeadScores& out) const override {
    const int d = in.head_dim;
    for (int h = 0; h < in.n_kv_heads; ++h) {
      const HeadEntries& e = in.heads[static_cast<size_t>(h)];
      const int n = e.size();
      auto& s = out[static_cast<size_t>(h)];
      if (n == 0) continue;
      const std::vector<double> k2 = LocalLeverage(e.keys, n, d);
      const std::vector<double> v2 = LocalLeverage(e.values, n, d);
      double total = 0;
      for (int j = 0; j < n; ++j) total += k2[static_cast<size_t>(j)] * v2[static_cast<size_t>(j)];
      for (int j = 0; j < n; ++j) {
        const double p = k2[static_cast<size_t>(j)] * v2[static_cast<size_t>(j)];
        s[static_cast<size_t>(j)] = static_cast<float>(total > 0 ? p / total : 0.0);
      }
      std::vector<int32_t> sinks;
      for (int j = 0; j < std::min(n, kSinks); ++j) sinks.push_back(j);
      Protect(s, sinks);
    }
  }
};

}  // namespace

ScorerResult MakeCurDkvScorer(const PressParams& p, const std::string& press) {
  if (Status s = ParamReader(p, press).Finish(); !s.ok()) return s;
  return std::unique_ptr<Scorer>(new CurDkvScorer());
}

}  // namespace primekv::press_internal
