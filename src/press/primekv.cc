// PrimeKV (Zhang & Ilvovsky, Neurocomputing): attention-free scores from the cache itself. The
// paper's formulas are not public; docs/design.md derives this score from the exact removal
// identity D_i = a_i (o_{-i} - v_i), with the query that would need entry i modelled as q = k_i:
//   key side   r_i = k_i . (k_i - kbar) / sqrt(d): mean-field log-attention of that query
//   value side c_i = sqrt((v_i - vbar)^T M (v_i - vbar)), M = sum_{h in group} W_O^(h)T W_O^(h)
//   score      r_i + log c_i  (the identity's a_i * c_i, with a_i an exponential)
// Variants (docs/design.md §4): key=self|selfexact|leverage|cosine|none,
// value=wo_centered|wo|centered|norm|none, combine=logit|product|rank, rounds=one|halving
// (set-aware successive halving). The first reconstruction was key=leverage,combine=product.
// Cost per KV head is O(n d^2) (W_O Gram quadratic form); key=leverage adds a Cholesky factor,
// key=selfexact an O(n^2 d) pass with no n x n matrix kept.
#include "press/scorer_util.h"
#include "press/scorers.h"
#include "primekv/dense.h"

namespace primekv::press_internal {
namespace {

enum class KeySide { kLeverage, kCosine, kSelf, kSelfExact, kNone };
enum class ValueSide { kWoCentered, kWo, kCentered, kNorm, kNone };
enum class Combine { kProduct, kRank, kLogit };

// Relative diagonal jitter keeping the Cholesky factorisation defined for rank-deficient keys
// (fewer entries than dimensions, duplicated keys): a safeguard, not a tuning knob.
constexpr double kJitter = 1e-6;

std::vector<double> Mean(const std::vector<float>& x, int n, int d) {
  std::vector<double> m(static_cast<size_t>(d), 0.0);
  for (int i = 0; i < n; ++i)
    for (int c = 0; c < d; ++c) m[static_cast<size_t>(c)] += x[static_cast<size_t>(i) * d + c];
  for (auto& v : m) v /= std::max(n, 1);
  return m;
}

std::vector<float> Centered(const std::vector<float>& x, int n, int d,
                            const std::vector<double>& m) {
  std::vector<float> out(static_cast<size_t>(n) * d);
  for (int i = 0; i < n; ++i)
    for (int c = 0; c < d; ++c)
      out[static_cast<size_t>(i) * d + c] =
          static_cast<float>(x[static_cast<size_t>(i) * d + c] - m[static_cast<size_t>(c)]);
  return out;
}

// Leverage of each centred row: |L^-1 x_i|^2 with G = Kc^T Kc = L L^T.
void Leverage(const std::vector<float>& kc, int n, int d, std::vector<double>& r) {
  // Gram in double, accumulated from float products of row blocks.
  std::vector<double> g(static_cast<size_t>(d) * d, 0.0);
  std::vector<float> block(static_cast<size_t>(d) * d);
  constexpr int kRows = 512;
  for (int i0 = 0; i0 < n; i0 += kRows) {
    const int rows = std::min(kRows, n - i0);
    dense::GemmTN(d, d, rows, 1.0f, kc.data() + static_cast<size_t>(i0) * d, d,
                  kc.data() + static_cast<size_t>(i0) * d, d, 0.0f, block.data(), d);
    for (size_t t = 0; t < g.size(); ++t) g[t] += block[t];
  }
  double trace = 0;
  for (int c = 0; c < d; ++c) trace += g[static_cast<size_t>(c) * d + c];
  const double jitter = kJitter * std::max(trace / d, 1e-30);
  for (int c = 0; c < d; ++c) g[static_cast<size_t>(c) * d + c] += jitter;
  // Cholesky, lower triangle in place.
  for (int j = 0; j < d; ++j) {
    double s = g[static_cast<size_t>(j) * d + j];
    for (int k = 0; k < j; ++k)
      s -= g[static_cast<size_t>(j) * d + k] * g[static_cast<size_t>(j) * d + k];
    const double ljj = std::sqrt(std::max(s, jitter));
    g[static_cast<size_t>(j) * d + j] = ljj;
    for (int i = j + 1; i < d; ++i) {
      double t = g[static_cast<size_t>(i) * d + j];
      for (int k = 0; k < j; ++k)
        t -= g[static_cast<size_t>(i) * d + k] * g[static_cast<size_t>(j) * d + k];
      g[static_cast<size_t>(i) * d + j] = t / ljj;
    }
  }
  // Linv (lower) by forward substitution on the identity.
  std::vector<double> linv(static_cast<size_t>(d) * d, 0.0);
  for (int col = 0; col < d; ++col) {
    for (int i = col; i < d; ++i) {
      double t = i == col ? 1.0 : 0.0;
      for (int k = col; k < i; ++k)
        t -= g[static_cast<size_t>(i) * d + k] * linv[static_cast<size_t>(k) * d + col];
      linv[static_cast<size_t>(i) * d + col] = t / g[static_cast<size_t>(i) * d + i];
    }
  }
  std::vector<float> linv_t(static_cast<size_t>(d) * d);  // Linv^T
  for (int a = 0; a < d; ++a)
    for (int b = 0; b < d; ++b)
      linv_t[static_cast<size_t>(b) * d + a] =
          static_cast<float>(linv[static_cast<size_t>(a) * d + b]);
  // W = Kc Linv^T, r_i = |w_i|^2, in row blocks to bound scratch.
  std::vector<float> w(static_cast<size_t>(kRows) * d);
  r.assign(static_cast<size_t>(n), 0.0);
  for (int i0 = 0; i0 < n; i0 += kRows) {
    const int rows = std::min(kRows, n - i0);
    dense::GemmNN(rows, d, d, 1.0f, kc.data() + static_cast<size_t>(i0) * d, d, linv_t.data(), d,
                  0.0f, w.data(), d);
    for (int i = 0; i < rows; ++i) {
      double s = 0;
      for (int c = 0; c < d; ++c)
        s += static_cast<double>(w[static_cast<size_t>(i) * d + c]) *
             w[static_cast<size_t>(i) * d + c];
      r[static_cast<size_t>(i0 + i)] = s;
    }
  }
}

// sqrt(x_i^T M x_i) for each row.
void QuadraticNorms(const std::vector<float>& x, int n, int d, std::span<const float> m,
                    std::vector<double>& c) {
  constexpr int kRows = 512;
  std::vector<float> u(static_cast<size_t>(kRows) * d);
  c.assign(static_cast<size_t>(n), 0.0);
  for (int i0 = 0; i0 < n; i0 += kRows) {
    const int rows = std::min(kRows, n - i0);
    dense::GemmNN(rows, d, d, 1.0f, x.data() + static_cast<size_t>(i0) * d, d, m.data(), d, 0.0f,
                  u.data(), d);
    for (int i = 0; i < rows; ++i) {
      double s = 0;
      for (int k = 0; k < d; ++k)
        s += static_cast<double>(u[static_cast<size_t>(i) * d + k]) *
             x[static_cast<size_t>(i0 + i) * d + k];
      c[static_cast<size_t>(i0 + i)] = std::sqrt(std::max(s, 0.0));
    }
  }
}

// Normalised ascending ranks in (0, 1]: (1 + #smaller) / n, ties by lower row.
std::vector<double> Ranks(const std::vector<double>& x) {
  const int n = static_cast<int>(x.size());
  std::vector<int> order(static_cast<size_t>(n));
  for (int i = 0; i < n; ++i) order[static_cast<size_t>(i)] = i;
  std::sort(order.begin(), order.end(), [&](int a, int b) {
    const double xa = x[static_cast<size_t>(a)], xb = x[static_cast<size_t>(b)];
    return xa != xb ? xa < xb : a < b;
  });
  std::vector<double> r(static_cast<size_t>(n));
  for (int j = 0; j < n; ++j) r[static_cast<size_t>(order[static_cast<size_t>(j)])] = (j + 1.0) / n;
  return r;
}

class PrimeKvScorer : public Scorer {
 public:
  PrimeKvScorer(KeySide key, ValueSide value, Combine combine, bool halving)
      : key_(key), value_(value), combine_(combine), halving_(halving) {}
  PressNeeds Needs() const override {
    PressNeeds n;
    n.values = value_ != ValueSide::kNone;
    n.output_gram = value_ == ValueSide::kWoCentered || value_ == ValueSide::kWo;
    return n;
  }

