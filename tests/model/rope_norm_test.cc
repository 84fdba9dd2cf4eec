// RoPE, RMSNorm and the query projection checked on their own against plain double-precision
// loops written from the formulas (not from the engine's code), on small random F32 models.
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <numbers>
#include <random>
#include <string>
#include <vector>

#include "common/random_models.h"
#include "primekv/quant/matmul.h"
#include "primekv/util/thread_pool.h"

namespace primekv {
namespace {

Model Load(RandomModelSpec spec, const std::string& name) {
  return WriteAndLoad(spec, std::filesystem::temp_directory_path() / ("primekv_rope_" + name));
}

std::vector<float> Gaussian(size_t n, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::vector<float> v(n);
  for (float& x : v) x = normal(rng);
  return v;
}

// theta_i = pos * base^(-2i/d) / factor_i, rotating (x[2i], x[2i+1]) (adjacent) or
// (x[i], x[i + d/2]) (half) of every head.
std::vector<double> RopeReference(const std::vector<float>& x, int n_heads, int head_dim,
                                  double base, bool adjacent, const std::vector<double>& factor,
                                  const std::vector<int32_t>& pos) {
  std::vector<double> out(x.begin(), x.end());
  const int half = head_dim / 2;
  const size_t width = static_cast<size_t>(n_heads) * head_dim;
  for (size_t r = 0; r < pos.size(); ++r) {
    for (int h = 0; h < n_heads; ++h) {
      double* v = out.data() + r * width + static_cast<size_t>(h) * head_dim;
      for (int i = 0; i < half; ++i) {
        const double theta = pos[r] * std::pow(base, -2.0 * i / head_dim) / factor[i];
        const int a = adjacent ? 2 * i : i, b = adjacent ? 2 * i + 1 : i + half;
        const double x0 = v[a], x1 = v[b];
        v[a] = x0 * std::cos(theta) - x1 * std::sin(theta);
        v[b] = x0 * std::sin(theta) + x1 * std::cos(theta);
      }
    }
  }
  return out;
}

void ExpectNear(const std::vector<float>& got, const std::vector<double>& want, double tol) {
  ASSERT_EQ(got.size(), want.size());
  double worst = 0;
  for (size_t i = 0; i < got.size(); ++i) worst = std::max(worst, std::abs(got[i] - want[i]));
  EXPECT_LT(worst, tol);
}

// Llama 3.1's frequency divisors, from the published rule: factor 8 for wavelengths above
// 8192 / 1, none below 8192 / 4, and a smooth blend between.
std::vector<double> Llama3Factors(int d, double base) {
  std::vector<double> f(static_cast<size_t>(d / 2), 1.0);
  for (int i = 0; i < d / 2; ++i) {
    const double wavelen = 2 * std::numbers::pi * std::pow(base, 2.0 * i / d);
    if (wavelen > 8192) {
      f[i] = 8;
    } else if (wavelen >= 2048) {
      const double smooth = (8192 / wavelen - 1) / 3;
      f[i] = 1 / ((1 - smooth) / 8 + smooth);
    }
  }
  return f;
}

struct RopeCase {
  Arch arch;
  bool llama3;
};

class Rope : public ::testing::TestWithParam<RopeCase> {};

TEST_P(Rope, MatchesTheRotationFormula) {
  RandomModelSpec spec = TinyLlamaSpec();
  spec.arch = GetParam().arch;
  spec.n_heads = 4;
  spec.n_kv_heads = 2;
  spec.rope_base = 500000.0f;
  spec.llama3_rope_scaling = GetParam().llama3;
  const Model model =
      Load(spec, std::string(ArchName(spec.arch)) + (spec.llama3_rope_scaling ? "_l3" : ""));
  const ModelConfig& c = model.config();
  ASSERT_EQ(c.rope_dim, c.head_dim);
  const std::vector<double> factor = GetParam().llama3 ? Llama3Factors(c.head_dim, c.rope_base)
                                                       : std::vector<double>(c.head_dim / 2, 1.0);
  const std::vector<int32_t> pos = {0, 1, 7, 100, 2047};
  std::vector<float> x = Gaussian(pos.size() * c.q_width(), 3);
  const std::vector<double> want = RopeReference(x, c.n_heads, c.head_dim, c.rope_base,
                                                 c.rope_style == RopeStyle::kAdjacent, factor, pos);
  model.ApplyRope(MatView<float>(x.data(), static_cast<int64_t>(pos.size()), c.q_width()),
                  c.n_heads, pos);
  // Angles are exact in double; the inverse frequencies are floats (relative 6e-8), so the
  // error grows with the position: 2047 * 6e-8 * |x| stays well under 1e-4.
  ExpectNear(x, want, 1e-4);
}

INSTANTIATE_TEST_SUITE_P(Styles, Rope,
                         ::testing::Values(RopeCase{Arch::kLlama, false},
                                           RopeCase{Arch::kLlama, true},
                                           RopeCase{Arch::kQwen3, false}),
                         [](const auto& info) {
                           return std::string(ArchName(info.param.arch)) +
                                  (info.param.llama3 ? "_llama3_scaling" : "");
                         });

// ProjectQueries = RoPE(RMSNorm_per_head(h W_q^T + b_q) * q_norm): the projection, the qwen2
// bias and the qwen3 per-head RMSNorm y = x / sqrt(mean(x^2) + eps) * w, in double.
class ProjectQueries : public ::testing::TestWithParam<Arch> {};

TEST_P(ProjectQueries, MatchesProjectionBiasNormAndRope) {
  RandomModelSpec spec = TinyLlamaSpec();
  spec.arch = GetParam();
  const Model model = Load(spec, std::string("project_") + std::string(ArchName(spec.arch)));
  const ModelConfig& c = model.config();
  const LayerWeights& L = model.layer(0);
  const std::vector<int32_t> pos = {0, 5, 300};
  const int n = static_cast<int>(pos.size());
  const std::vector<float> h = Gaussian(static_cast<size_t>(n) * c.d_model, 9);

  std::vector<float> wq(static_cast<size_t>(c.q_width()) * c.d_model);
  for (int r = 0; r < c.q_width(); ++r)
    GetRow(L.wq, r, wq.data() + static_cast<size_t>(r) * c.d_model);
  std::vector<float> q_float(static_cast<size_t>(n) * c.q_width());
  std::vector<double> q(q_float.size());
  for (int t = 0; t < n; ++t) {
    for (int j = 0; j < c.q_width(); ++j) {
      double acc = L.bq.empty() ? 0.0 : L.bq[j];
      for (int k = 0; k < c.d_model; ++k) {
        acc += static_cast<double>(h[static_cast<size_t>(t) * c.d_model + k]) *
               wq[static_cast<size_t>(j) * c.d_model + k];
      }
      q[static_cast<size_t>(t) * c.q_width() + j] = acc;
    }
    for (int hh = 0; hh < c.n_heads && !L.q_norm.empty(); ++hh) {
      double* v =
          q.data() + static_cast<size_t>(t) * c.q_width() + static_cast<size_t>(hh) * c.head_dim;
      double ss = 0;
      for (int i = 0; i < c.head_dim; ++i) ss += v[i] * v[i];
      const double inv = 1 / std::sqrt(ss / c.head_dim + c.rms_eps);
      for (int i = 0; i < c.head_dim; ++i) v[i] *= inv * L.q_norm[i];
    }
  }
  EXPECT_EQ(L.q_norm.empty(), spec.arch != Arch::kQwen3);
  EXPECT_EQ(L.bq.empty(), spec.arch != Arch::kQwen2);
  for (size_t i = 0; i < q.size(); ++i) q_float[i] = static_cast<float>(q[i]);
  const std::vector<double> want = RopeReference(q_float, c.n_heads, c.head_dim, c.rope_base,
                                                 c.rope_style == RopeStyle::kAdjacent,
                                                 std::vector<double>(c.head_dim / 2, 1.0), pos);

  ThreadPool pool(2);
  std::vector<float> got(q.size());
  model.ProjectQueries(0, MatView<const float>(h.data(), n, c.d_model), pos,
                       MatView<float>(got.data(), n, c.q_width()), pool);
  // Float dot products of length 64 (|q| about 1, or 1 per element after the norm).
  ExpectNear(got, want, 1e-4);
}

INSTANTIATE_TEST_SUITE_P(Archs, ProjectQueries,
                         ::testing::Values(Arch::kLlama, Arch::kQwen2, Arch::kQwen3, Arch::kGranite,
                                           Arch::kPhi3, Arch::kGemma, Arch::kGemma2),
                         [](const auto& info) { return std::string(ArchName(info.param)); });

// The spec is a ModelConfig: loading the written file gives back the fields the writer reads.
TEST(RandomModel, LoadsBackTheSpecsConfig) {
  RandomModelSpec spec = MoeSpec(/*n_layers=*/2, /*d_model=*/64, /*head_dim=*/32,
                                 /*n_experts=*/4, /*n_used=*/2, /*d_ff_expert=*/32);
  spec.max_context = 512;
  spec.rope_base = 1e6f;
  spec.tied_embeddings = true;
  const Model model = Load(spec, "roundtrip");
  const ModelConfig& c = model.config();
  EXPECT_EQ(c.arch, Arch::kQwen3Moe);
  EXPECT_EQ(c.arch_name, "qwen3moe");
  for (auto field : {&ModelConfig::n_layers, &ModelConfig::d_model, &ModelConfig::n_heads,
                     &ModelConfig::n_kv_heads, &ModelConfig::head_dim, &ModelConfig::d_ff,
                     &ModelConfig::vocab_size, &ModelConfig::max_context, &ModelConfig::n_experts,
                     &ModelConfig::n_experts_used, &ModelConfig::d_ff_expert}) {
    EXPECT_EQ(c.*field, spec.*field);
  }
  EXPECT_EQ(c.rope_base, spec.rope_base);
  EXPECT_TRUE(c.tied_embeddings);
  EXPECT_TRUE(c.qk_norm);
  EXPECT_EQ(c.rope_style, RopeStyle::kHalf);
  EXPECT_EQ(ArchFromName("qwen3moe"), Arch::kQwen3Moe);
  EXPECT_FALSE(ArchFromName("gpt2").has_value());
}

}  // namespace
}  // namespace primekv
