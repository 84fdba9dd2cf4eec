// LagKV (Liang et al., arXiv 2504.04704; kvpress presses/lagkv_press.py), defaults n_sink 4,
// lag L 128, no cross scoring. Each partition of L entries is scored against the NEXT
// partition: entries are min-max scaled channel-wise by the next partition's range, their
// (unbiased) std over channels is soft-maxed within the partition, for keys and for values, and
// averaged; the final score is the rank within the partition divided by L. Sinks and the tail
// (last full partition plus remainder) score 1. Ties across partitions: lower position first.
#include <limits>
#include <numeric>

#include "press/scorer_util.h"
#include "press/scorers.h"

namespace primekv::press_internal {
namespace {

class LagKvScorer : public HeadScorer {
  int n_sink_;
  int lag_;

 public:
  explicit LagKvScorer(ParamReader& r)
      : n_sink_(r.Integer("n_sink", 4, 0, kMaxPressLength)),
        lag_(r.Integer("lag", 128, 2, kMaxPressLength)) {}
  PressNeeds Needs() const override { return {.values = true}; }

  void ScoreHead(const LayerInput& in, int h, std::vector<float>& s) const override {
    ScorePartitions(in.Keys(h), in.Values(h), s);
  }

 private:
  // Softmax over the partition of L rows starting at `begin` of std(rows scaled channel-wise
  // by the min-max range of the L rows starting at `ref`), for one of keys/values.
  std::vector<double> PartitionSoftmax(MatView<const float> x, int begin, int ref) const {
    const int L = lag_, d = static_cast<int>(x.cols);
    std::vector<double> lo(d, std::numeric_limits<double>::infinity());
    std::vector<double> hi(d, -std::numeric_limits<double>::infinity());
    for (int t = ref; t < ref + L; ++t) {
      for (int c = 0; c < d; ++c) {
        lo[c] = std::min<double>(lo[c], x(t, c));
        hi[c] = std::max<double>(hi[c], x(t, c));
      }
    }
    std::vector<double> sd(L), y(d);
    for (int t = 0; t < L; ++t) {
      double mean = 0, sq = 0;
      for (int c = 0; c < d; ++c) {
        y[c] = (x(begin + t, c) - lo[c]) / std::max(hi[c] - lo[c], 1e-6);
        mean += y[c];
      }
      mean /= d;
      for (double v : y) sq += (v - mean) * (v - mean);
      sd[t] = std::sqrt(sq / std::max(1, d - 1));
    }
    MaskedSoftmax(sd);
    return sd;
  }

  void ScorePartitions(MatView<const float> keys, MatView<const float> values,
                       std::vector<float>& s) const {
    const int n = static_cast<int>(keys.rows);
    if (n < n_sink_ + 2 * lag_) {
      for (int j = 0; j < n; ++j)
        s[j] = j < n_sink_ ? 1.0f : static_cast<float>(j - n_sink_) / (n - n_sink_);
      return;
    }
    const int parts = (n - n_sink_) / lag_;
    std::fill(s.begin(), s.end(), 1.0f);  // sinks and tail
    std::vector<double> combined(lag_);
    std::vector<int> order(lag_);
    for (int c = 0; c + 1 < parts; ++c) {
      const int begin = n_sink_ + c * lag_;
      const std::vector<double> ks = PartitionSoftmax(keys, begin, begin + lag_);
      const std::vector<double> vs = PartitionSoftmax(values, begin, begin + lag_);
      for (int t = 0; t < lag_; ++t) combined[t] = (ks[t] + vs[t]) / 2;
      std::iota(order.begin(), order.end(), 0);
      std::stable_sort(order.begin(), order.end(),
                       [&](int a, int b) { return combined[a] < combined[b]; });
      for (int rank = 0; rank < lag_; ++rank)
        s[begin + order[rank]] = static_cast<float>(rank) / lag_;
    }
  }
};

}  // namespace

ScorerResult MakeLagKvScorer(const PressParams& p, const std::string& press) {
  return MakeScorer<LagKvScorer>(p, press);
}

}  // namespace primekv::press_internal
