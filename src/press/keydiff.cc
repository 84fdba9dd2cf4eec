// KeyDiff (Park et al., arXiv 2504.15364; kvpress presses/keydiff_press.py): keep the most
// distinctive keys. Anchor = mean of unit-normalised keys of the head; score = -cos(k, anchor).
#include "press/scorer_util.h"
#include "press/scorers.h"

namespace primekv::press_internal {
namespace {

class KeyDiffScorer : public Scorer {
 public:
  void Score(const LayerInput& in, HeadScores& out) const override {
    const int d = in.head_dim;
    std::vector<double> anchor(static_cast<size_t>(d));
    for (int h = 0; h < in.n_kv_heads; ++h) {
      const HeadEntries& e = in.heads[static_cast<size_t>(h)];
      std::fill(anchor.begin(), anchor.end(), 0.0);
      for (int j = 0; j < e.size(); ++j) {
        const float* k = e.keys.data() + static_cast<size_t>(j) * d;
        const double inv = 1.0 / std::max(Norm(k, d), 1e-12);
        for (int c = 0; c < d; ++c) anchor[static_cast<size_t>(c)] += k[c] * inv;
      }
      double an = 0;
      for (double a : anchor) an += a * a;
      an = std::max(std::sqrt(an), 1e-12);
      for (int j = 0; j < e.size(); ++j) {
        const float* k = e.keys.data() + static_cast<size_t>(j) * d;
        double dot = 0;
        for (int c = 0; c < d; ++c) dot += k[c] * anchor[static_cast<size_t>(c)];
        out[static_cast<size_t>(h)][static_cast<size_t>(j)] =
            static_cast<float>(-dot / (std::max(Norm(k, d), 1e-12) * an));
      }
    }
  }
};

}  // namespace

ScorerResult MakeKeyDiffScorer(const PressParams& p, const std::string& press) {
  if (Status s = ParamReader(p, press).Finish(); !s.ok()) return s;
  return std::unique_ptr<Scorer>(new KeyDiffScorer());
}

}  // namespace primekv::press_internal
