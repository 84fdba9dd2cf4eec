// PrimeKV's ablation variants (docs/design.md §2), chosen by the press's parameters:
// key=centerednext (the formula of primekv.cc)|typical|next|centered|centeredexact|self|
// selfexact|leverage|cosine|none, value=wo_centered (the formula)|wo|wo_self|centered|norm|none,
// combine=logit (the formula)|product|rank, rounds=one (the formula)|halving (set-aware
// successive halving). key=typical adds the context's mean query, recovered from the cache
// through the model's projections (primekv/press/mean_query.h). The first reconstruction of the
// paper's score was key=leverage,combine=product. key=leverage adds a Cholesky factor per head,
// key=selfexact an O(n^2 d) pass with no n x n matrix kept.
#include <cstdlib>
#include <limits>
#include <memory>
#include <numeric>
#include <span>
#include <utility>

#include "press/primekv_terms.h"
#include "press/scorers.h"
#include "primekv/quant/dense.h"

namespace primekv::press_internal {
namespace {

enum class KeySide {
  kLeverage,
  kCosine,
  kSelf,
  kSelfExact,
  kCentered,
  kCenteredExact,
  kNext,
  kCenteredNext,
  kTypical,
  kNone
};
enum class ValueSide { kWoCentered, kWo, kSelfRest, kCentered, kNorm, kNone };
enum class Combine { kProduct, kRank, kLogit };

// Parameter words, in the order error messages list them.
template <typename T>
using Words = std::pair<std::string_view, T>;
constexpr Words<KeySide> kKeySides[] = {
    {"leverage", KeySide::kLeverage}, {"cosine", KeySide::kCosine},
    {"self", KeySide::kSelf},         {"selfexact", KeySide::kSelfExact},
    {"centered", KeySide::kCentered}, {"centeredexact", KeySide::kCenteredExact},
    {"next", KeySide::kNext},         {"centerednext", KeySide::kCenteredNext},
    {"typical", KeySide::kTypical},   {"none", KeySide::kNone}};
constexpr Words<ValueSide> kValueSides[] = {{"wo_centered", ValueSide::kWoCentered},
                                            {"wo", ValueSide::kWo},
                                            {"wo_self", ValueSide::kSelfRest},
                                            {"centered", ValueSide::kCentered},
                                            {"norm", ValueSide::kNorm},
                                            {"none", ValueSide::kNone}};
constexpr Words<Combine> kCombines[] = {
    {"product", Combine::kProduct}, {"rank", Combine::kRank}, {"logit", Combine::kLogit}};
constexpr Words<bool> kRounds[] = {{"one", false}, {"halving", true}};

// Relative diagonal jitter keeping the Cholesky factorisation defined for rank-deficient keys
// (fewer entries than dimensions, duplicated keys): a safeguard, not a tuning knob.
constexpr double kJitter = 1e-6;

double SquaredNorm(const float* x, int64_t d) {
  double s = 0;
  for (int64_t c = 0; c < d; ++c) s += static_cast<double>(x[c]) * x[c];
  return s;
}

// In-place lower Cholesky factor of g (pivots floored at `floor`); returns L^-1 (lower).
Mat<double> InverseCholesky(Mat<double>& g, double floor) {
  const int d = static_cast<int>(g.rows());
  dense::CholeskyLower(g, floor);
  // Forward substitution on the identity.
  Mat<double> linv(d, d);
  for (int col = 0; col < d; ++col) {
    for (int i = col; i < d; ++i) {
      double t = i == col ? 1.0 : 0.0;
      for (int k = col; k < i; ++k) t -= g(i, k) * linv(k, col);
      linv(i, col) = t / g(i, i);
    }
  }
  return linv;
}

// Leverage of each centred row: |L^-1 x_i|^2 with G = Kc^T Kc = L L^T.
std::vector<double> Leverage(const Mat<float>& kc) {
  const int n = static_cast<int>(kc.rows()), d = static_cast<int>(kc.cols());
  // G = Kc^T Kc in double, accumulated from float products of row blocks.
  Mat<double> g = dense::ProductTNDouble(kc.view(), kc.view(), kRows);
  double trace = 0;
  for (int c = 0; c < d; ++c) trace += g(c, c);
  const double jitter = kJitter * std::max(trace / d, 1e-30);
  for (int c = 0; c < d; ++c) g(c, c) += jitter;
  const Mat<double> linv = InverseCholesky(g, jitter);
  Mat<float> linv_t(d, d);
  for (int a = 0; a < d; ++a)
    for (int b = 0; b < d; ++b) linv_t(b, a) = static_cast<float>(linv(a, b));
  // W = Kc Linv^T, r_i = |w_i|^2.
  Mat<float> w(kRows, d);
  std::vector<double> r(n, 0.0);
  for (int i0 = 0; i0 < n; i0 += kRows) {
    const int rows = std::min(kRows, n - i0);
    dense::GemmNN(rows, d, d, 1.0f, kc.Row(i0), d, linv_t.data(), d, 0.0f, w.data(), d);
    for (int i = 0; i < rows; ++i) r[i0 + i] = SquaredNorm(w.Row(i), d);
  }
  return r;
}

// Order of x ascending, ties by lower row.
std::vector<int> Ascending(const std::vector<double>& x) {
  std::vector<int> order(x.size());
  std::iota(order.begin(), order.end(), 0);
  std::sort(order.begin(), order.end(),
            [&](int a, int b) { return x[a] != x[b] ? x[a] < x[b] : a < b; });
  return order;
}

// Normalised ascending ranks in (0, 1]: (1 + #smaller) / n, ties by lower row.
std::vector<double> Ranks(const std::vector<double>& x) {
  const std::vector<int> order = Ascending(x);
  std::vector<double> r(x.size());
  for (size_t j = 0; j < order.size(); ++j)
    r[order[j]] = (static_cast<double>(j) + 1.0) / static_cast<double>(order.size());
  return r;
}

// Mean-field log-attention of the query that targets entry i: q = k_i gives
// log a_ii ~ (|k_i|^2 - k_i . kbar) / sqrt(d) - log n (the constant is dropped). With
// `centered`, q = k_i - kbar: q.kbar is the same for every entry and cancels in the softmax, so
// only the deviations d_j = k_j - kbar compete, and log a_ii ~ |d_i|^2 / sqrt(d) - log n.
std::vector<double> SelfQuery(MatView<const float> keys, bool centered) {
  const std::vector<double> mean = Mean(keys);
  const double scale = 1.0 / std::sqrt(static_cast<double>(keys.cols));
  std::vector<double> r(keys.rows);
  for (int64_t i = 0; i < keys.rows; ++i) {
    const float* k = keys.Row(i);
    double s = 0;
    for (int64_t t = 0; t < keys.cols; ++t) {
      const double q = centered ? k[t] - mean[t] : k[t];
      s += q * (k[t] - mean[t]);
    }
    r[i] = s * scale;
  }
  return r;
}

// key=typical (docs/design.md §2): the query that needs entry i is the context's typical query
// plus the part that targets i, q_i = R(p) ubar + R(p - pos_i) (k_i - kbar), and its mean-field
// log-attention is q_i.(k_i - kbar) / sqrt(d). ubar, the mean content query, comes from the
// head's mean content key cbar = mean_j R(-pos_j) k_j and mean value through the model's
// projections (primekv/model/mean_query.h); the typical term R(p) ubar . (k_i - kbar) is what every
// future query at p adds to entry i's logit in common (sinks, positional preferences).
std::vector<double> TypicalQuery(MatView<const float> keys, MatView<const float> values,
                                 const RopeFrame& rope, const MeanQueryMap& map) {
  const int64_t n = keys.rows, d = keys.cols;
  const RotationTable rot(rope, n);
  // w = mean_j R(p - pos_j) k_j = R(p) cbar.
  std::vector<double> w(d, 0.0), x(d);
  for (int64_t i = 0; i < n; ++i) {
    std::copy_n(keys.Row(i), d, x.begin());
    const int64_t dist = static_cast<int64_t>(rope.next_position) - rope.positions[i];
    RotatePairs(x, rope, [&](int64_t f) { return rot.CosSin(dist, f); });
    for (int64_t c = 0; c < d; ++c) w[c] += x[c];
  }
  for (double& v : w) v /= static_cast<double>(std::max<int64_t>(n, 1));
  const double p = rope.next_position;
  auto turn = [&](double sign) {
    return [&, sign](int64_t f) {
      const double phi = p * rope.inv_freq[static_cast<size_t>(f)];
      return std::pair<double, double>(std::cos(phi), sign * std::sin(phi));
    };
  };
  RotatePairs(w, rope, turn(-1.0));  // cbar
  const std::vector<double> vbar = values.rows > 0 ? Mean(values) : std::vector<double>(d, 0.0);
  std::vector<double> q = map.MeanQuery(w, vbar);
  RotatePairs(q, rope, turn(1.0));  // the typical query at p
  return NextSelfQuery(keys, rope, rot, Mean(keys), /*centered=*/true, q);
}

// Exact log-attention of the self-query: |k_i|^2/sqrt(d) - logsumexp_j k_i.k_j/sqrt(d), with the
// n x n logits formed a block of rows at a time.
std::vector<double> SelfQueryExact(MatView<const float> keys) {
  const int n = static_cast<int>(keys.rows), d = static_cast<int>(keys.cols);
  const double scale = 1.0 / std::sqrt(static_cast<double>(d));
  constexpr int kBlock = 256;
  Mat<float> block(kBlock, n), kt(d, n);
  dense::Transpose(keys.data, n, d, d, kt.data(), n);
  std::vector<double> r(n);
  for (int i0 = 0; i0 < n; i0 += kBlock) {
    const int rows = std::min(kBlock, n - i0);
    dense::GemmNN(rows, n, d, 1.0f, keys.Row(i0), d, kt.data(), n, 0.0f, block.data(), n);
    for (int a = 0; a < rows; ++a) {
      const float* row = block.Row(a);
      double mx = -std::numeric_limits<double>::infinity();
      for (int j = 0; j < n; ++j) mx = std::max(mx, row[j] * scale);
      double sum = 0;
      for (int j = 0; j < n; ++j) sum += std::exp(row[j] * scale - mx);
      r[i0 + a] = row[i0 + a] * scale - mx - std::log(sum);
    }
  }
  return r;
}

// v_i - o_-i for the self-query q = k_i, o_-i = sum_{j != i} softmax_j(k_i.k_j / sqrt(d)) v_j:
// the jump of the head's output when the query that targets entry i loses it (the identity's
// o_-i - v_i, with the other entries' real competition instead of the mean value). An entry
// whose key-neighbours carry the same value is replaceable and scores near zero.
Mat<float> SelfQueryRest(MatView<const float> keys, MatView<const float> values) {
  const int n = static_cast<int>(keys.rows), d = static_cast<int>(keys.cols);
  const int dv = static_cast<int>(values.cols);
  const float scale = static_cast<float>(1.0 / std::sqrt(static_cast<double>(d)));
  constexpr int kBlock = 256;
  Mat<float> diff(n, dv);
  if (n == 1) {  // nothing else to fall back on: the output jumps to zero
    std::copy_n(values.Row(0), dv, diff.Row(0));
    return diff;
  }
  Mat<float> block(kBlock, n), kt(d, n), o(kBlock, dv);
  dense::Transpose(keys.data, n, d, static_cast<int>(keys.stride), kt.data(), n);
  for (int i0 = 0; i0 < n; i0 += kBlock) {
    const int rows = std::min(kBlock, n - i0);
    dense::GemmNN(rows, n, d, scale, keys.Row(i0), static_cast<int>(keys.stride), kt.data(), n,
                  0.0f, block.data(), n);
    for (int a = 0; a < rows; ++a) {
      float* row = block.Row(a);
      row[i0 + a] = -std::numeric_limits<float>::infinity();
      float mx = -std::numeric_limits<float>::infinity();
      for (int j = 0; j < n; ++j) mx = std::max(mx, row[j]);
      double sum = 0;
      for (int j = 0; j < n; ++j) sum += row[j] = std::exp(row[j] - mx);
      const float inv = static_cast<float>(1.0 / sum);
      for (int j = 0; j < n; ++j) row[j] *= inv;
    }
    dense::GemmNN(rows, dv, n, 1.0f, block.data(), n, values.data, static_cast<int>(values.stride),
                  0.0f, o.data(), dv);
    for (int a = 0; a < rows; ++a)
      for (int c = 0; c < dv; ++c) diff(i0 + a, c) = values(i0 + a, c) - o(a, c);
  }
  return diff;
}

// The rows `rows` of x, gathered.
Mat<float> Gather(MatView<const float> x, const std::vector<int>& rows) {
  Mat<float> out(static_cast<int64_t>(rows.size()), x.cols);
  for (size_t j = 0; j < rows.size(); ++j) std::copy_n(x.Row(rows[j]), x.cols, out.Row(j));
  return out;
}

class PrimeKvAblationScorer : public HeadScorer {
  KeySide key_;
  ValueSide value_;
  Combine combine_;
  bool halving_;

