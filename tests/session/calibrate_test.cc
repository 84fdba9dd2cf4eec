// Budget profiles measured from KVzip (CalibrateBudgetProfile) and used by a query-free press:
// the measured shares are KVzip's own per-head selections averaged over the contexts, and a
// press with the profile runs in every compression mode, keeping the profile's shares.
#include "primekv/session/calibrate.h"

#include <gtest/gtest.h>

#include <filesystem>
#include <string>
#include <utility>

#include "common/random_models.h"
#include "primekv/press/compressor.h"
#include "primekv/session/pipeline.h"

namespace primekv {
namespace {

const Model& CalibrationModel() {
  static const Model& model = []() -> const Model& {
    RandomModelSpec spec = SmallLlamaSpec(/*seed=*/31);
    spec.max_context = 4096;
    return *new Model(WriteLoadAndRemove(spec, "primekv_calibrate_test.gguf"));
  }();
  return model;
}

TEST(Calibrate, SharesAreKvzipsOwnSelectionsAveraged) {
  const Model& m = CalibrationModel();
  ThreadPool pool(2);
  const std::vector<std::vector<Token>> contexts = {RandomTokenIds(300, 1, 3, 500),
                                                    RandomTokenIds(240, 2, 3, 500)};
  CalibrationOptions opt;
  opt.ratios = {0.5, 0.9};
  int calls = 0;
  opt.progress = [&calls](int, int) { ++calls; };
  auto p = CalibrateBudgetProfile(m, contexts, opt, pool);
  ASSERT_TRUE(p.ok()) << p.message();
  EXPECT_EQ(calls, 2);
  ASSERT_EQ(p->n_layers, 2);
  ASSERT_EQ(p->n_kv_heads, 2);
  // KVzip run directly on each context, one ratio at a time.
  auto press = MakePress(*ParsePressSpec("kvzip"));
  ASSERT_TRUE(press.ok());
  const Compressor kvzip(m, std::move(*press));
  for (size_t r = 0; r < 2; ++r) {
    std::vector<double> want(4, 0.0), sq(4, 0.0);
    for (const auto& ctx : contexts) {
      auto pre = PrefillForPresses(m, kvzip.Needs(), {}, ctx, pool);
      ASSERT_TRUE(pre.ok()) << pre.message();
      ASSERT_TRUE(kvzip.Compress(pre->cache, opt.ratios[r], &pre->capture, pool).ok());
      for (int l = 0; l < 2; ++l) {
        for (int h = 0; h < 2; ++h) {
          const double share = pre->cache.Length(l, h) / static_cast<double>(ctx.size());
          want[l * 2 + h] += share / 2;
          sq[l * 2 + h] += share * share / 2;
        }
      }
    }
    double mean = 0;
    for (int i = 0; i < 4; ++i) {
      EXPECT_NEAR(p->At(r, i / 2, i % 2), want[i], 1e-12) << r << " " << i;
      EXPECT_NEAR(p->spread[r * 4 + i], std::sqrt(std::max(0.0, sq[i] - want[i] * want[i])), 1e-9);
      mean += p->At(r, i / 2, i % 2) / 4;
    }
    EXPECT_NEAR(mean, 1 - opt.ratios[r], 0.01);  // one threshold spends the uniform total
  }
  // Too long for the pass: KVzip's error reaches the caller.
  opt.window = 256;
  EXPECT_FALSE(CalibrateBudgetProfile(m, contexts, opt, pool).ok());
  EXPECT_FALSE(CalibrateBudgetProfile(m, {}, opt, pool).ok());
}

TEST(Calibrate, ProfiledPressIsQueryFreeAndRunsInEveryMode) {
  const Model& m = CalibrationModel();
  ThreadPool pool(2);
  CalibrationOptions opt;
  opt.ratios = {0.25, 0.5, 0.75, 0.9};
  auto profile = CalibrateBudgetProfile(m, {{RandomTokenIds(400, 3, 3, 500)}}, opt, pool);
  ASSERT_TRUE(profile.ok()) << profile.message();
  const auto path = std::filesystem::temp_directory_path() / "primekv_calibrate_profile.json";
  ASSERT_TRUE(profile->Save(path).ok());
  const auto ctx = RandomTokenIds(400, 4, 3, 500);
  // The profile as measured at 0.9, and nested below 0.9 (nest=) at 0.5.
  for (const auto& [suffix, ratio] :
       {std::pair<std::string, double>{"", 0.9}, {",nest=0.9", 0.5}}) {
    auto press = MakePress(*ParsePressSpec("primekv:profile=" + path.string() + suffix));
    ASSERT_TRUE(press.ok()) << press.message();
    EXPECT_TRUE(press->query_free);
    const Compressor comp(m, std::move(*press));
    for (CompressionMode mode :
         {CompressionMode::kContext, CompressionMode::kQuestion, CompressionMode::kMultiTurn,
          CompressionMode::kChunked, CompressionMode::kDecode, CompressionMode::kFirstQuestion}) {
      PipelineOptions po;
      po.mode = mode;
      po.schedule.ratio = ratio;
      po.schedule.chunk = 64;
      po.schedule.interval = 4;
      po.max_new_tokens = 8;
      auto r = RunPipeline(m, comp, po, ctx, {RandomTokenIds(8, 5, 3, 500)}, pool);
      ASSERT_TRUE(r.ok()) << CompressionModeName(mode) << suffix << ": " << r.message();
      int64_t kept = 0;
      for (int64_t k : r->kept_per_layer) kept += k;
      // The heads keep the profile's shares: unequal, and about the uniform total in all.
      const double uniform = 4.0 * KeepCount(400, ratio);
      EXPECT_NEAR(static_cast<double>(kept), uniform, 0.25 * uniform)
          << CompressionModeName(mode) << suffix;
    }
  }
  std::filesystem::remove(path);
}

}  // namespace
}  // namespace primekv
