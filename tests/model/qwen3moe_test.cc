// qwen3moe: the router (softmax, top-k with ties to the lower index, renormalised weights)
// against hand-computed numbers, and the loader's checks of expert keys and tensors.
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <functional>
#include <limits>
#include <span>
#include <string>
#include <vector>

#include "common/random_models.h"
#include "primekv/gguf/gguf.h"
#include "primekv/model/model.h"

namespace primekv {
namespace {

std::vector<ExpertChoice> Route(const std::vector<float>& logits, int k) {
  std::vector<ExpertChoice> out(static_cast<size_t>(k));
  SelectExperts(logits, out);
  return out;
}

void ExpectRoute(const std::vector<ExpertChoice>& got, const std::vector<int>& experts,
                 const std::vector<double>& weights) {
  ASSERT_EQ(got.size(), experts.size());
  for (size_t i = 0; i < got.size(); ++i) {
    EXPECT_EQ(got[i].expert, experts[i]) << "slot " << i;
    EXPECT_NEAR(got[i].weight, weights[i], 1e-6) << "slot " << i;
  }
}

TEST(Qwen3MoeRouting, RenormalisesTheSelectedSoftmaxProbabilities) {
  // Logits ln(1..4): softmax p = (0.1, 0.2, 0.3, 0.4). Top-2 = experts 3 and 2 with
  // p = 0.4 and 0.3, renormalised to 4/7 and 3/7 (not 0.4 and 0.3).
  const std::vector<float> logits = {0.0f, std::log(2.0f), std::log(3.0f), std::log(4.0f)};
  ExpectRoute(Route(logits, 2), {3, 2}, {4.0 / 7, 3.0 / 7});
  ExpectRoute(Route(logits, 3), {3, 2, 1}, {4.0 / 9, 3.0 / 9, 2.0 / 9});
  // k = 1: the single expert carries weight 1; k = n: the weights are the full softmax.
  ExpectRoute(Route(logits, 1), {3}, {1.0});
  ExpectRoute(Route(logits, 4), {3, 2, 1, 0}, {0.4, 0.3, 0.2, 0.1});
}

TEST(Qwen3MoeRouting, HandComputedWeights) {
  // Top-2 of (1, 3, 2, 0): experts 1 and 2, weights e^3 / (e^3 + e^2) = 1 / (1 + e^-1).
  const double w = 1.0 / (1.0 + std::exp(-1.0));  // 0.7310585786
  ExpectRoute(Route({1, 3, 2, 0}, 2), {1, 2}, {w, 1 - w});
  // Only differences of logits matter, so huge logits neither overflow nor change the result.
  ExpectRoute(Route({1000, 1002, 1001, 999}, 2), {1, 2}, {w, 1 - w});
  ExpectRoute(Route({-1000, -998, -999, -1001}, 2), {1, 2}, {w, 1 - w});
}

TEST(Qwen3MoeRouting, TiesGoToTheLowerExpertIndex) {
  // Equal probabilities straddling the cut: the lower indices win, with equal weights.
  ExpectRoute(Route({1, 1, 1, 1}, 2), {0, 1}, {0.5, 0.5});
  ExpectRoute(Route({0.5f, 2, 2, 2, 1}, 2), {1, 2}, {0.5, 0.5});
  ExpectRoute(Route({0.5f, 2, 2, 2, 1}, 3), {1, 2, 3}, {1.0 / 3, 1.0 / 3, 1.0 / 3});
  // Three tied at 2 and the next best at 1: weights e^2 : e^2 : e^2 : e^1.
  const double z = 3 + std::exp(-1.0);
  ExpectRoute(Route({0.5f, 2, 2, 2, 1}, 4), {1, 2, 3, 4},
              {1 / z, 1 / z, 1 / z, std::exp(-1.0) / z});
  // A tie below the top: expert 4 (logit 3) first, then 0 before 2 (both 1).
  ExpectRoute(Route({1, 0, 1, 0, 3}, 2), {4, 0},
              {1.0 / (1.0 + std::exp(-2.0)), 1.0 - 1.0 / (1.0 + std::exp(-2.0))});
  ExpectRoute(Route({1, 0, 1, 0, 3}, 3), {4, 0, 2},
              {1.0 / (1.0 + 2 * std::exp(-2.0)), std::exp(-2.0) / (1.0 + 2 * std::exp(-2.0)),
               std::exp(-2.0) / (1.0 + 2 * std::exp(-2.0))});
}

TEST(Qwen3MoeRouting, NaNLogitsRankLast) {
  const float nan = std::numeric_limits<float>::quiet_NaN();
  const double w = 1.0 / (1.0 + std::exp(-1.0));
  ExpectRoute(Route({nan, 1, 0, nan}, 2), {1, 2}, {w, 1 - w});
  // The experts stay distinct even when NaN ones must be taken.
  const auto all = Route({nan, 1, nan}, 3);
  EXPECT_EQ(all[0].expert, 1);
  EXPECT_EQ(all[1].expert, 0);
  EXPECT_EQ(all[2].expert, 2);
}

// ---- Loading ------------------------------------------------------------------------------

RandomModelSpec SmallMoe() {
  RandomModelSpec s = MoeSpec(/*n_layers=*/1, /*d_model=*/64, /*head_dim=*/32, /*n_experts=*/6,
                              /*n_used=*/2, /*d_ff_expert=*/48);
  s.d_ff = 96;
  s.vocab_size = 300;
  s.max_context = 128;
  return s;
}

class Qwen3MoeLoad : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = std::filesystem::temp_directory_path() /
           ("primekv_qwen3moe_" +
            std::string(::testing::UnitTest::GetInstance()->current_test_info()->name()));
    std::filesystem::create_directories(dir_);
    base_ = dir_ / "base.gguf";
    ASSERT_TRUE(WriteRandomModel(SmallMoe(), base_).ok());
  }
  void TearDown() override { std::filesystem::remove_all(dir_); }

