// Expected Attention (Devoto et al., arXiv 2510.00636; kvpress
// presses/expected_attention_press.py). Context queries (pre-RoPE, positions >= n_sink) give a
// Gaussian N(mu, Sigma) per query head; the RoPE rotation averaged over the next T = 512
// positions, Rbar, moves it to mu' = Rbar mu, Sigma' = Rbar Sigma Rbar^T; the expected logit of
// key k is mu'.k / sqrt(d) + k^T Sigma' k / (2 d). Its softmax over the non-sink entries,
// averaged over the query group, times |v| plus epsilon, is the score; sinks score max + 1.
// The registry's "expected_attention" wraps this in AdaKV with epsilon 1e-2, as kvpress's
// evaluation registry does.
#include <cmath>
#include <numbers>
#include <tuple>
#include <utility>

#include "press/scorer_util.h"
#include "press/scorers.h"

namespace primekv::press_internal {
namespace {

// Mean of (cos, sin)(p w) over p = p0 .. p0 + T - 1, in closed form, so the cost does not grow
// with T (a loop over `future` took a minute per compression at future = 2^24). For integer t,
// e^{i t w} = e^{i t delta} with delta = w reduced to [-pi, pi], and the mean of e^{i t delta}
// over t < T is the geometric series e^{i (T - 1) delta / 2} sin(T delta / 2) / (T sin(delta /
// 2)), accurate however small delta is.
std::pair<double, double> MeanRotation(double p0, int T, double w) {
  const double delta = std::remainder(w, 2 * std::numbers::pi);
  const double s = std::sin(0.5 * delta);
  const double ratio = s == 0 ? 1.0 : std::sin(0.5 * T * delta) / (T * s);
  const double phase = p0 * w + 0.5 * (T - 1) * delta;
  return {std::cos(phase) * ratio, std::sin(phase) * ratio};
}

// Rbar: the RoPE rotation averaged over positions next .. next + future - 1, as a dense d x d
// matrix (per rotated pair [[c, -s], [s, c]]; identity on dimensions RoPE leaves alone).
Mat<double> AveragedRotation(const LayerInput& in, int future) {
  const int d = in.head_dim();
  const int half = static_cast<int>(in.rope_inv_freq.size());
  std::vector<double> cbar(half, 0.0), sbar(half, 0.0);
  for (int i = 0; i < half; ++i) {
    std::tie(cbar[i], sbar[i]) =
        MeanRotation(static_cast<double>(in.next_position), future, in.rope_inv_freq[i]);
  }
  Mat<double> R(d, d);
  for (int c = 0; c < d; ++c) R(c, c) = 1.0;
  for (int i = 0; i < half; ++i) {
    const int a = in.rope_half() ? i : 2 * i;
    const int b = in.rope_half() ? i + half : 2 * i + 1;
    R(a, a) = cbar[i];
    R(a, b) = -sbar[i];
    R(b, a) = sbar[i];
    R(b, b) = cbar[i];
  }
  return R;
}

// The Gaussian of query head qh's future queries: mu' = Rbar mu, Sigma' = Rbar Sigma Rbar^T.
struct QueryGaussian {
  std::vector<double> mu;
  Mat<double> sigma;
};

QueryGaussian FutureQueries(const QueryStats& qs, int qh, int d, const Mat<double>& R) {
  const double count = static_cast<double>(std::max<int64_t>(qs.count, 1));
  const MatView<const double> sum(qs.sum.data(), qs.sum.size() / d, d);
  const MatView<const double> sum_sq(qs.sum_sq.data() + static_cast<int64_t>(qh) * d * d, d, d);
  std::vector<double> mu(d);
  for (int a = 0; a < d; ++a) mu[a] = sum(qh, a) / count;
  Mat<double> sigma(d, d);
  for (int a = 0; a < d; ++a)
    for (int b = 0; b < d; ++b) sigma(a, b) = sum_sq(a, b) / count - mu[a] * mu[b];
  QueryGaussian out{std::vector<double>(d), Mat<double>(d, d)};
  for (int a = 0; a < d; ++a) {
    double acc = 0;
    for (int b = 0; b < d; ++b) acc += R(a, b) * mu[b];
    out.mu[a] = acc;
  }
  Mat<double> tmp(d, d);  // R Sigma
  for (int a = 0; a < d; ++a)
    for (int b = 0; b < d; ++b) {
      double acc = 0;
      for (int c = 0; c < d; ++c) acc += R(a, c) * sigma(c, b);
      tmp(a, b) = acc;
    }
  for (int a = 0; a < d; ++a)
    for (int b = 0; b < d; ++b) {
      double acc = 0;
      for (int c = 0; c < d; ++c) acc += tmp(a, c) * R(b, c);
      out.sigma(a, b) = acc;
    }
  return out;
}

class ExpectedAttentionScorer : public Scorer {
  int future_;
  int n_sink_;
  double epsilon_;
  bool use_vnorm_;

