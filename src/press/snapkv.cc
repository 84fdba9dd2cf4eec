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

class SnapKvScorer : public Scorer {
 public:
  SnapKvScorer(int window, int kernel) : window_(window), kernel_(kernel) {}
  PressNeeds Needs() const override { return {.window_queries = window_}; }
  bool ComparableAcrossHeads() const override { return true; }

  void Score(const LayerInput& in, HeadScores& out) const override {
    for (int h = 0; h < in.n_kv_heads; ++h) {
      const HeadEntries& e = in.heads[static_cast<size_t>(h)];
      auto& s = out[static_cast<size_t>(h)];
      const int n = e.size();
      const auto win = WindowRows(in, e);
      const int m = n - static_cast<int>(win.size());  // non-window entries come first
      const int w = static_cast<int>(in.window_queries.rows);
      std::vector<double> mean(static_cast<size_t>(std::max(m, 0)), 0.0);
      for (int g = 0; g < in.group(); ++g) {
        const auto p = WindowAttention(in, h * in.group() + g, e);
        std::vector<double> a(static_cast<size_t>(std::max(m, 0)), 0.0);
        for (int i = 0; i < w; ++i)
          for (int j = 0; j < m; ++j)
            a[static_cast<size_t>(j)] += p[static_cast<size_t>(i) * n + j] / w;
        const int half = kernel_ / 2;
        for (int j = 0; j < m; ++j) {
          double acc = 0;
          for (int t = j - half; t <= j + half; ++t) {
            if (t >= 0 && t < m) acc += a[static_cast<size_t>(t)];
          }
          mean[static_cast<size_t>(j)] += acc / kernel_ / in.group();
        }
      }
      for (int j = 0; j < m; ++j)
        s[static_cast<size_t>(j)] = static_cast<float>(mean[static_cast<size_t>(j)]);
      for (int j = m; j < n; ++j) s[static_cast<size_t>(j)] = 0.0f;
      Protect(s, win);
    }
  }

 private:
  int window_;
  int kernel_;
};

}  // namespace

ScorerResult MakeSnapKvScorer(const PressParams& p, const std::string& press) {
  ParamReader r(p, press);
  const int window = r.Integer("window", 64, 1, kMaxPressLength);
  const int kernel = r.Integer("kernel", 5, 1, 1023);
  if (Status s = r.Finish(); !s.ok()) return s;
  if (kernel % 2 == 0)
    return Status::Error("press " + press + ": kernel=" + std::to_string(kernel) + " must be odd");
  return std::unique_ptr<Scorer>(new SnapKvScorer(window, kernel));
}

}  // namespace primekv::press_internal