  // Copies base.gguf with `edit` applied to the writer after every key and tensor was copied,
  // skipping the key or tensor named `drop`.
  std::filesystem::path Rewrite(const std::string& drop,
                                const std::function<void(GgufWriter&)>& edit) {
    auto f = GgufFile::Open(base_);
    EXPECT_TRUE(f.ok());
    GgufWriter w;
    for (const GgufKv& kv : f->metadata())
      if (kv.key != drop && kv.key != "general.alignment") w.Add(kv.key, kv.value);
    for (const GgufTensorInfo& t : f->tensors()) {
      if (t.name == drop) continue;
      auto bytes = f->TensorData(t);
      EXPECT_TRUE(w.AddTensor(t.name, t.type, t.ne, {bytes.begin(), bytes.end()}).ok());
    }
    if (edit) edit(w);
    const auto path = dir_ / "edited.gguf";
    EXPECT_TRUE(w.WriteFile(path).ok());
    return path;
  }

  std::filesystem::path dir_, base_;
};

TEST_F(Qwen3MoeLoad, ReadsExpertConfigAndViews) {
  auto m = Model::Load(base_);
  ASSERT_TRUE(m.ok()) << m.message();
  const ModelConfig& c = m->config();
  EXPECT_EQ(c.arch, Arch::kQwen3Moe);
  EXPECT_EQ(c.rope_style, RopeStyle::kHalf);
  EXPECT_TRUE(c.qk_norm);
  EXPECT_EQ(c.n_experts, 6);
  EXPECT_EQ(c.n_experts_used, 2);
  EXPECT_EQ(c.d_ff_expert, 48);
  const LayerWeights& L = m->layer(0);
  EXPECT_EQ(L.router.rows, 6);
  EXPECT_EQ(L.router.cols, 64);
  EXPECT_TRUE(L.w_gate.empty());
  // Expert e of a stacked tensor starts e * rows_per_expert rows into it.
  EXPECT_EQ(L.gate_exps.rows_per_expert, 48);
  EXPECT_EQ(L.down_exps.rows_per_expert, 64);
  EXPECT_EQ(L.down_exps.all.cols, 48);
  EXPECT_EQ(L.up_exps.Expert(5).data, L.up_exps.all.Row(5 * 48));
  EXPECT_EQ(L.up_exps.Expert(5).rows, 48);
}

TEST_F(Qwen3MoeLoad, ExpertWidthFallsBackToFfnOverUsed) {
  // Without expert_feed_forward_length llama.cpp takes feed_forward_length / expert_used_count:
  // 96 / 2 = 48, which matches the stored experts.
  auto m = Model::Load(Rewrite("qwen3moe.expert_feed_forward_length", nullptr));
  ASSERT_TRUE(m.ok()) << m.message();
  EXPECT_EQ(m->config().d_ff_expert, 48);
}

