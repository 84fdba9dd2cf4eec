// Oracle (evaluation only; docs/design.md §6): keeps the entries with the largest summed direct
// contribution a_{t,i} |W_O^(g) (o_t - v_i)| over the TRUE future queries t of every query head
// g of the KV head's group, where a and o are the future query's attention over the cached
// entries being compressed. It is the ceiling attention-free methods are measured against.
#include "press/scorer_util.h"
#include "press/scorers.h"

namespace primekv::press_internal {
namespace {

class OracleScorer : public Scorer {
 public:
  PressNeeds Needs() const override { return {.values = true, .future_queries = true}; }

  void Score(const LayerInput& in, HeadScores& out) const override {
    const int d = in.head_dim;
    const int width = in.n_heads * d;
    const int T = static_cast<int>(in.future_queries.rows);
    const double scale = 1.0 / std::sqrt(static_cast<double>(d));
    std::vector<double> m(static_cast<size_t>(d) * d);
    for (int h = 0; h < in.n_kv_heads; ++h) {
      const HeadEntries& e = in.heads[static_cast<size_t>(h)];
      const int n = e.size();
      std::vector<double> contrib(static_cast<size_t>(n), 0.0);
      for (int g = 0; g < in.group(); ++g) {
        const int qh = h * in.group() + g;
        // M_g = W_O^(g)T W_O^(g) from the d columns of W_O that read this query head.
        std::fill(m.begin(), m.end(), 0.0);
        for (int row = 0; row < in.d_model; ++row) {
          const float* w =
              in.wo_rows.data() + static_cast<size_t>(row) * width + static_cast<size_t>(qh) * d;
          for (int a = 0; a < d; ++a)
            for (int b = 0; b < d; ++b)
              m[static_cast<size_t>(a) * d + b] += static_cast<double>(w[a]) * w[b];
        }
        std::vector<double> mv(static_cast<size_t>(n) * d), vmv(static_cast<size_t>(n));
        for (int i = 0; i < n; ++i) {
          const float* v = e.values.data() + static_cast<size_t>(i) * d;
          double q = 0;
          for (int a = 0; a < d; ++a) {
            double acc = 0;
            for (int b = 0; b < d; ++b) acc += m[static_cast<size_t>(a) * d + b] * v[b];
            mv[static_cast<size_t>(i) * d + a] = acc;
            q += v[a] * acc;
          }
          vmv[static_cast<size_t>(i)] = q;
        }
        std::vector<double> a(static_cast<size_t>(n)), o(static_cast<size_t>(d)),
            mo(static_cast<size_t>(d));
        for (int t = 0; t < T; ++t) {
          const float* q = in.future_queries.Row(t) + static_cast<size_t>(qh) * d;
          double mx = -1e300;
          for (int i = 0; i < n; ++i) {
            a[static_cast<size_t>(i)] =
                Dot(q, e.keys.data() + static_cast<size_t>(i) * d, d) * scale;
            mx = std::max(mx, a[static_cast<size_t>(i)]);
          }
          double sum = 0;
          for (auto& x : a) sum += (x = std::exp(x - mx));
          std::fill(o.begin(), o.end(), 0.0);
          for (int i = 0; i < n; ++i) {
            a[static_cast<size_t>(i)] /= sum;
            for (int c = 0; c < d; ++c)
              o[static_cast<size_t>(c)] +=
                  a[static_cast<size_t>(i)] * e.values[static_cast<size_t>(i) * d + c];
          }
          double omo = 0;
          for (int r = 0; r < d; ++r) {
            double acc = 0;
            for (int c = 0; c < d; ++c)
              acc += m[static_cast<size_t>(r) * d + c] * o[static_cast<size_t>(c)];
            mo[static_cast<size_t>(r)] = acc;
            omo += o[static_cast<size_t>(r)] * acc;
          }
          for (int i = 0; i < n; ++i) {
            double cross = 0;
            for (int c = 0; c < d; ++c)
              cross += o[static_cast<size_t>(c)] * mv[static_cast<size_t>(i) * d + c];
            const double q2 = omo - 2 * cross + vmv[static_cast<size_t>(i)];
            contrib[static_cast<size_t>(i)] +=
                a[static_cast<size_t>(i)] * std::sqrt(std::max(q2, 0.0));
          }
        }
      }
      for (int i = 0; i < n; ++i)
        out[static_cast<size_t>(h)][static_cast<size_t>(i)] =
            static_cast<float>(contrib[static_cast<size_t>(i)]);
    }
  }
};

}  // namespace

ScorerResult MakeOracleScorer(const PressParams& p, const std::string& press) {
  if (Status s = ParamReader(p, press).Finish(); !s.ok()) return s;
  return std::unique_ptr<Scorer>(new OracleScorer());
}

}  // namespace primekv::press_internal
