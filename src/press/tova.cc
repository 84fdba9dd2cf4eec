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
    for (int h = 1; h < in.n_kv_heads; ++h) {
      aligned = aligned && in.heads[static_cast<size_t>(h)].positions == in.heads[0].positions;
    }
    std::vector<double> total;
    for (int h = 0; h < in.n_kv_heads; ++h) {
      const HeadEntries& e = in.heads[static_cast<size_t>(h)];
      const int n = e.size();
      std::vector<double> sum(static_cast<size_t>(n), 0.0);
      for (int g = 0; g < in.group(); ++g) {
        const auto p = WindowAttention(in, h * in.group() + g, e);  // one row
        for (int j = 0; j < n; ++j) sum[static_cast<size_t>(j)] += p[static_cast<size_t>(j)];
      }
      if (aligned) {
        if (total.empty()) total.assign(static_cast<size_t>(n), 0.0);
        for (int j = 0; j < n; ++j)
          total[static_cast<size_t>(j)] += sum[static_cast<size_t>(j)] / in.n_heads;
      } else {
        Fill(e, sum, 1.0 / in.group(), in, out[static_cast<size_t>(h)]);
      }
    }
    if (aligned) {
      for (int h = 0; h < in.n_kv_heads; ++h) {
        Fill(in.heads[static_cast<size_t>(h)], total, 1.0, in, out[static_cast<size_t>(h)]);
      }
    }
  }

 private:
  static void Fill(const HeadEntries& e, const std::vector<double>& v, double scale,
                   const LayerInput& in, std::vector<float>& s) {
    for (int j = 0; j < e.size(); ++j)
      s[static_cast<size_t>(j)] = static_cast<float>(v[static_cast<size_t>(j)] * scale);
    Protect(s, WindowRows(in, e));
  }
};

}  // namespace

ScorerResult MakeTovaScorer(const PressParams& p, const std::string& press) {
  if (Status s = ParamReader(p, press).Finish(); !s.ok()) return s;
  return std::unique_ptr<Scorer>(new TovaScorer());
}

}  // namespace primekv::press_internal
