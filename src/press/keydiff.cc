// KeyDiff (Park et al., arXiv 2504.15364; kvpress presses/keydiff_press.py): keep the most
// distinctive keys. Anchor = mean of unit-normalised keys of the head; score = -cos(k, anchor).
#include "press/scorer_util.h"
#include "press/scorers.h"

namespace primekv::press_internal {
namespace {

class KeyDiffScorer : public HeadScorer {
 public:
  void ScoreHead(const LayerInput& in, int h, std::vector<float>& s) const override {
    const std::vector<double> cosine = CosineToMeanKey(in.Keys(h));
    std::transform(cosine.begin(), cosine.end(), s.begin(),
                   [](double c) { return static_cast<float>(-c); });
  }
};

}  // namespace

ScorerResult MakeKeyDiffScorer(const PressParams& p, const std::string& press) {
  return MakeScorer<KeyDiffScorer>(p, press);
}

}  // namespace primekv::press_internal
