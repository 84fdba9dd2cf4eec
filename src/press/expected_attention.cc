// Expected Attention (Devoto et al., arXiv 2510.00636; kvpress
// presses/expected_attention_press.py). Context queries (pre-RoPE, positions >= n_sink) give a
// Gaussian N(mu, Sigma) per query head; the RoPE rotation averaged over the next T = 512
// positions, Rbar, moves it to mu' = Rbar mu, Sigma' = Rbar Sigma Rbar^T; the expected logit of
// key k is mu'.k / sqrt(d) + k^T Sigma' k / (2 d). Its softmax over the non-sink entries,
// averaged over the query group, times |v| plus epsilon, is the score; sinks score max + 1.
// The registry's "expected_attention" wraps this in AdaKV with epsilon 1e-2, as kvpress's
// evaluation registry does.
#include "press/scorer_util.h"
#include "press/scorers.h"

namespace primekv::press_internal {
namespace {

class ExpectedAttentionScorer : public Scorer {
 public:
  ExpectedAttentionScorer(int future, int n_sink, double epsilon, bool use_vnorm)
      : future_(future), n_sink_(n_sink), epsilon_(epsilon), use_vnorm_(use_vnorm) {}
  PressNeeds Needs() const override { return {.values = use_vnorm_, .query_stats = true}; }
  bool ComparableAcrossHeads() const override { return true; }

