// Lookback (research): an entry's score is the attention the context's own later tokens gave
// it in the prefill, the largest (or mean) softmax probability over those queries and over the
// query heads of its KV head's group. KVzip measures the same quantity from a second pass that
// repeats the context; this reads the queries the prefill already computed. The first 4
// positions and the entries no later query saw score max + 1.
#include <limits>

#include "press/scorer_util.h"
#include "press/scorers.h"

namespace primekv::press_internal {
namespace {

constexpr int kSinks = 4;

enum class Reduce { kMax, kMean };
constexpr std::pair<std::string_view, Reduce> kReduces[] = {{"max", Reduce::kMax},
                                                            {"mean", Reduce::kMean}};

class LookbackScorer : public HeadScorer {
  int skip_;
  Reduce reduce_;

 public:
  explicit LookbackScorer(ParamReader& r)
      : skip_(r.Integer("skip", 1, 1, 1 << 20)),
        reduce_(r.Choice<Reduce>("reduce", "max", kReduces)) {}
  PressNeeds Needs() const override { return {.window_queries = kMaxPressLength}; }
  bool ComparableAcrossHeads() const override { return true; }
  bool ComparableAcrossLayers() const override { return true; }

  void ScoreHead(const LayerInput& in, int h, std::vector<float>& s) const override {
    const HeadEntries& e = in.heads[h];
    const int n = e.size();
    std::vector<double> best(n, 0.0);
    std::vector<int> seen(n, 0);
    for (int g = 0; g < in.group(); ++g) {
      const Mat<double> p = WindowAttention(in, h * in.group() + g, h);
      for (int64_t i = 0; i < p.rows(); ++i) {
        const int32_t q_pos = in.window_positions[static_cast<size_t>(i)];
        for (int j = 0; j < n; ++j) {
          if (e.positions[static_cast<size_t>(j)] + skip_ > q_pos) continue;
          const double v = p(i, j);
          if (reduce_ == Reduce::kMax) {
            best[j] = std::max(best[j], v);
          } else {
            best[j] += v;
          }
          ++seen[j];
        }
      }
    }
    std::vector<int32_t> keep;
    for (int j = 0; j < n; ++j) {
      if (seen[j] == 0 || e.positions[static_cast<size_t>(j)] < kSinks) {
        keep.push_back(j);
        continue;
      }
      s[j] = static_cast<float>(reduce_ == Reduce::kMax ? best[j] : best[j] / seen[j]);
    }
    Protect(s, keep);
  }
};

}  // namespace

ScorerResult MakeLookbackScorer(const PressParams& p, const std::string& press) {
  return MakeScorer<LookbackScorer>(p, press);
}

}  // namespace primekv::press_internal