 public:
  PrimeKvAblationScorer(KeySide key, ValueSide value, Combine combine, bool halving)
      : key_(key), value_(value), combine_(combine), halving_(halving) {}
  PressNeeds Needs() const override {
    return {.values = value_ != ValueSide::kNone || key_ == KeySide::kTypical,
            .output_gram = UsesGram(),
            .mean_query = key_ == KeySide::kTypical};
  }
  // The logit combination estimates log a_i + log |W_O (o_-i - v_i)|, a residual-stream
  // perturbation in the same unit in every layer (docs/design.md §3, global budget).
  bool ComparableAcrossLayers() const override {
    return combine_ == Combine::kLogit && !halving_ && value_ == ValueSide::kWoCentered;
  }

  void ScoreHead(const LayerInput& in, int h, std::vector<float>& s) const override {
    if (s.empty()) return;
    const MatView<const float> gram = UsesGram() ? in.Gram(h) : MatView<const float>();
    if (halving_) {
      Halving(in, h, gram, s);
      return;
    }
    const std::vector<double> x =
        SetScores(in.Keys(h), in.Values(h), gram, RopeFrameOf(in, h), MeanQuery(in, h));
    std::transform(x.begin(), x.end(), s.begin(), [](double v) { return static_cast<float>(v); });
  }

