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
std::vector<double> LocalLeverage(MatView<const float> x) {
  const int n = static_cast<int>(x.rows);
  std::vector<double> s(x.rows);
  for (int j = 0; j < n; ++j) s[j] = Dot(x.RowSpan(j), x.RowSpan(j));
  for (int w0 = 0; w0 < n; w0 += kWindow) {
    const int w1 = std::min(n, w0 + kWindow);
    double sum = 0;
    for (int j = w0; j < w1; ++j) sum += s[j];
    for (int j = w0; j < w1; ++j) s[j] = sum > 0 ? s[j] / sum : 0.0;
  }
  return s;
}

class CurDkvScorer : public HeadScorer {
 public:
  PressNeeds Needs() const override { return {.values = true}; }

  // p_j = k2_j v2_j / sum_i k2_i v2_i, the sinks on top.
  void ScoreHead(const LayerInput& in, int h, std::vector<float>& s) const override {
    if (s.empty()) return;
    const std::vector<double> k2 = LocalLeverage(in.Keys(h));
    const std::vector<double> v2 = LocalLeverage(in.Values(h));
    double total = 0;
    for (size_t j = 0; j < s.size(); ++j) total += k2[j] * v2[j];
    for (size_t j = 0; j < s.size(); ++j)
      s[j] = static_cast<float>(total > 0 ? k2[j] * v2[j] / total : 0.0);
    ProtectFirst(s, kSinks);
  }
};

}  // namespace

ScorerResult MakeCurDkvScorer(const PressParams& p, const std::string& press) {
  return MakeScorer<CurDkvScorer>(p, press);
}

}  // namespace primekv::press_internal