  void Score(const LayerInput& in, HeadScores& out) const override {
    const int d = in.head_dim;
    for (int h = 0; h < in.n_kv_heads; ++h) {
      const HeadEntries& e = in.heads[static_cast<size_t>(h)];
      const int n = e.size();
      auto& s = out[static_cast<size_t>(h)];
      if (n == 0) continue;
      std::span<const float> gram;
      if (value_ == ValueSide::kWoCentered || value_ == ValueSide::kWo)
        gram = in.output_gram.subspan(static_cast<size_t>(h) * d * d, static_cast<size_t>(d) * d);
      if (!halving_) {
        const std::vector<double> x = SetScores(e.keys, e.values, n, d, gram);
        for (int i = 0; i < n; ++i)
          s[static_cast<size_t>(i)] = static_cast<float>(x[static_cast<size_t>(i)]);
        continue;
      }
      // Successive halving (the set identity): score the entries that remain, drop the lower
      // half, rescore the rest against each other, until one is left. An entry removed in
      // round t gets t + (its place among that round's removed entries) / (removed + 1), so
      // the survivors of later rounds rank above everything removed before them.
      std::vector<int> active(static_cast<size_t>(n));
      for (int i = 0; i < n; ++i) active[static_cast<size_t>(i)] = i;
      std::vector<float> keys, values;
      for (int round = 0;; ++round) {
        const int m = static_cast<int>(active.size());
        if (m == 1) {
          s[static_cast<size_t>(active[0])] = static_cast<float>(round + 1);
          break;
        }
        keys.resize(static_cast<size_t>(m) * d);
        values.resize(e.values.empty() ? 0 : static_cast<size_t>(m) * d);
        for (int j = 0; j < m; ++j) {
          const size_t src = static_cast<size_t>(active[static_cast<size_t>(j)]) * d;
          std::copy_n(e.keys.data() + src, d, keys.data() + static_cast<size_t>(j) * d);
          if (!values.empty())
            std::copy_n(e.values.data() + src, d, values.data() + static_cast<size_t>(j) * d);
        }
        const std::vector<double> x = SetScores(keys, values, m, d, gram);
        std::vector<int> order(static_cast<size_t>(m));
        for (int j = 0; j < m; ++j) order[static_cast<size_t>(j)] = j;
        std::sort(order.begin(), order.end(), [&](int a, int b) {
          const double xa = x[static_cast<size_t>(a)], xb = x[static_cast<size_t>(b)];
          return xa != xb ? xa < xb : a < b;  // ascending; ties: lower row removed first
        });
        const int removed = m / 2;
        for (int j = 0; j < removed; ++j)
          s[static_cast<size_t>(active[static_cast<size_t>(order[static_cast<size_t>(j)])])] =
              static_cast<float>(round + (j + 1.0) / (removed + 1.0));
        std::vector<int> next;
        next.reserve(static_cast<size_t>(m - removed));
        for (int j = removed; j < m; ++j)
          next.push_back(active[static_cast<size_t>(order[static_cast<size_t>(j)])]);
        std::sort(next.begin(), next.end());
        active = std::move(next);
      }
    }
  }

