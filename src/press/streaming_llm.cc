// StreamingLLM (Xiao et al., arXiv 2309.17453; kvpress presses/streaming_llm_press.py):
// keep n_sink = 4 attention sinks and the most recent entries. The score is a recency rank:
// each of the first n_sink rows scores n + 1 (above every other row), row j >= n_sink scores j,
// so a budget of k keeps the sinks and the newest k - n_sink rows.
#include "press/scorer_util.h"
#include "press/scorers.h"

namespace primekv::press_internal {
namespace {

class StreamingLlmScorer : public Scorer {
 public:
  explicit StreamingLlmScorer(int n_sink) : n_sink_(n_sink) {}
  void Score(const LayerInput& in, HeadScores& out) const override {
    for (int h = 0; h < in.n_kv_heads(); ++h) {
      std::vector<float>& s = out[h];
      const int n = static_cast<int>(s.size());
      for (int j = 0; j < n; ++j) s[j] = static_cast<float>(j < n_sink_ ? n + 1 : j);
    }
  }

 private:
  int n_sink_;
};

}  // namespace

ScorerResult MakeStreamingLlmScorer(const PressParams& p, const std::string& press) {
  ParamReader r(p, press);
  const int n_sink = r.Integer("n_sink", 4, 0, kMaxPressLength);
  if (Status s = r.Finish(); !s.ok()) return s;
  return std::unique_ptr<Scorer>(new StreamingLlmScorer(n_sink));
}

}  // namespace primekv::press_internal