 private:
  bool UsesGram() const {
    return value_ == ValueSide::kWoCentered || value_ == ValueSide::kWo ||
           value_ == ValueSide::kSelfRest;
  }

  // Successive halving (the set identity): score the entries that remain, drop the lower half,
  // rescore the rest against each other, until one is left. An entry removed in round t gets
  // t + (its place among that round's removed entries) / (removed + 1), so the survivors of
  // later rounds rank above everything removed before them.
  void Halving(const LayerInput& in, int h, MatView<const float> gram,
               std::vector<float>& s) const {
    const MatView<const float> keys = in.Keys(h), values = in.Values(h);
    const std::vector<int32_t>& positions = in.heads[static_cast<size_t>(h)].positions;
    std::vector<int> active(s.size());
    std::iota(active.begin(), active.end(), 0);
    for (int round = 0;; ++round) {
      const int m = static_cast<int>(active.size());
      if (m == 1) {
        s[active[0]] = static_cast<float>(round + 1);
        return;
      }
      const Mat<float> k = Gather(keys, active);
      const Mat<float> v = values.rows == 0 ? Mat<float>() : Gather(values, active);
      // ascending; ties: lower row removed first
      std::vector<int32_t> pos(active.size());
      for (size_t j = 0; j < active.size(); ++j) pos[j] = positions[active[j]];
      const RopeFrame rope{.positions = pos,
                           .inv_freq = in.rope_inv_freq,
                           .half = in.rope_half(),
                           .next_position = in.next_position};
      const std::vector<int> order =
          Ascending(SetScores(k.view(), v.view(), gram, rope, MeanQuery(in, h)));
      const int removed = m / 2;
      for (int j = 0; j < removed; ++j)
        s[active[order[j]]] = static_cast<float>(round + (j + 1.0) / (removed + 1.0));
      std::vector<int> next;
      next.reserve(m - removed);
      for (int j = removed; j < m; ++j) next.push_back(active[order[j]]);
      std::sort(next.begin(), next.end());
      active = std::move(next);
    }
  }