 private:
  // Scores of n entries judged against each other (means, covariance and anchor of this set).
  std::vector<double> SetScores(const std::vector<float>& keys, const std::vector<float>& values,
                                int n, int d, std::span<const float> gram) const {
    std::vector<double> r, c;
    KeyFactor(keys, n, d, r);
    ValueFactor(values, n, d, gram, c);
    if (combine_ == Combine::kRank) {
      // Scale-free: neither factor's dynamic range can dominate the other's.
      r = Ranks(r);
      c = Ranks(c);
    }
    std::vector<double> x(static_cast<size_t>(n));
    for (int i = 0; i < n; ++i) {
      const double ri = r[static_cast<size_t>(i)], ci = c[static_cast<size_t>(i)];
      // logit: the key side is a log-attention, so a_i * c_i ranks as r_i + log c_i.
      x[static_cast<size_t>(i)] =
          combine_ == Combine::kLogit ? ri + std::log(std::max(ci, 1e-30)) : ri * ci;
    }
    return x;
  }

  void KeyFactor(const std::vector<float>& keys, int n, int d, std::vector<double>& r) const {
    switch (key_) {
      case KeySide::kNone:
        r.assign(static_cast<size_t>(n), 1.0);
        return;
      case KeySide::kLeverage:
        Leverage(Centered(keys, n, d, Mean(keys, n, d)), n, d, r);
        return;
      case KeySide::kSelf: {
        // Mean-field log-attention of the query that targets entry i (q = k_i):
        // log a_ii ~ (|k_i|^2 - k_i . kbar) / sqrt(d) - log n; the constant is dropped.
        const std::vector<double> mean = Mean(keys, n, d);
        const double scale = 1.0 / std::sqrt(static_cast<double>(d));
        r.resize(static_cast<size_t>(n));
        for (int i = 0; i < n; ++i) {
          const float* k = keys.data() + static_cast<size_t>(i) * d;
          double s = 0;
          for (int t = 0; t < d; ++t) s += k[t] * (k[t] - mean[static_cast<size_t>(t)]);
          r[static_cast<size_t>(i)] = s * scale;
        }
        return;
      }
      case KeySide::kSelfExact: {
        // Exact log-attention of the self-query: |k_i|^2/sqrt(d) - logsumexp_j k_i.k_j/sqrt(d).
        const double scale = 1.0 / std::sqrt(static_cast<double>(d));
        constexpr int kRows = 256;
        std::vector<float> block(static_cast<size_t>(kRows) * n), kt(static_cast<size_t>(d) * n);
        dense::Transpose(keys.data(), n, d, d, kt.data(), n);
        r.resize(static_cast<size_t>(n));
        for (int i0 = 0; i0 < n; i0 += kRows) {
          const int rows = std::min(kRows, n - i0);
          dense::GemmNN(rows, n, d, 1.0f, keys.data() + static_cast<size_t>(i0) * d, d, kt.data(),
                        n, 0.0f, block.data(), n);
          for (int a = 0; a < rows; ++a) {
            const float* row = block.data() + static_cast<size_t>(a) * n;
            double mx = -1e300;
            for (int j = 0; j < n; ++j) mx = std::max(mx, row[j] * scale);
            double sum = 0;
            for (int j = 0; j < n; ++j) sum += std::exp(row[j] * scale - mx);
            r[static_cast<size_t>(i0 + a)] = row[i0 + a] * scale - mx - std::log(sum);
          }
        }
        return;
      }
      case KeySide::kCosine: {
        std::vector<double> anchor(static_cast<size_t>(d), 0.0);
        for (int i = 0; i < n; ++i) {
          const float* k = keys.data() + static_cast<size_t>(i) * d;
          const double inv = 1.0 / std::max(Norm(k, d), 1e-12);
          for (int t = 0; t < d; ++t) anchor[static_cast<size_t>(t)] += k[t] * inv / n;
        }
        double an = 0;
        for (double a : anchor) an += a * a;
        an = std::max(std::sqrt(an), 1e-12);
        r.resize(static_cast<size_t>(n));
        for (int i = 0; i < n; ++i) {
          const float* k = keys.data() + static_cast<size_t>(i) * d;
          double dot = 0;
          for (int t = 0; t < d; ++t) dot += k[t] * anchor[static_cast<size_t>(t)];
          r[static_cast<size_t>(i)] = 1.0 - dot / (std::max(Norm(k, d), 1e-12) * an);
        }
        return;
      }
    }
  }

