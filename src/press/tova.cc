// TOVA (Oren et al., arXiv 2401.06104; kvpress presses/tova_press.py): the attention of the
// last context token, averaged over ALL query heads, so every KV head keeps the same positions.
// The last token itself scores max + 1. When heads already hold different positions (a ragged
// cache left by another press), the average runs over each KV head's own query group instead.
#include "press/scorer_util.h"
#include "press/scorers.h"

namespace primekv::press_internal {
namespace {

class TovaScorer : public Scorer {
 public:
  PressNeeds Needs() const override { return {.window_queries = 1}; }
  bool ComparableAcrossHeads() const override { return true; }

  void Score(const LayerInput& in, HeadScores& out) const override {
    bool aligned = true;
    for (const HeadEntries& e : in.heads) aligned = aligned && e.positions == in.heads[0].positions;
    std::vector<double> total;
    for (int h = 0; h < in.n_kv_heads(); ++h) {
      const int n = in.heads[h].size();
      std::vector<double> sum(n, 0.0);  // the last token's attention, summed over the group
      for (int g = 0; g < in.group(); ++g) {
        const Mat<double> p = WindowAttention(in, h * in.group() + g, h);  // one row
        for (int j = 0; j < n; ++j) sum[j] += p(0, j);
      }
      if (aligned) {
        if (total.empty()) total.assign(n, 0.0);
        for (int j = 0; j < n; ++j) total[j] += sum[j] / in.n_heads();
      } else {
        Fill(in, h, sum, 1.0 / in.group(), out[h]);
      }
    }
    if (aligned) {
      for (int h = 0; h < in.n_kv_heads(); ++h) Fill(in, h, total, 1.0, out[h]);
    }
  }

 private:
  static void Fill(const LayerInput& in, int h, const std::vector<double>& v, double scale,
                   std::vector<float>& s) {
    for (size_t j = 0; j < s.size(); ++j) s[j] = static_cast<float>(v[j] * scale);
    Protect(s, WindowRows(in, in.heads[h]));
  }
};

}  // namespace

ScorerResult MakeTovaScorer(const PressParams& p, const std::string& press) {
  return MakeScorer<TovaScorer>(p, press);
}

}  // namespace primekv::press_internal