TEST_F(Qwen3MoeLoad, RejectsBadExpertMetadata) {
  auto missing = Model::Load(Rewrite("qwen3moe.expert_count", nullptr));
  ASSERT_FALSE(missing.ok());
  EXPECT_NE(missing.message().find("qwen3moe.expert_count"), std::string::npos)
      << missing.message();

  auto too_many = Model::Load(Rewrite(
      "", [](GgufWriter& w) { w.Add("qwen3moe.expert_used_count", GgufValue::Uint32(7)); }));
  ASSERT_FALSE(too_many.ok());
  EXPECT_NE(too_many.message().find("expert_used_count"), std::string::npos) << too_many.message();

  auto shared = Model::Load(Rewrite(
      "", [](GgufWriter& w) { w.Add("qwen3moe.expert_shared_count", GgufValue::Uint32(1)); }));
  ASSERT_FALSE(shared.ok());
  EXPECT_NE(shared.message().find("shared experts"), std::string::npos) << shared.message();

  auto wrong_width = Model::Load(Rewrite("", [](GgufWriter& w) {
    w.Add("qwen3moe.expert_feed_forward_length", GgufValue::Uint32(64));
  }));
  ASSERT_FALSE(wrong_width.ok());
  EXPECT_NE(wrong_width.message().find("ffn_gate_exps"), std::string::npos)
      << wrong_width.message();
}

TEST_F(Qwen3MoeLoad, RejectsMissingOrFlatExpertTensors) {
  auto missing = Model::Load(Rewrite("blk.0.ffn_down_exps.weight", nullptr));
  ASSERT_FALSE(missing.ok());
  EXPECT_NE(missing.message().find("blk.0.ffn_down_exps.weight"), std::string::npos)
      << missing.message();

  // The same bytes as a 2-D [cols, n_experts * rows] tensor are not accepted as experts.
  auto f = GgufFile::Open(base_);
  ASSERT_TRUE(f.ok());
  const GgufTensorInfo* up = f->FindTensor("blk.0.ffn_up_exps.weight");
  ASSERT_NE(up, nullptr);
  ASSERT_EQ(up->ne, (std::vector<int64_t>{64, 48, 6}));
  auto bytes = f->TensorData(*up);
  std::vector<uint8_t> copy(bytes.begin(), bytes.end());
  auto flat = Model::Load(Rewrite("blk.0.ffn_up_exps.weight", [&](GgufWriter& w) {
    ASSERT_TRUE(w.AddTensor("blk.0.ffn_up_exps.weight", up->type, {64, 48 * 6}, copy).ok());
  }));
  ASSERT_FALSE(flat.ok());
  EXPECT_NE(flat.message().find("expected [64, 48, 6]"), std::string::npos) << flat.message();
}

TEST_F(Qwen3MoeLoad, PrefillEqualsTokenByTokenDecode) {
  // Grouping tokens by expert must not change any token's result: the same 40 tokens prefilled
  // at once and one at a time give the same logits (float sums differ only in rounding).
  auto m = Model::Load(base_);
  ASSERT_TRUE(m.ok()) << m.message();
  const int V = m->config().vocab_size, n = 40;
  std::vector<Token> ids(static_cast<size_t>(n));
  for (int i = 0; i < n; ++i) ids[static_cast<size_t>(i)] = static_cast<Token>((i * 37 + 5) % V);
  ThreadPool pool(2);
  ForwardWorkspace ws;
  KvCacheOptions kv;
  kv.dtype = KvDType::kF32;
  std::vector<float> all(static_cast<size_t>(n) * V), step(static_cast<size_t>(n) * V);
  KvCache c1 = m->NewCache(kv);
  ASSERT_TRUE(m->Forward(ids, c1, {true}, MatView<float>(all.data(), n, V), pool, ws).ok());
  KvCache c2 = m->NewCache(kv);
  for (int i = 0; i < n; ++i) {
    ASSERT_TRUE(m->Forward(std::span<const Token>(&ids[static_cast<size_t>(i)], 1), c2, {true},
                           MatView<float>(step.data() + static_cast<size_t>(i) * V, 1, V), pool, ws)
                    .ok());
  }
  float max_abs = 0, max_diff = 0;
  for (size_t i = 0; i < all.size(); ++i) {
    max_abs = std::max(max_abs, std::abs(all[i]));
    max_diff = std::max(max_diff, std::abs(all[i] - step[i]));
  }
  EXPECT_GT(max_abs, 0.1f);
  EXPECT_LE(max_diff, 1e-5f * max_abs);
}

}  // namespace
}  // namespace primekv