 public:
  explicit ExpectedAttentionScorer(ParamReader& r)
      : future_(r.Integer("future", 512, 1, kMaxPressLength)),
        n_sink_(r.Integer("n_sink", 4, 0, kMaxPressLength)),
        epsilon_(r.Real("epsilon", 1e-2, 0, 1e6)),
        use_vnorm_(r.Integer("vnorm", 1, 0, 1) != 0) {}
  PressNeeds Needs() const override { return {.values = use_vnorm_, .query_stats = true}; }
  bool ComparableAcrossHeads() const override { return true; }

  void Score(const LayerInput& in, HeadScores& out) const override {
    const Mat<double> R = AveragedRotation(in, future_);
    for (int h = 0; h < in.n_kv_heads(); ++h) {
      const MatView<const float> keys = in.Keys(h);
      const int n = static_cast<int>(keys.rows);
      // Expected attention over the non-sink entries, averaged over the query group.
      std::vector<double> prob(n, 0.0);
      for (int g = 0; g < in.group(); ++g) {
        const QueryGaussian q = FutureQueries(*in.query_stats, h * in.group() + g, keys.cols, R);
        const std::vector<double> p = ExpectedSoftmax(q, keys);
        for (int j = n_sink_; j < n; ++j) prob[j] += p[j - n_sink_] / in.group();
      }
      // score = (p_j + epsilon) |v_j|, sinks protected.
      std::vector<float>& s = out[h];
      for (int j = 0; j < n; ++j) {
        const double vn = use_vnorm_ ? Norm(in.Values(h).RowSpan(j)) : 1.0;
        s[j] = j < n_sink_ ? 0.0f : static_cast<float>((prob[j] + epsilon_) * vn);
      }
      ProtectFirst(s, n_sink_);
    }
  }

 private:
  // softmax_j over entries j >= n_sink of the expected logit mu'.k_j / sqrt(d) + k_j^T Sigma'
  // k_j / (2d).
  std::vector<double> ExpectedSoftmax(const QueryGaussian& q, MatView<const float> keys) const {
    const int d = static_cast<int>(keys.cols);
    std::vector<double> z(std::max<int64_t>(keys.rows - n_sink_, 0));
    for (size_t j = 0; j < z.size(); ++j) {
      const float* k = keys.Row(n_sink_ + static_cast<int64_t>(j));
      double lin = 0, quad = 0;
      for (int a = 0; a < d; ++a) {
        lin += q.mu[a] * k[a];
        double row = 0;
        for (int b = 0; b < d; ++b) row += q.sigma(a, b) * k[b];
        quad += k[a] * row;
      }
      z[j] = lin / std::sqrt(static_cast<double>(d)) + quad / (2.0 * d);
    }
    MaskedSoftmax(z);
    return z;
  }
};

}  // namespace

ScorerResult MakeExpectedAttentionScorer(const PressParams& p, const std::string& press) {
  return MakeScorer<ExpectedAttentionScorer>(p, press);
}

}  // namespace primekv::press_internal
