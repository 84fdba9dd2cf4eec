// docs/adding-a-press.md followed step by step with a throwaway press, "vnorm" (keep the entries
// whose values are longest; the first `sinks` entries always stay). Its row is added to a copy
// of the registry table here only: the product registry does not know it.
#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <numeric>

#include "common/random_models.h"
#include "press/scorer_util.h"
#include "press/scorers.h"
#include "primekv/press/compressor.h"
#include "primekv/model/random_model.h"

// Step 1: the scorer and its factory (in the product: src/press/vnorm.cc).
namespace primekv::press_internal {
namespace {

class VNormScorer : public HeadScorer {
 public:
  explicit VNormScorer(ParamReader& r) : sinks_(r.Integer("sinks", 0, 0, kMaxPressLength)) {}
  PressNeeds Needs() const override { return {.values = true}; }

  void ScoreHead(const LayerInput& in, int h, std::vector<float>& s) const override {
    const MatView<const float> v = in.Values(h);
    for (int64_t j = 0; j < v.rows; ++j) s[j] = static_cast<float>(Norm(v.RowSpan(j)));
    ProtectFirst(s, sinks_);
  }

 private:
  int sinks_;
};

}  // namespace

ScorerResult MakeVNormScorer(const PressParams& p, const std::string& press) {
  return MakeScorer<VNormScorer>(p, press);
}

}  // namespace primekv::press_internal

namespace primekv {
namespace {

// Step 3: the registry row (in the product: one more line of the table in registry.cc).
std::vector<PressEntry> TableWithVNorm() {
  std::vector<PressEntry> t(PressTable().begin(), PressTable().end());
  t.push_back({{"vnorm", "|value|, the first `sinks` entries kept", "docs/adding-a-press.md",
                /*query_free=*/true},
               press_internal::MakeVNormScorer,
               BudgetKind::kUniform,
               {}});
  return t;
}

Result<Press> Make(const std::string& text, std::span<const PressEntry> table) {
  PRIMEKV_ASSIGN_OR_RETURN(const PressSpec spec, ParsePressSpec(text));
  return MakePress(spec, table);
}

TEST(AddingAPress, OnlyTheTableThatHasTheRowKnowsIt) {
  const auto table = TableWithVNorm();
  EXPECT_FALSE(Make("vnorm", PressTable()).ok());
  auto p = Make("vnorm:sinks=2", table);
  ASSERT_TRUE(p.ok()) << p.message();
  EXPECT_EQ(p->name, "vnorm:sinks=2");
  EXPECT_TRUE(p->query_free);
  EXPECT_EQ(p->budget.kind, BudgetKind::kUniform);
  auto ada = Make("adakv:vnorm", table);  // the budget wrapper row wraps it like any press
  ASSERT_TRUE(ada.ok()) << ada.message();
  EXPECT_EQ(ada->name, "adakv:vnorm");
  EXPECT_EQ(ada->budget.kind, BudgetKind::kAdaptive);
  // The resolved text spells out the default the reader filled in.
  EXPECT_EQ(p->resolved, "vnorm:sinks=2");
  EXPECT_EQ(ada->resolved, "adakv:vnorm:sinks=0");
  EXPECT_EQ(Make("vnorm:window=3", table).message(),
            "press vnorm: unknown parameter 'window' (known: sinks)");
  EXPECT_EQ(Make("vnorm:sinks=-1", table).message(),
            "press vnorm: sinks=-1 is outside [0, 16777216]");
}

TEST(AddingAPress, ScoresAreValueNormsWithSinksOnTop) {
  auto p = Make("vnorm:sinks=1", TableWithVNorm());
  ASSERT_TRUE(p.ok()) << p.message();
  ModelConfig c;
  c.n_layers = 1;
  c.n_heads = 2;
  c.n_kv_heads = 1;
  c.head_dim = 2;
  HeadEntries e;
  e.keys.assign(8, 0.0f);
  e.values = {0, 1, 3, 4, 1, 1, 0, 2};  // norms 1, 5, sqrt(2), 2
  e.positions = {0, 1, 2, 3};
  const std::vector<HeadEntries> heads{e};
  LayerInput in(c);
  in.heads = heads;
  HeadScores s(1, std::vector<float>(4, 0.0f));
  p->scorer->Score(in, s);
  EXPECT_FLOAT_EQ(s[0][0], 6.0f);  // the sink: max + 1
  EXPECT_FLOAT_EQ(s[0][1], 5.0f);
  EXPECT_FLOAT_EQ(s[0][2], std::sqrt(2.0f));
  EXPECT_FLOAT_EQ(s[0][3], 2.0f);
  EXPECT_EQ(SelectTopK(s[0], 2), (std::vector<int32_t>{0, 1}));
}

TEST(AddingAPress, CompressesARealCacheByValueNorm) {
  const RandomModelSpec spec = SmallGqaSpec(5);
  const auto path =
      std::filesystem::temp_directory_path() / (std::to_string(::getpid()) + "_primekv_vnorm.gguf");
  const Status written = WriteRandomModel(spec, path);
  ASSERT_TRUE(written.ok()) << written.message();
  auto model = Model::Load(path);
  std::filesystem::remove(path);
  ASSERT_TRUE(model.ok()) << model.message();
  auto p = Make("vnorm:sinks=4", TableWithVNorm());
  ASSERT_TRUE(p.ok()) << p.message();
  Compressor comp(*model, std::move(p).value());
  ThreadPool pool(2);
  KvCache cache = model->NewCache({KvDType::kF32});
  std::vector<Token> tokens(100);
  std::iota(tokens.begin(), tokens.end(), 3);
  std::vector<float> logits(300);
  ForwardWorkspace ws;
  ASSERT_TRUE(model->Forward(tokens, cache, {}, {logits.data(), 1, 300}, pool, ws).ok());
  // Expected: per head the 4 sinks and the 46 other rows with the longest values.
  std::vector<std::vector<int32_t>> want;
  for (int l = 0; l < 2; ++l) {
    for (int h = 0; h < 2; ++h) {
      std::vector<float> k, v;
      std::vector<int32_t> pos;
      cache.ReadHead(l, h, &k, &v, &pos);
      std::vector<int32_t> rows(96);
      std::iota(rows.begin(), rows.end(), 4);
      const auto norm2 = [&](int32_t r) {
        double s = 0;
        for (int c = 0; c < 16; ++c) s += static_cast<double>(v[r * 16 + c]) * v[r * 16 + c];
        return s;
      };
      // Longest first; ties to the lower row, as SelectTopK breaks them.
      std::stable_sort(rows.begin(), rows.end(),
                       [&](int32_t a, int32_t b) { return norm2(a) > norm2(b); });
      std::vector<int32_t> kept{0, 1, 2, 3};
      kept.insert(kept.end(), rows.begin(), rows.begin() + 46);
      std::sort(kept.begin(), kept.end());
      want.push_back(kept);
    }
  }
  ASSERT_TRUE(comp.Compress(cache, 0.5, nullptr, pool).ok());
  for (int l = 0; l < 2; ++l) {
    for (int h = 0; h < 2; ++h) {
      std::vector<int32_t> pos;
      cache.ReadHead(l, h, nullptr, nullptr, &pos);
      EXPECT_EQ(pos, want[static_cast<size_t>(l * 2 + h)]) << "layer " << l << " head " << h;
    }
  }
}

}  // namespace
}  // namespace primekv
