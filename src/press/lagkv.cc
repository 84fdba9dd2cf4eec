// LagKV (Liang et al., arXiv 2504.04704; kvpress presses/lagkv_press.py), defaults n_sink 4,
// lag L 128, no cross scoring. Each partition of L entries is scored against the NEXT
// partition: entries are min-max scaled channel-wise by the next partition's range, their
// (unbiased) std over channels is soft-maxed within the partition, for keys and for values, and
// averaged; the final score is the rank within the partition divided by L. Sinks and the tail
// (last full partition plus remainder) score 1. Ties across partitions: lower position first.
#include <numeric>

#include "press/scorer_util.h"
#include "press/scorers.h"

namespace primekv::press_internal {
namespace {

class LagKvScorer : public Scorer {
 public:
  LagKvScorer(int n_sink, int lag) : n_sink_(n_sink), lag_(lag) {}
  PressNeeds Needs() const override { return {.values = true}; }

  void Score(const LayerInput& in, HeadScores& out) const override {
    for (int h = 0; h < in.n_kv_heads; ++h)
      ScoreHead(in.heads[static_cast<size_t>(h)], in.head_dim, out[static_cast<size_t>(h)]);
  }

 private:
  // Softmax over the partition of std(scaled rows), for one of keys/values.
  void PartitionSoftmax(const std::vector<float>& x, int d, int begin, int ref,
                        std::vector<double>& out) const {
    const int L = lag_;
    std::vector<double> lo(static_cast<size_t>(d), 1e300), hi(static_cast<size_t>(d), -1e300);
    for (int t = ref; t < ref + L; ++t) {
      for (int c = 0; c < d; ++c) {
        const double v = x[static_cast<size_t>(t) * d + c];
        lo[static_cast<size_t>(c)] = std::min(lo[static_cast<size_t>(c)], v);
        hi[static_cast<size_t>(c)] = std::max(hi[static_cast<size_t>(c)], v);
      }
    }
    std::vector<double> sd(static_cast<size_t>(L));
    for (int t = 0; t < L; ++t) {
      double mean = 0, sq = 0;
      std::vector<double> y(static_cast<size_t>(d));
      for (int c = 0; c < d; ++c) {
        const double range =
            std::max(hi[static_cast<size_t>(c)] - lo[static_cast<size_t>(c)], 1e-6);
        y[static_cast<size_t>(c)] =
            (x[static_cast<size_t>(begin + t) * d + c] - lo[static_cast<size_t>(c)]) / range;
        mean += y[static_cast<size_t>(c)];
      }
      mean /= d;
      for (double v : y) sq += (v - mean) * (v - mean);
      sd[static_cast<size_t>(t)] = std::sqrt(sq / std::max(1, d - 1));
    }
    const double mx = *std::max_element(sd.begin(), sd.end());
    double sum = 0;
    for (auto& v : sd) sum += (v = std::exp(v - mx));
    out.resize(static_cast<size_t>(L));
    for (int t = 0; t < L; ++t) out[static_cast<size_t>(t)] = sd[static_cast<size_t>(t)] / sum;
  }

  void ScoreHead(const HeadEntries& e, int d, std::vector<float>& s) const {
    const int n = e.size();
    if (n < n_sink_ + 2 * lag_) {
      for (int j = 0; j < n; ++j) {
        s[static_cast<size_t>(j)] =
            j < n_sink_ ? 1.0f : static_cast<float>(j - n_sink_) / (n - n_sink_);
      }
      return;
    }
    const int parts = (n - n_sink_) / lag_;
    std::fill(s.begin(), s.end(), 1.0f);  // sinks and tail
    std::vector<double> ks, vs;
    std::vector<int> order(static_cast<size_t>(lag_));
    for (int c = 0; c + 1 < parts; ++c) {
      const int begin = n_sink_ + c * lag_;
      PartitionSoftmax(e.keys, d, begin, begin + lag_, ks);
      PartitionSoftmax(e.values, d, begin, begin + lag_, vs);
      std::vector<double> combined(static_cast<size_t>(lag_));
      for (int t = 0; t < lag_; ++t)
        combined[static_cast<size_t>(t)] =
            (ks[static_cast<size_t>(t)] + vs[static_cast<size_t>(t)]) / 2;
      std::iota(order.begin(), order.end(), 0);
      std::stable_sort(order.begin(), order.end(), [&](int a, int b) {
        return combined[static_cast<size_t>(a)] < combined[static_cast<size_t>(b)];
      });
      for (int rank = 0; rank < lag_; ++rank) {
        s[static_cast<size_t>(begin + order[static_cast<size_t>(rank)])] =
            static_cast<float>(rank) / lag_;
      }
    }
  }

  int n_sink_;
  int lag_;
};

}  // namespace

ScorerResult MakeLagKvScorer(const PressParams& p, const std::string& press) {
  ParamReader r(p, press);
  const int n_sink = r.Integer("n_sink", 4, 0, kMaxPressLength);
  const int lag = r.Integer("lag", 128, 2, kMaxPressLength);
  if (Status s = r.Finish(); !s.ok()) return s;
  return std::unique_ptr<Scorer>(new LagKvScorer(n_sink, lag));
}

}  // namespace primekv::press_internal
