// PrimeKV (Zhang & Ilvovsky, Neurocomputing): attention-free scores from the cache itself,
// as derived in docs/design.md §2 (the paper's own formulas are not public).
//   key side  r_i = (k_i - kbar)^T (Kc^T Kc)^-1 (k_i - kbar): leverage, "irreplaceability"
//   value side c_i = sqrt((v_i - vbar)^T M (v_i - vbar)), M = sum_{h in group} W_O^(h)T W_O^(h)
//   score = r_i * c_i
// Each factor can be swapped: key=leverage|cosine|none, value=wo_centered|wo|centered|norm|none.
// Cost per KV head is O(n d^2): a d x d Gram, a Cholesky factor, and two n x d x d products.
#include "press/scorer_util.h"
#include "press/scorers.h"
#include "primekv/dense.h"

namespace primekv::press_internal {
namespace {

enum class KeySide { kLeverage, kCosine, kNone };
enum class ValueSide { kWoCentered, kWo, kCentered, kNorm, kNone };

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

class PrimeKvScorer : public Scorer {
 public:
  PrimeKvScorer(KeySide key, ValueSide value) : key_(key), value_(value) {}
  PressNeeds Needs() const override {
    PressNeeds n;
    n.values = value_ != ValueSide::kNone;
    n.output_gram = value_ == ValueSide::kWoCentered || value_ == ValueSide::kWo;
    return n;
  }

  void Score(const LayerInput& in, HeadScores& out) const override {
    const int d = in.head_dim;
    std::vector<double> r, c;
    for (int h = 0; h < in.n_kv_heads; ++h) {
      const HeadEntries& e = in.heads[static_cast<size_t>(h)];
      const int n = e.size();
      auto& s = out[static_cast<size_t>(h)];
      if (n == 0) continue;
      KeyFactor(e, n, d, r);
      ValueFactor(in, h, e, n, d, c);
      for (int i = 0; i < n; ++i)
        s[static_cast<size_t>(i)] =
            static_cast<float>(r[static_cast<size_t>(i)] * c[static_cast<size_t>(i)]);
    }
  }

 private:
  void KeyFactor(const HeadEntries& e, int n, int d, std::vector<double>& r) const {
    switch (key_) {
      case KeySide::kNone:
        r.assign(static_cast<size_t>(n), 1.0);
        return;
      case KeySide::kLeverage:
        Leverage(Centered(e.keys, n, d, Mean(e.keys, n, d)), n, d, r);
        return;
      case KeySide::kCosine: {
        std::vector<double> anchor(static_cast<size_t>(d), 0.0);
        for (int i = 0; i < n; ++i) {
          const float* k = e.keys.data() + static_cast<size_t>(i) * d;
          const double inv = 1.0 / std::max(Norm(k, d), 1e-12);
          for (int t = 0; t < d; ++t) anchor[static_cast<size_t>(t)] += k[t] * inv / n;
        }
        double an = 0;
        for (double a : anchor) an += a * a;
        an = std::max(std::sqrt(an), 1e-12);
        r.resize(static_cast<size_t>(n));
        for (int i = 0; i < n; ++i) {
          const float* k = e.keys.data() + static_cast<size_t>(i) * d;
          double dot = 0;
          for (int t = 0; t < d; ++t) dot += k[t] * anchor[static_cast<size_t>(t)];
          r[static_cast<size_t>(i)] = 1.0 - dot / (std::max(Norm(k, d), 1e-12) * an);
        }
        return;
      }
    }
  }

  void ValueFactor(const LayerInput& in, int h, const HeadEntries& e, int n, int d,
                   std::vector<double>& c) const {
    const bool centered = value_ == ValueSide::kWoCentered || value_ == ValueSide::kCentered;
    if (value_ == ValueSide::kNone) {
      c.assign(static_cast<size_t>(n), 1.0);
      return;
    }
    std::vector<double> zero(static_cast<size_t>(d), 0.0);
    const std::vector<float> x = Centered(e.values, n, d, centered ? Mean(e.values, n, d) : zero);
    if (value_ == ValueSide::kWoCentered || value_ == ValueSide::kWo) {
      QuadraticNorms(
          x, n, d,
          in.output_gram.subspan(static_cast<size_t>(h) * d * d, static_cast<size_t>(d) * d), c);
      return;
    }
    c.resize(static_cast<size_t>(n));
    for (int i = 0; i < n; ++i)
      c[static_cast<size_t>(i)] = Norm(x.data() + static_cast<size_t>(i) * d, d);
  }

  KeySide key_;
  ValueSide value_;
};

}  // namespace

ScorerResult MakePrimeKvScorer(const PressParams& p, const std::string& press) {
  ParamReader r(p, press);
  const std::string key = r.Text("key", "leverage");
  const std::string value = r.Text("value", "wo_centered");
  if (Status s = r.Finish(); !s.ok()) return s;
  KeySide ks;
  if (key == "leverage") {
    ks = KeySide::kLeverage;
  } else if (key == "cosine") {
    ks = KeySide::kCosine;
  } else if (key == "none") {
    ks = KeySide::kNone;
  } else {
    return Status::Error("press " + press + ": key='" + key + "' (choose leverage, cosine, none)");
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
  return std::unique_ptr<Scorer>(new PrimeKvScorer(ks, vs));
}

}  // namespace primekv::press_internal
