// Oracle (evaluation only; docs/design.md §6): keeps the entries with the largest summed direct
// contribution a_{t,i} |W_O^(g) (o_t - v_i)| over the TRUE future queries t of every query head
// g of the KV head's group, where a and o are the future query's attention over the cached
// entries being compressed. It is the ceiling attention-free methods are measured against.
#include "press/scorer_util.h"
#include "press/scorers.h"

namespace primekv::press_internal {
namespace {

// M_g = W_O^(g)T W_O^(g) from the d columns of W_O [d_model, n_heads * d] that read query
// head qh.
Mat<double> HeadGram(MatView<const float> wo, int qh, int d) {
  Mat<double> m(d, d);
  for (int64_t row = 0; row < wo.rows; ++row) {
    const float* w = wo.Row(row) + static_cast<int64_t>(qh) * d;
    for (int a = 0; a < d; ++a)
      for (int b = 0; b < d; ++b) m(a, b) += static_cast<double>(w[a]) * w[b];
  }
  return m;
}

// y = M x for a d x d matrix in double; returns x^T M x.
double QuadForm(const Mat<double>& m, std::span<const double> x, std::span<double> y) {
  double q = 0;
  for (int64_t r = 0; r < m.rows(); ++r) {
    double acc = 0;
    for (int64_t c = 0; c < m.cols(); ++c) acc += m(r, c) * x[c];
    y[r] = acc;
    q += x[r] * acc;
  }
  return q;
}

class OracleScorer : public HeadScorer {
 public:
  PressNeeds Needs() const override {
    return {.values = true, .future_queries = true, .output_weights = true};
  }

  void ScoreHead(const LayerInput& in, int h, std::vector<float>& s) const override {
    std::vector<double> contrib(s.size(), 0.0);
    for (int g = 0; g < in.group(); ++g) AddHead(in, h, h * in.group() + g, contrib);
    std::copy(contrib.begin(), contrib.end(), s.begin());
  }

 private:
  // contrib_i += sum_t a_{t,i} sqrt((o_t - v_i)^T M_g (o_t - v_i)) over the future queries of
  // query head qh, expanded as o^T M o - 2 o^T M v_i + v_i^T M v_i.
  static void AddHead(const LayerInput& in, int h, int qh, std::vector<double>& contrib) {
    const int d = in.head_dim();
    const MatView<const float> keys = in.Keys(h), values = in.Values(h);
    const int64_t n = keys.rows;
    const Mat<double> m = HeadGram(in.output_weights, qh, d);
    Mat<double> mv(n, d);  // M v_i
    std::vector<double> vmv(n), v(d);
    for (int64_t i = 0; i < n; ++i) {
      std::copy_n(values.Row(i), d, v.begin());
      vmv[i] = QuadForm(m, v, mv.RowSpan(i));
    }
    const MatView<const float> q = in.QueryHead(in.future_queries, qh);
    const double scale = in.config.QkScale();
    std::vector<double> a(n), o(d), mo(d);
    for (int64_t t = 0; t < q.rows; ++t) {
      for (int64_t i = 0; i < n; ++i)
        a[i] = in.config.SoftCap(Dot(q.Row(t), keys.Row(i), d) * scale);
      MaskedSoftmax(a);
      std::fill(o.begin(), o.end(), 0.0);
      for (int64_t i = 0; i < n; ++i)
        for (int c = 0; c < d; ++c) o[c] += a[i] * values(i, c);
      const double omo = QuadForm(m, o, mo);
      for (int64_t i = 0; i < n; ++i) {
        double cross = 0;
        for (int c = 0; c < d; ++c) cross += o[c] * mv(i, c);
        contrib[i] += a[i] * std::sqrt(std::max(omo - 2 * cross + vmv[i], 0.0));
      }
    }
  }
};

}  // namespace

ScorerResult MakeOracleScorer(const PressParams& p, const std::string& press) {
  return MakeScorer<OracleScorer>(p, press);
}

}  // namespace primekv::press_internal
