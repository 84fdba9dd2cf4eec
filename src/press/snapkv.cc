// SnapKV (Li et al., arXiv 2404.14469; kvpress presses/snapkv_press.py), defaults window 64,
// kernel 5. The last `window` context queries attend (softmax over every entry, causal); the
// probabilities of the non-window entries are averaged over the window, average-pooled along
// the sequence (kernel 5, zero padding counted), and averaged over the KV head's query group.
// Window entries score max + 1 and so are always kept. PyramidKV reuses these scores with its
// own layer budget (budget policy "pyramid").
#include "press/scorer_util.h"
#include "press/scorers.h"

namespace primekv::press_internal {
namespace {

class SnapKvScorer : public HeadScorer {
  int window_;
  int kernel_;

 public:
  explicit SnapKvScorer(ParamReader& r)
      : window_(r.Integer("window", 64, 1, kMaxPressLength)),
        kernel_(r.Integer("kernel", 5, 1, 1023)) {
    r.Require(kernel_ % 2 == 1, "kernel=" + std::to_string(kernel_) + " must be odd");
  }
  PressNeeds Needs() const override { return {.window_queries = window_}; }
  bool ComparableAcrossHeads() const override { return true; }

  void ScoreHead(const LayerInput& in, int h, std::vector<float>& s) const override {
    const HeadEntries& e = in.heads[h];
    const auto win = WindowRows(in, e);
    const int m = std::max(e.size() - static_cast<int>(win.size()), 0);  // non-window first
    std::vector<double> mean(m, 0.0);
    for (int g = 0; g < in.group(); ++g) {
      const std::vector<double> a = WindowMean(WindowAttention(in, h * in.group() + g, h), m);
      const int half = kernel_ / 2;
      for (int j = 0; j < m; ++j) {
        double acc = 0;  // average pooling, zero padding counted
        for (int t = std::max(j - half, 0); t <= std::min(j + half, m - 1); ++t) acc += a[t];
        mean[j] += acc / kernel_ / in.group();
      }
    }
    for (int j = 0; j < e.size(); ++j) s[j] = j < m ? static_cast<float>(mean[j]) : 0.0f;
    Protect(s, win);
  }

 private:
  // Mean over the window queries of the probabilities of the first m entries.
  static std::vector<double> WindowMean(const Mat<double>& p, int m) {
    std::vector<double> a(m, 0.0);
    for (int64_t i = 0; i < p.rows(); ++i)
      for (int j = 0; j < m; ++j) a[j] += p(i, j) / static_cast<double>(p.rows());
    return a;
  }
};

}  // namespace

ScorerResult MakeSnapKvScorer(const PressParams& p, const std::string& press) {
  return MakeScorer<SnapKvScorer>(p, press);
}

}  // namespace primekv::press_internal