  void ValueFactor(const std::vector<float>& values, int n, int d, std::span<const float> gram,
                   std::vector<double>& c) const {
    const bool centered = value_ == ValueSide::kWoCentered || value_ == ValueSide::kCentered;
    if (value_ == ValueSide::kNone) {
      c.assign(static_cast<size_t>(n), 1.0);
      return;
    }
    std::vector<double> zero(static_cast<size_t>(d), 0.0);
    const std::vector<float> x = Centered(values, n, d, centered ? Mean(values, n, d) : zero);
    if (value_ == ValueSide::kWoCentered || value_ == ValueSide::kWo) {
      QuadraticNorms(x, n, d, gram, c);
      return;
    }
    c.resize(static_cast<size_t>(n));
    for (int i = 0; i < n; ++i)
      c[static_cast<size_t>(i)] = Norm(x.data() + static_cast<size_t>(i) * d, d);
  }

  KeySide key_;
  ValueSide value_;
  Combine combine_;
  bool halving_;
};

}  // namespace

ScorerResult MakePrimeKvScorer(const PressParams& p, const std::string& press) {
  ParamReader r(p, press);
  const std::string key = r.Text("key", "self");
  const std::string value = r.Text("value", "wo_centered");
  const std::string combine = r.Text("combine", "logit");
  const std::string rounds = r.Text("rounds", "one");
  if (Status s = r.Finish(); !s.ok()) return s;
  KeySide ks;
  if (key == "leverage") {
    ks = KeySide::kLeverage;
  } else if (key == "cosine") {
    ks = KeySide::kCosine;
  } else if (key == "self") {
    ks = KeySide::kSelf;
  } else if (key == "selfexact") {
    ks = KeySide::kSelfExact;
  } else if (key == "none") {
    ks = KeySide::kNone;
  } else {
    return Status::Error("press " + press + ": key='" + key +
                         "' (choose leverage, cosine, self, selfexact, none)");
  }
  ValueSide vs;
  if (value == "wo_centered") {
    vs = ValueSide::kWoCentered;
  } else if (value == "wo") {
    vs = ValueSide::kWo;
  } else if (value == "centered") {
    vs = ValueSide::kCentered;
  } else if (value == "norm") {
    vs = ValueSide::kNorm;
  } else if (value == "none") {
    vs = ValueSide::kNone;
  } else {
    return Status::Error("press " + press + ": value='" + value +
                         "' (choose wo_centered, wo, centered, norm, none)");
  }
  Combine cb;
  if (combine == "product") {
    cb = Combine::kProduct;
  } else if (combine == "rank") {
    cb = Combine::kRank;
  } else if (combine == "logit") {
    cb = Combine::kLogit;
  } else {
    return Status::Error("press " + press + ": combine='" + combine +
                         "' (choose product, rank, logit)");
  }
  if (rounds != "one" && rounds != "halving")
    return Status::Error("press " + press + ": rounds='" + rounds + "' (choose one, halving)");
  return std::unique_ptr<Scorer>(new PrimeKvScorer(ks, vs, cb, rounds == "halving"));
}

}  // namespace primekv::press_internal