  // Scores of n entries judged against each other (means, covariance and anchor of this set).
  std::vector<double> SetScores(MatView<const float> keys, MatView<const float> values,
                                MatView<const float> gram, const RopeFrame& rope,
                                const MeanQueryMap* mean_query) const {
    std::vector<double> r = KeyFactor(keys, values, rope, mean_query);
    std::vector<double> c = value_ == ValueSide::kSelfRest
                                ? QuadraticNorms(SelfQueryRest(keys, values), gram)
                                : ValueFactor(values, keys.rows, gram);
    if (combine_ == Combine::kRank) {
      // Scale-free: neither factor's dynamic range can dominate the other's.
      r = Ranks(r);
      c = Ranks(c);
    }
    std::vector<double> x(r.size());
    for (size_t i = 0; i < x.size(); ++i) {
      // logit: the key side is a log-attention, so a_i * c_i ranks as r_i + log c_i.
      x[i] = combine_ == Combine::kLogit ? r[i] + std::log(std::max(c[i], 1e-30)) : r[i] * c[i];
    }
    return x;
  }

  // The map key=typical reads (the compressor and press-scores provide it: Needs().mean_query).
  const MeanQueryMap* MeanQuery(const LayerInput& in, int h) const {
    return key_ == KeySide::kTypical ? &in.mean_query[static_cast<size_t>(h)] : nullptr;
  }

