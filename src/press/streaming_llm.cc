// StreamingLLM (Xiao et al., arXiv 2309.17453; kvpress presses/streaming_llm_press.py):
// keep n_sink = 4 attention sinks and the most recent entries. The score is a recency rank:
// each of the first n_sink rows scores n + 1 (above every other row), row j >= n_sink scores j,
// so a budget of k keeps the sinks and the newest k - n_sink rows.
#include "press/scorer_util.h"
#include "press/scorers.h"

namespace primekv::press_internal {
namespace {

class StreamingLlmScorer : public HeadScorer {
  int n_sink_;

 public:
  explicit StreamingLlmScorer(ParamReader& r)
      : n_sink_(r.Integer("n_sink", 4, 0, kMaxPressLength)) {}

  void ScoreHead(const LayerInput&, int, std::vector<float>& s) const override {
    const int n = static_cast<int>(s.size());
    for (int j = 0; j < n; ++j) s[j] = static_cast<float>(j < n_sink_ ? n + 1 : j);
  }
};

}  // namespace

ScorerResult MakeStreamingLlmScorer(const PressParams& p, const std::string& press) {
  return MakeScorer<StreamingLlmScorer>(p, press);
}

}  // namespace primekv::press_internal
