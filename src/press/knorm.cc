// KnormPress (Devoto et al., arXiv 2406.11430; kvpress presses/knorm_press.py): keys with a
// LOW L2 norm draw more attention, so the score is -|k|. RoPE preserves the norm.
#include "press/scorer_util.h"
#include "press/scorers.h"

namespace primekv::press_internal {
namespace {

class KnormScorer : public HeadScorer {
 public:
  void ScoreHead(const LayerInput& in, int h, std::vector<float>& s) const override {
    const MatView<const float> keys = in.Keys(h);
    for (int64_t j = 0; j < keys.rows; ++j) s[j] = static_cast<float>(-Norm(keys.RowSpan(j)));
  }
};

}  // namespace

ScorerResult MakeKnormScorer(const PressParams& p, const std::string& press) {
  return MakeScorer<KnormScorer>(p, press);
}

}  // namespace primekv::press_internal
