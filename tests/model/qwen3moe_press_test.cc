// KV-cache compression on a qwen3moe model: the presses touch only attention, so every press
// of the registry must run on a mixture-of-experts model and halve its cache at ratio 0.5.
#include <gtest/gtest.h>

#include <filesystem>
#include <string>
#include <vector>

#include "common/random_models.h"
#include "primekv/press/compressor.h"
#include "primekv/session/pipeline.h"

namespace primekv {
namespace {

const Model& MoeModel() {
  static const Model* model = [] {
    RandomModelSpec s = MoeSpec(/*n_layers=*/2, /*d_model=*/128, /*head_dim=*/64,
                                /*n_experts=*/8, /*n_used=*/2, /*d_ff_expert=*/64);
    s.d_ff = 256;
    s.vocab_size = 512;
    s.max_context = 4096;
    s.seed = 21;
    return new Model(
        WriteAndLoad(s, std::filesystem::temp_directory_path() / "primekv_qwen3moe_press.gguf"));
  }();
  return *model;
}

std::vector<Token> Tokens(int n, int seed) {
  std::vector<Token> t(static_cast<size_t>(n));
  for (int i = 0; i < n; ++i)
    t[static_cast<size_t>(i)] = static_cast<Token>(3 + (i * 97 + seed) % 500);
  return t;
}

TEST(Qwen3MoePresses, EveryPressHalvesTheCacheAndGenerates) {
  const Model& m = MoeModel();
  ThreadPool pool(2);
  const auto ctx = Tokens(400, 1);
  const std::vector<std::vector<Token>> questions = {Tokens(12, 7)};
  int ran = 0;
  for (const PressInfo& info : ListPresses()) {
    // "oracle" reads the true future queries and runs only under the fidelity protocol.
    if (info.name == "none" || info.name == "oracle") continue;
    // The registry lists the head-adaptive wrapper as a template.
    const std::string name = info.name == "adakv:<press>" ? "adakv:primekv" : info.name;
    SCOPED_TRACE(name);
    ++ran;
    auto spec = ParsePressSpec(name);
    ASSERT_TRUE(spec.ok());
    auto press = MakePress(*spec);
    ASSERT_TRUE(press.ok()) << press.message();
    Compressor comp(m, std::move(press).value());
    PipelineOptions opt;
    opt.schedule.ratio = 0.5;
    opt.max_new_tokens = 8;
    auto r = RunPipeline(m, comp, opt, ctx, questions, pool);
    ASSERT_TRUE(r.ok()) << r.message();
    ASSERT_EQ(r->turns.size(), 1u);
    EXPECT_TRUE(!r->turns[0].tokens.empty() || r->turns[0].stopped_at_end);
    for (Token t : r->turns[0].tokens) EXPECT_LT(t, m.config().vocab_size);
    EXPECT_GT(r->kv_bytes_full, 0u);
    // Half of the context kept; page granularity and per-head rounding allow a little more.
    EXPECT_LE(r->kv_bytes_compressed, r->kv_bytes_full * 55 / 100)
        << r->kv_bytes_compressed << " of " << r->kv_bytes_full;
    EXPECT_GE(r->kv_bytes_compressed, r->kv_bytes_full * 40 / 100);
  }
  EXPECT_GE(ran, 11);  // every registry press but none and oracle
}

TEST(Qwen3MoePresses, RatioZeroChangesNothing) {
  // With nothing evicted, the compressed pipeline must generate exactly what no press does.
  const Model& m = MoeModel();
  ThreadPool pool(2);
  const auto ctx = Tokens(300, 3);
  const std::vector<std::vector<Token>> questions = {Tokens(10, 5)};
  auto run = [&](const std::string& name, double ratio) {
    Compressor comp(m, std::move(MakePress(*ParsePressSpec(name))).value());
    PipelineOptions opt;
    opt.schedule.ratio = ratio;
    opt.max_new_tokens = 16;
    auto r = RunPipeline(m, comp, opt, ctx, questions, pool);
    Check(r.ok(), "pipeline");
    return r->turns[0].tokens;
  };
  const auto base = run("none", 0.0);
  ASSERT_FALSE(base.empty());
  EXPECT_EQ(run("primekv", 0.0), base);
  EXPECT_EQ(run("snapkv", 0.0), base);
}

}  // namespace
}  // namespace primekv