  void Score(const LayerInput& in, HeadScores& out) const override {
    const int d = in.head_dim;
    const int half = static_cast<int>(in.rope_inv_freq.size());
    // Averaged rotation per pair: [[c, -s], [s, c]].
    std::vector<double> cbar(static_cast<size_t>(half), 0.0), sbar(static_cast<size_t>(half), 0.0);
    for (int t = 0; t < future_; ++t) {
      const double p = static_cast<double>(in.next_position) + t;
      for (int i = 0; i < half; ++i) {
        cbar[static_cast<size_t>(i)] +=
            std::cos(p * in.rope_inv_freq[static_cast<size_t>(i)]) / future_;
        sbar[static_cast<size_t>(i)] +=
            std::sin(p * in.rope_inv_freq[static_cast<size_t>(i)]) / future_;
      }
    }
    // Rbar as a dense d x d matrix (identity on dimensions RoPE leaves alone).
    std::vector<double> R(static_cast<size_t>(d) * d, 0.0);
    for (int c = 0; c < d; ++c) R[static_cast<size_t>(c) * d + c] = 1.0;
    for (int i = 0; i < half; ++i) {
      const int a = in.rope_half ? i : 2 * i;
      const int b = in.rope_half ? i + half : 2 * i + 1;
      R[static_cast<size_t>(a) * d + a] = cbar[static_cast<size_t>(i)];
      R[static_cast<size_t>(a) * d + b] = -sbar[static_cast<size_t>(i)];
      R[static_cast<size_t>(b) * d + a] = sbar[static_cast<size_t>(i)];
      R[static_cast<size_t>(b) * d + b] = cbar[static_cast<size_t>(i)];
    }
    const QueryStats& qs = *in.query_stats;
    const double count = static_cast<double>(std::max<int64_t>(qs.count, 1));
    std::vector<double> mu(static_cast<size_t>(d)), sigma(static_cast<size_t>(d) * d),
        mu2(static_cast<size_t>(d)), tmp(static_cast<size_t>(d) * d),
        sigma2(static_cast<size_t>(d) * d);
    for (int h = 0; h < in.n_kv_heads; ++h) {
      const HeadEntries& e = in.heads[static_cast<size_t>(h)];
      const int n = e.size();
      std::vector<double> prob(static_cast<size_t>(n), 0.0);
      for (int g = 0; g < in.group(); ++g) {
        const int qh = h * in.group() + g;
        for (int a = 0; a < d; ++a)
          mu[static_cast<size_t>(a)] = qs.sum[static_cast<size_t>(qh) * d + a] / count;
        for (int a = 0; a < d; ++a)
          for (int b = 0; b < d; ++b)
            sigma[static_cast<size_t>(a) * d + b] =
                qs.sum_sq[(static_cast<size_t>(qh) * d + a) * d + b] / count -
                mu[static_cast<size_t>(a)] * mu[static_cast<size_t>(b)];
        for (int a = 0; a < d; ++a) {
          double acc = 0;
          for (int b = 0; b < d; ++b)
            acc += R[static_cast<size_t>(a) * d + b] * mu[static_cast<size_t>(b)];
          mu2[static_cast<size_t>(a)] = acc;
        }
        // sigma2 = R sigma R^T
        for (int a = 0; a < d; ++a)
          for (int b = 0; b < d; ++b) {
            double acc = 0;
            for (int c = 0; c < d; ++c)
              acc += R[static_cast<size_t>(a) * d + c] * sigma[static_cast<size_t>(c) * d + b];
            tmp[static_cast<size_t>(a) * d + b] = acc;
          }
        for (int a = 0; a < d; ++a)
          for (int b = 0; b < d; ++b) {
            double acc = 0;
            for (int c = 0; c < d; ++c)
              acc += tmp[static_cast<size_t>(a) * d + c] * R[static_cast<size_t>(b) * d + c];
            sigma2[static_cast<size_t>(a) * d + b] = acc;
          }
        std::vector<double> z(static_cast<size_t>(n), -1e300);
        double mx = -1e300;
        for (int j = n_sink_; j < n; ++j) {
          const float* k = e.keys.data() + static_cast<size_t>(j) * d;
          double lin = 0, quad = 0;
          for (int a = 0; a < d; ++a) {
            lin += mu2[static_cast<size_t>(a)] * k[a];
            double row = 0;
            for (int b = 0; b < d; ++b) row += sigma2[static_cast<size_t>(a) * d + b] * k[b];
            quad += k[a] * row;
          }
          z[static_cast<size_t>(j)] = lin / std::sqrt(static_cast<double>(d)) + quad / (2.0 * d);
          mx = std::max(mx, z[static_cast<size_t>(j)]);
        }
        double sum = 0;
        for (int j = n_sink_; j < n; ++j) sum += std::exp(z[static_cast<size_t>(j)] - mx);
        for (int j = n_sink_; j < n; ++j) {
          prob[static_cast<size_t>(j)] +=
              std::exp(z[static_cast<size_t>(j)] - mx) / sum / in.group();
        }
      }
      auto& s = out[static_cast<size_t>(h)];
      std::vector<int32_t> sinks;
      for (int j = 0; j < n; ++j) {
        if (j < n_sink_) {
          sinks.push_back(j);
          s[static_cast<size_t>(j)] = 0;
          continue;
        }
        const double vn = use_vnorm_ ? Norm(e.values.data() + static_cast<size_t>(j) * d, d) : 1.0;
        s[static_cast<size_t>(j)] =
            static_cast<float>((prob[static_cast<size_t>(j)] + epsilon_) * vn);
      }
      Protect(s, sinks);
    }
  }

 private:
  int future_;
  int n_sink_;
  double epsilon_;
  bool use_vnorm_;
};

}  // namespace

ScorerResult MakeExpectedAttentionScorer(const PressParams& p, const std::string& press) {
  ParamReader r(p, press);
  const int future = r.Integer("future", 512, 1, kMaxPressLength);
  const int n_sink = r.Integer("n_sink", 4, 0, kMaxPressLength);
  const double eps = r.Real("epsilon", 1e-2, 0, 1e6);
  const bool vnorm = r.Integer("vnorm", 1, 0, 1) != 0;
  if (Status s = r.Finish(); !s.ok()) return s;
  return std::unique_ptr<Scorer>(new ExpectedAttentionScorer(future, n_sink, eps, vnorm));
}

}  // namespace primekv::press_internal
