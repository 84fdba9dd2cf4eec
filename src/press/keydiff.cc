// KeyDiff (Park et al., arXiv 2504.15364; kvpress presses/keydiff_press.py): keep the most
// distinctive keys. Anchor = mean of unit-normalised keys of the head; score = -cos(k, anchor).
#include "press/scorer_util.h"
#include "press/scorers.h"

namespace primekv::press_internal {
namespace {

class KeyDiffScorer : public Scorer {
 public:
  void Score(const LayerInput& in, HeadScores& out) const override {
    for (int h = 0; h < in.n_kv_heads(); ++h) {
      const std::vector<double> cosine = CosineToMeanKey(in.Keys(h));
      for (size_t j = 0; j < cosine.size(); ++j) out[h][j] = static_cast<float>(-cosine[j]);
    }
  }
};

}  // namespace

ScorerResult MakeKeyDiffScorer(const PressParams& p, const std::string& press) {
  if (Status s = ParamReader(p, press).Finish(); !s.ok()) return s;
  return std::unique_ptr<Scorer>(new KeyDiffScorer());
}

}  // namespace primekv::press_internal
