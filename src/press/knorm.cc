// KnormPress (Devoto et al., arXiv 2406.11430; kvpress presses/knorm_press.py): keys with a
// LOW L2 norm draw more attention, so the score is -|k|. RoPE preserves the norm.
#include "press/scorer_util.h"
#include "press/scorers.h"

namespace primekv::press_internal {
namespace {

class KnormScorer : public Scorer {
 public:
  void Score(const LayerInput& in, HeadScores& out) const override {
    for (int h = 0; h < in.n_kv_heads(); ++h) {
      const MatView<const float> k = in.Keys(h);
      for (int j = 0; j < k.rows; ++j) out[h][j] = static_cast<float>(-Norm(k.RowSpan(j)));
    }
  }
};

}  // namespace

ScorerResult MakeKnormScorer(const PressParams& p, const std::string& press) {
  if (Status s = ParamReader(p, press).Finish(); !s.ok()) return s;
  return std::unique_ptr<Scorer>(new KnormScorer());
}

}  // namespace primekv::press_internal
