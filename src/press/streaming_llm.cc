// StreamingLLM (Xiao et al., arXiv 2309.17453; kvpress presses/streaming_llm_press.py):
// keep n_sink = 4 attention sinks and the most recent entries. With n entries and keep k,
// rows [n_sink, n_sink + n - k) score 0, all others 1.
#include "press/scorer_util.h"
#include "press/scorers.h"

namespace primekv::press_internal {
namespace {

class StreamingLlmScorer : public Scorer {
 public:
  explicit StreamingLlmScorer(int n_sink) : n_sink_(n_sink) {}
  void Score(const LayerInput& in, HeadScores& out) const override {
    // The recency ranking alone decides: score 1 for sinks, and the row index for the rest
    // (later = higher), so any budget keeps the sinks plus the newest entries.
    for (int h = 0; h < in.n_kv_heads; ++h) {
      auto& s = out[static_cast<size_t>(h)];
      const int n = static_cast<int>(s.size());
      for (int j = 0; j < n; ++j) {
        s[static_cast<size_t>(j)] = j < n_sink_ ? static_cast<float>(n + 1) : static_cast<float>(j);
      }
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
