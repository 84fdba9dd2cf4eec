// MeasureFidelity (docs/design.md §6) on a tiny random model: exact zeros where nothing is
// removed, and every figure of a compressed row recomputed here from the forward pass alone.
#include "primekv/eval/fidelity.h"

#include <gtest/gtest.h>

#include <cmath>
#include <random>

#include "common/random_models.h"
#include "primekv/model/random_model.h"
#include "primekv/press/compressor.h"

namespace primekv {
namespace {

const Model& FidelityModel() {
  static const Model* model = [] {
    RandomModelSpec spec = SmallGqaSpec(21);
    spec.max_context = 1024;
    Model m = WriteLoadAndRemove(spec, "primekv_fidelity.gguf");
    return new Model(std::move(m));
  }();
  return *model;
}

std::vector<Token> Tokens(int n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::uniform_int_distribution<int> d(3, 290);
  std::vector<Token> t(static_cast<size_t>(n));
  for (auto& x : t) x = d(rng);
  return t;
}

// Keeps the attention outputs of every layer for the last forward call.
struct OutputTap : ForwardTap {
  std::vector<std::vector<float>> out;
  void OnAttentionOutput(int layer, MatView<const float> o) override {
    if (out.size() <= static_cast<size_t>(layer)) out.resize(static_cast<size_t>(layer) + 1);
    out[static_cast<size_t>(layer)].assign(o.data, o.data + o.rows * o.cols);
  }
};

// The next-token logits over the continuation and the attention outputs, from a cache that
// holds the context (compressed or not): row t predicts cont[t].
struct View {
  std::vector<std::vector<double>> logits;
  OutputTap tap;
};

View Continue(const Model& m, KvCache cache, const std::vector<float>& last,
              const std::vector<Token>& cont, ThreadPool& pool) {
  const int V = m.config().vocab_size, n = static_cast<int>(cont.size());
  View v;
  std::vector<float> all(static_cast<size_t>(n) * V);
  ForwardWorkspace ws;
  EXPECT_TRUE(m.Forward(cont, cache, {true}, {all.data(), n, V}, pool, ws, &v.tap).ok());
  v.logits.emplace_back(last.begin(), last.end());
  for (int t = 0; t + 1 < n; ++t)
    v.logits.emplace_back(all.begin() + t * V, all.begin() + (t + 1) * V);
  return v;
}

std::vector<double> Probabilities(const std::vector<double>& z) {
  double mx = z[0], sum = 0;
  for (double x : z) mx = std::max(mx, x);
  std::vector<double> p(z.size());
  for (size_t i = 0; i < z.size(); ++i) sum += p[i] = std::exp(z[i] - mx);
  for (double& x : p) x /= sum;
  return p;
}

TEST(Fidelity, NothingRemovedMeansZeroDistance) {
  const Model& m = FidelityModel();
  ThreadPool pool(2);
  const std::vector<std::vector<Token>> ctx{Tokens(48, 1), Tokens(48, 2)};
  const std::vector<std::vector<Token>> cont{Tokens(6, 3), Tokens(6, 4)};
  FidelityOptions opt;
  opt.presses = {"none", "knorm"};
  opt.ratios = {0.0, 0.5};
  auto rows = MeasureFidelity(m, ctx, cont, opt, pool);
  ASSERT_TRUE(rows.ok()) << rows.message();
  ASSERT_EQ(rows->size(), 4u);
  for (const FidelityRow& r : *rows) {
    SCOPED_TRACE(r.press + " " + std::to_string(r.ratio));
    EXPECT_EQ(r.contexts, 2);
    ASSERT_EQ(r.layer_error.size(), 2u);
    if (r.press == "none" || r.ratio == 0.0) {
      EXPECT_EQ(r.kl, 0.0);
      EXPECT_EQ(r.top1, 1.0);
      EXPECT_EQ(r.mean_layer_error(), 0.0);
    } else {
      EXPECT_GT(r.kl, 0.0);  // half the cache is gone: the distributions move
      EXPECT_GT(r.layer_error[0], 0.0);
    }
  }
}

TEST(Fidelity, MatchesAnIndependentComputation) {
  const Model& m = FidelityModel();
  const ModelConfig& c = m.config();
  ThreadPool pool(2);
  const std::vector<std::vector<Token>> ctx{Tokens(64, 5), Tokens(40, 6)};
  const std::vector<std::vector<Token>> cont{Tokens(7, 7), Tokens(7, 8)};
  FidelityOptions opt;
  opt.presses = {"knorm"};
  opt.ratios = {0.6};
  auto rows = MeasureFidelity(m, ctx, cont, opt, pool);
  ASSERT_TRUE(rows.ok()) << rows.message();
  ASSERT_EQ(rows->size(), 1u);

  Compressor knorm(m, std::move(MakePress(*ParsePressSpec("knorm"))).value());
  double kl = 0, top1 = 0;
  std::vector<double> layer_error(static_cast<size_t>(c.n_layers), 0.0);
  for (size_t i = 0; i < ctx.size(); ++i) {
    KvCache full = m.NewCache();
    std::vector<float> last(static_cast<size_t>(c.vocab_size));
    ForwardWorkspace ws;
    ASSERT_TRUE(m.Forward(ctx[i], full, {}, {last.data(), 1, c.vocab_size}, pool, ws).ok());
    KvCache small = full.Clone();
    ASSERT_TRUE(knorm.Compress(small, 0.6, nullptr, pool).ok());
    const View a = Continue(m, full.Clone(), last, cont[i], pool);
    const View b = Continue(m, std::move(small), last, cont[i], pool);
    // Row 0 predicts from the context alone, the same for both: the mean runs over rows 1..
    const int T = static_cast<int>(cont[i].size());
    double kl_i = 0, agree = 0;
    for (int t = 1; t < T; ++t) {
      const auto p = Probabilities(a.logits[t]), q = Probabilities(b.logits[t]);
      for (size_t v = 0; v < p.size(); ++v) kl_i += p[v] * std::log(p[v] / q[v]);
      agree += std::max_element(p.begin(), p.end()) - p.begin() ==
               std::max_element(q.begin(), q.end()) - q.begin();
    }
    kl += kl_i / (T - 1) / 2;
    top1 += agree / (T - 1) / 2;
    const int width = c.q_width();
    for (int l = 0; l < c.n_layers; ++l) {
      double e = 0;
      for (int t = 0; t < T; ++t) {
        double num = 0, den = 0;
        for (int j = 0; j < width; ++j) {
          const double x = a.tap.out[l][t * width + j], y = b.tap.out[l][t * width + j];
          num += (x - y) * (x - y);
          den += x * x;
        }
        e += std::sqrt(num / den);
      }
      layer_error[l] += e / T / 2;
    }
  }
  const FidelityRow& r = rows->front();
  EXPECT_EQ(r.contexts, 2);
  EXPECT_GT(kl, 1e-4);  // a real distance, not a trivial zero
  EXPECT_NEAR(r.kl, kl, 1e-9 + 1e-7 * kl);
  EXPECT_DOUBLE_EQ(r.top1, top1);
  for (int l = 0; l < c.n_layers; ++l) EXPECT_NEAR(r.layer_error[l], layer_error[l], 1e-9) << l;
}

TEST(Fidelity, RefusesMismatchedOrEmptyInputs) {
  const Model& m = FidelityModel();
  ThreadPool pool(1);
  FidelityOptions opt;
  opt.presses = {"knorm"};
  opt.ratios = {0.5};
  const std::vector<std::vector<Token>> one{Tokens(8, 1)}, two{Tokens(8, 1), Tokens(8, 2)};
  EXPECT_FALSE(MeasureFidelity(m, one, two, opt, pool).ok());
  const std::vector<std::vector<Token>> empty{{}};
  EXPECT_FALSE(MeasureFidelity(m, one, empty, opt, pool).ok());
  opt.ratios = {1.0};
  EXPECT_FALSE(MeasureFidelity(m, one, one, opt, pool).ok());
}

}  // namespace
}  // namespace primekv