  std::vector<double> KeyFactor(MatView<const float> keys, MatView<const float> values,
                                const RopeFrame& rope, const MeanQueryMap* mean_query) const {
    switch (key_) {
      case KeySide::kNone:
        break;
      case KeySide::kLeverage:
        return Leverage(Centered(keys, Mean(keys)));
      case KeySide::kSelf:
        return SelfQuery(keys, /*centered=*/false);
      case KeySide::kSelfExact:
        return SelfQueryExact(keys);
      case KeySide::kCentered:
        return SelfQuery(keys, /*centered=*/true);
      case KeySide::kCenteredExact:
        return SelfQueryExact(Centered(keys, Mean(keys)).view());
      case KeySide::kNext:
        return NextSelfQuery(keys, rope, /*centered=*/false);
      case KeySide::kCenteredNext:
        return NextSelfQuery(keys, rope, /*centered=*/true);
      case KeySide::kTypical:
        return TypicalQuery(keys, values, rope, *mean_query);
      case KeySide::kCosine: {
        std::vector<double> r = CosineToMeanKey(keys);
        for (double& x : r) x = 1.0 - x;
        return r;
      }
    }
    return std::vector<double>(keys.rows, 1.0);
  }

  std::vector<double> ValueFactor(MatView<const float> values, int64_t n,
                                  MatView<const float> gram) const {
    if (value_ == ValueSide::kNone) return std::vector<double>(n, 1.0);
    const bool centered = value_ == ValueSide::kWoCentered || value_ == ValueSide::kCentered;
    const Mat<float> x =
        Centered(values, centered ? Mean(values) : std::vector<double>(values.cols, 0.0));
    if (UsesGram()) return QuadraticNorms(x, gram);
    std::vector<double> c(n);
    for (int64_t i = 0; i < n; ++i) c[i] = Norm(x.RowSpan(i));
    return c;
  }
};

}  // namespace

std::unique_ptr<Scorer> MakePrimeKvAblation(ParamReader& r) {
  const KeySide key = r.Choice<KeySide>("key", "centerednext", kKeySides);
  const ValueSide value = r.Choice<ValueSide>("value", "wo_centered", kValueSides);
  const Combine combine = r.Choice<Combine>("combine", "logit", kCombines);
  const bool halving = r.Choice<bool>("rounds", "one", kRounds);
  if (key == KeySide::kCenteredNext && value == ValueSide::kWoCentered &&
      combine == Combine::kLogit && !halving)
    return nullptr;
  return std::make_unique<PrimeKvAblationScorer>(key, value, combine, halving);
}

}  // namespace primekv::press_internal
